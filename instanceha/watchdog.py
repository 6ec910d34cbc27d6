"""Tell systemd how the service is: READY=1, WATCHDOG=1, STATUS=.

:class:`SystemdLink` runs one thread in a service started by systemd
(``NOTIFY_SOCKET`` set; see etc/systemd/instanceha.service):

- ``READY=1`` once the first reconcile pass completed (Nova's view of every
  compute service was read) and the engine applied it, or at the second
  pass at the latest; at once on a standby replica, which acts on nothing
  until elected;
- ``WATCHDOG=1`` every half ``WatchdogSec`` while the engine is healthy:
  its lock answers (the status snapshot is taken from this thread, so a
  deadlocked engine blocks it and the watchdog pings stop), none of its
  threads died, and the reconciler attempted a pass (successful or not)
  within ``[DEFAULT] watchdog_stall_timeout``. Without pings systemd kills
  and restarts the process; the restart resumes from the journal;
- ``STATUS=`` what it is doing, for ``systemctl status``.

A standby replica runs no reconciler: it is healthy while its coordination
heartbeat loop keeps trying (it follows the group, or waits for the
backend, which a restart would only wait for again). :func:`liveness` and
:func:`readiness` are the same judgements for GET /healthz and /readyz.
"""

import time

import structlog

from instanceha.util import periodic

LOG = structlog.get_logger("instanceha.watchdog")

#: seconds between STATUS= updates when systemd set no watchdog
STATUS_INTERVAL = 10.0


class Liveness:
    """Is the reconciler still trying? Judged from its attempt count
    (passes plus failed passes) changing, on a monotonic clock."""

    def __init__(self, stall_after, monotonic=time.monotonic,
                 what="the reconciler attempted no pass"):
        self.stall_after = stall_after
        self._monotonic = monotonic
        self.what = what
        self._attempts = None
        self._changed_at = None

    def judge(self, attempts, dead_threads=()):
        """(healthy, reason)."""
        now = self._monotonic()
        if attempts != self._attempts:
            self._attempts, self._changed_at = attempts, now
        if dead_threads:
            return False, ("engine thread(s) stopped: %s"
                           % ", ".join(sorted(dead_threads)))
        idle = now - self._changed_at
        if idle > self.stall_after:
            return False, ("%s for %.0fs (watchdog_stall_timeout %.0fs)"
                           % (self.what, idle, self.stall_after))
        return True, "reconciler attempted a pass %.0fs ago" % idle


def _ago(now, t):
    return "%.1fs ago" % max(0.0, now - t)


def liveness(view, now, stale_after):
    """(healthy, reason) for GET /healthz: should a probe restart this
    process? ``view`` is Service.health_view().

    - waiting at start for a backend: healthy (the reason says what it
      waits for): a restart would only wait again, and lose the back-off;
    - a standby (or an elected member in its wait): healthy while its
      coordination heartbeat loop attempted a round within
      ``stale_after``, whether the backend answered (it follows the
      group) or not (it waits for it, as above); unhealthy when the loop
      stopped: it is stuck, and could never take over;
    - acting: the reconciler completed a pass within ``stale_after``,
      counted from when this process started acting (a standby elected
      an hour after its start gets its time for a first pass);
    - a member whose leadership lapsed: unhealthy (it exits).
    """
    if view.get("starting"):
        return True, view["starting"]
    role = view.get("role")
    if role == "lost":
        return False, "leadership lost: %s" % (view.get("reason") or "")
    if role in ("standby", "elected"):
        attempt = view.get("beat_attempt_at")
        if attempt is None or now - attempt > stale_after:
            return False, ("%s: the coordination heartbeat attempted "
                           "nothing for more than %.0fs" % (role,
                                                            stale_after))
        ok_at = view.get("beat_ok_at")
        if view.get("backend_error") is None and ok_at is not None:
            return True, ("%s in group %s: the backend answered %s"
                          % (role, view.get("group"), _ago(now, ok_at)))
        since = view.get("backend_error_since")
        return True, ("%s: waiting for the coordination backend (%s)%s"
                      % (role, view.get("backend_error"),
                         " since %s" % time.strftime(
                             "%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
                         if since is not None else ""))
    last = view.get("last_pass_at")
    began = view.get("acting_since")
    if last is None or (began is not None and last < began):
        if began is None:
            return True, "starting"
        if now - began > stale_after:
            return False, "the reconciler has never completed a pass"
        return True, "starting: waiting for the first reconcile pass"
    if now - last > stale_after:
        return False, "the reconciler's last pass was %.0fs ago" % (
            now - last)
    return True, "reconciler passed %.1fs ago" % (now - last)


def readiness(view):
    """(ready, role, reason) for GET /readyz: does this process act for
    every host now? Only the acting member (or the only process) is
    ready, once its first reconcile pass completed; a standby, an elected
    member in its wait and a start that waits for a backend are not."""
    starting = view.get("starting")
    if starting:
        return False, "starting", starting
    role = view.get("role")
    if role == "acting":
        if view.get("passes"):
            return True, role, "acting for every host"
        return False, "starting", ("acting: waiting for the first "
                                   "reconcile pass")
    if role == "standby":
        acting = view.get("acting_member")
        return False, role, ("standby in group %s: %s" % (
            view.get("group"), "%s acts" % acting if acting
            else "no acting member known yet"))
    return False, role or "unknown", view.get("reason") or role


def summary(snapshot, now):
    """One line for STATUS=: hosts per state, holds, the last pass."""
    counts = {}
    for h in snapshot.get("hosts", []):
        counts[h["state"]] = counts.get(h["state"], 0) + 1
    text = "watching %d compute host(s)" % sum(counts.values())
    if counts:
        text += " (%s)" % ", ".join("%d %s" % (n, s)
                                    for s, n in sorted(counts.items()))
    cluster = snapshot.get("cluster") or {}
    if not cluster.get("ok", True):
        text += "; HOLD: %s" % cluster.get("reason")
    unprotected = snapshot.get("unprotected") or {}
    if unprotected:
        text += "; %d UNPROTECTED" % len(unprotected)
    rec = (snapshot.get("sources") or {}).get("reconciler") or {}
    if rec.get("last_pass_at") is not None:
        text += "; last reconcile %.0fs ago" % max(
            0.0, now - rec["last_pass_at"])
    if rec.get("last_error"):
        text += "; last reconcile failed: %s" % rec["last_error"]
    return text


class SystemdLink:
    """Feeds systemd from a running :class:`instanceha.service.Service`."""

    def __init__(self, service, notifier, clock=time.time,
                 monotonic=time.monotonic):
        self.service = service
        self.notifier = notifier
        self.clock = clock
        self.liveness = Liveness(service.conf.watchdog_stall_timeout,
                                 monotonic)
        self.member_liveness = Liveness(
            service.conf.watchdog_stall_timeout, monotonic,
            what="the coordination heartbeat attempted nothing")
        self.ready = False
        self._healthy = True
        # Quickly until ready (READY=1 soon after the first pass), then
        # every half watchdog period.
        self._periodic = periodic.Periodic(
            "instanceha-systemd", self.step,
            lambda: (self.interval if self.ready
                     else min(self.interval, 0.2)),
            error_event="watchdog_step_failed", log=LOG)

    @property
    def interval(self):
        return self.notifier.watchdog_interval or STATUS_INTERVAL

    def check(self):
        """(healthy, ready to serve, STATUS= text)."""
        svc = self.service
        if not svc.acting:
            # A standby is alive while its heartbeat loop keeps trying.
            m = svc.membership
            st = m.status()
            thread = getattr(m, "_thread", None)
            dead = [thread.name] if thread is not None \
                and not thread.is_alive() else []
            ok, why = self.member_liveness.judge(m.beats, dead)
            text = "standby in group %s: %s" % (
                st.get("group"), st.get("reason") or "not elected")
            if st.get("backend_error"):
                text += "; coordination backend: %s" % st["backend_error"]
            if not ok:
                text = "UNHEALTHY: %s; %s" % (why, text)
            return ok, True, text
        rec = svc.reconciler
        threads = svc.engine.threads()
        if rec.thread is not None:
            threads.append(rec.thread)
        dead = [t.name for t in threads if not t.is_alive()]
        ok, why = self.liveness.judge(rec.passes + rec.errors, dead)
        # Ready once the engine has applied the first pass (every host
        # known, so STATUS= counts them), or at the latest at the second.
        ready = rec.passes > 1 or (rec.passes == 1 and svc.engine.settled())
        # Takes the engine's lock: a deadlocked engine stops here.
        text = summary(svc.engine.snapshot(), self.clock())
        if not ok:
            text = "UNHEALTHY: %s; %s" % (why, text)
        elif not ready:
            text = "starting: waiting for the first reconcile pass; " + text
        return ok, ready, text

    def step(self):
        """One round: READY=1 once, WATCHDOG=1 while healthy, STATUS=."""
        ok, ready, text = self.check()
        if ok != self._healthy:
            self._healthy = ok
            log = LOG.info if ok else LOG.error
            log("watchdog", healthy=ok, reason=text,
                effect=("WATCHDOG=1 sent again" if ok else
                        "no WATCHDOG=1: systemd restarts the service when "
                        "WatchdogSec runs out"))
        if ready and ok and not self.ready:
            self.ready = True
            LOG.info("ready", reason="first reconcile pass completed"
                     if self.service.acting else "standby joined its group",
                     effect="READY=1 sent to systemd")
            self.notifier.ready(text)
        if ok and self.notifier.watchdog_interval:
            self.notifier.watchdog(text)
        else:
            self.notifier.status(text)
        return ok

    @property
    def thread(self):
        """The feeding thread; None before start or when systemd does not
        listen."""
        return self._periodic.thread

    def start(self):
        if not self.notifier.enabled:
            return
        self._periodic.start()

    def stop(self):
        self._periodic.stop(5)
        if self.notifier.enabled:
            self.notifier.stopping()
