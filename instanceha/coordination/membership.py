"""This process's membership of the group of replicas and its leadership
(the rules are in :mod:`instanceha.coordination`): joining, the heartbeat
that renews both or takes the leadership, the rule that says whether this
member may act now, and what ``instanceha status`` shows of the group."""

import os
import socket
import threading
import time
import uuid

import structlog
from tooz import coordination as tooz_coord

from instanceha.coordination.backend import (CoordinationError, fail_fast,
                                             probe, unreachable)
from instanceha.log import mask_url
from instanceha.util.periodic import Periodic

LOG = structlog.get_logger("instanceha.coordination")

#: Exit status of a member whose leadership lapsed (its service manager
#: restarts it; it joins again as a standby).
EXIT_LOST = 3


def monotonic():
    """Seconds on a clock that keeps counting while the process is
    stopped and, where the OS has one (Linux CLOCK_BOOTTIME), while the
    machine is suspended: a suspended host's lease ran out all the same."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        try:
            return time.clock_gettime(boottime)
        except OSError:
            pass
    return time.monotonic()


def member_id():
    return "%s:%d:%s" % (socket.gethostname(), os.getpid(),
                         uuid.uuid4().hex[:6])


class Membership:
    """This process's membership of the group and its leadership.

    ``on_elected()`` runs on a thread of its own when this member takes the
    leadership (the service resumes from the journal and starts acting);
    ``on_lost(reason)`` when a leadership it held lapses or is taken away
    (the service exits). Both run at most once.
    """

    def __init__(self, url, group="instanceha", lease=15, margin=5.0,
                 interval=2.0, on_elected=None, on_lost=None,
                 clock=time.time, mono=monotonic, coordinator=None,
                 member=None, sleep=None, spawn=None):
        self.url = url
        self.group = group
        self.lease = int(lease)
        self.margin = float(margin)
        self.interval = float(interval)
        self.on_elected = on_elected or (lambda: None)
        self.on_lost = on_lost or (lambda reason: None)
        self.clock = clock
        self.mono = mono
        self.member = member or member_id()
        self._coord = coordinator
        self._lock_obj = None
        self._leader = False
        self._lost = None            # why the leadership ended, once
        self._last_renewal = None    # mono() at the start of the last renewal
        self._acts_from = None       # mono() when an elected member may act
        self.acting_since = None     # wall clock, for status
        #: This member's election number: one more than the highest term
        #: in the group when it was elected. Status names the acting member
        #: by it, not by comparing the members' wall clocks.
        self.term = None
        #: The heartbeat loop, for liveness (this process's clock): how
        #: many rounds it began, when it last began one and when the
        #: backend last answered; since when it has not.
        self.beats = 0
        self.beat_attempt_at = None
        self.beat_ok_at = None
        self.error_since = None
        self.started_at = clock()
        self._members = {}
        self._members_at = None
        self._last_error = None
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self.sleep = sleep or self._stop.wait
        self.spawn = spawn or _election_thread
        self._heartbeat = Periodic("instanceha-coordination", self.beat,
                                   self.interval, stop=self._stop,
                                   error_event="coordination_beat_failed",
                                   log=LOG)

    # -- start -------------------------------------------------------------
    def connect(self):
        """Reach the backend and join the group. Raises
        CoordinationError (one line) when it cannot."""
        try:
            if self._coord is None:
                probe(self.url, max(1, self.lease // 3))
                self._coord = tooz_coord.get_coordinator(
                    self.url, self.member.encode(),
                    lock_timeout=str(self.lease),
                    membership_timeout=str(self.lease),
                    timeout=str(max(1, self.lease // 3)))
            self._coord.start(start_heart=False)
            fail_fast(self._coord)
            group = self.group.encode()
            try:
                self._coord.create_group(group).get()
            except tooz_coord.GroupAlreadyExist:
                pass
            self._coord.join_group(group, self._capabilities()).get()
            self._lock_obj = self._coord.get_lock(
                ("%s-leader" % self.group).encode())
        except Exception as e:   # noqa: BLE001 - one line for the operator
            raise CoordinationError("%s: %s" % (type(e).__name__, e),
                                    retry=unreachable(e)) from e
        self.beat_ok_at = self.clock()
        self._refresh_members()
        LOG.info("coordination_joined", member=self.member, group=self.group,
                 lease=self.lease, margin=self.margin,
                 reason="standing by until elected")

    def start(self):
        """Beat at once, then every ``interval`` seconds after the end of
        the previous beat, until :meth:`stop`."""
        self._heartbeat.start()

    def stop(self):
        """Leave cleanly (SIGTERM): release the leadership at once so a
        standby takes over without waiting for the lease."""
        self._heartbeat.stop(self.interval + 5)
        try:
            if self._leader and self._lock_obj is not None:
                self._lock_obj.release()
            self._coord.leave_group(self.group.encode()).get()
        except Exception as e:   # noqa: BLE001 - best effort at stop
            LOG.warning("coordination_leave_failed", reason=str(e))
        try:
            self._coord.stop()
        except Exception as e:   # noqa: BLE001
            LOG.warning("coordination_stop_failed", reason=str(e))

    # -- the rule ----------------------------------------------------------
    def may_act(self):
        """None while this member holds a leadership renewed less than
        lease - margin seconds ago; else why not."""
        with self._mu:
            if self._lost is not None:
                return "leadership lost: %s" % self._lost
            if not self._leader:
                return "standby: another member of group %s acts" \
                    % self.group
            now = self.mono()
            age = now - self._last_renewal
            early = self._acts_from - now
        limit = self.lease - self.margin
        if age >= limit:
            why = ("leadership not renewed for %.1f s (lease %d s, margin "
                   "%.1f s): it may have passed to another member"
                   % (age, self.lease, self.margin))
            self._lose(why)
            return "leadership lost: %s" % why
        if early > 0:
            return ("elected: waiting %.1f s more (one lease) in case the "
                    "backend lost the previous leader's lease early"
                    % early)
        return None

    def wait_out(self):
        """Run on the election thread: wait until the previous leader,
        whatever the backend forgot, can no longer act; then call
        ``on_elected``. Returns without calling it if the leadership
        lapses or the member stops meanwhile."""
        while not self._stop.is_set():
            why = self.may_act()
            if why is None:
                LOG.warning("acting_after_wait", member=self.member,
                            waited=self.lease,
                            reason="one lease passed since the election: "
                                   "no previous leader can still act")
                self.on_elected()
                return
            with self._mu:
                if self._lost is not None or not self._leader:
                    return
                left = self._acts_from - self.mono()
            self.sleep(max(0.01, min(left, self.interval)))

    def _lose(self, why):
        with self._mu:
            if self._lost is not None:
                return
            self._lost = why
            self._leader = False
        LOG.error("leadership_lost", member=self.member, reason=why,
                  effect="no further action by this member")
        self.on_lost(why)

    # -- the heartbeat -----------------------------------------------------
    def beat(self):
        """One round: renew the membership (and the leadership), or try to
        take the leadership."""
        if self._lost is not None:
            return
        self.beats += 1
        self.beat_attempt_at = self.clock()
        started = self.mono()
        try:
            self._coord.heartbeat()
            if self._leader:
                self._renew_leadership()
                with self._mu:
                    if self._lost is None:
                        self._last_renewal = max(self._last_renewal, started)
            elif self._lock_obj.acquire(blocking=False):
                self._elected(started)
            self._ok()
        except _Lost as e:
            self._lose(str(e))
            return
        except Exception as e:   # noqa: BLE001 - retried next round
            self._failed(e)
        if self._leader:
            self.may_act()       # a lapse is noticed even with no action
        if self._members_at is None \
                or self.mono() - self._members_at >= max(self.interval, 2.0):
            self._refresh_members()

    def _renew_leadership(self):
        """Extend the lock's lease, and prove it is still ours."""
        try:
            held = self._lock_obj.heartbeat()
        except Exception as e:   # noqa: BLE001
            if isinstance(e, (tooz_coord.ToozConnectionError,
                              tooz_coord.OperationTimedOut, OSError,
                              TimeoutError)) \
                    or type(e).__name__ in ("ConnectionError",
                                            "TimeoutError"):
                raise    # unreachable backend: try again next round
            # redis: LockNotOwnedError (the key expired or was lost)
            raise _Lost("the backend no longer holds our leadership: "
                        "%s: %s" % (type(e).__name__, e))
        if held is False:
            raise _Lost("the leadership lock is no longer held")
        # etcd3gw: tooz ignores the answer of the lease keep-alive; an
        # expired lease answers TTL -1 there.
        lease = getattr(self._lock_obj, "_lease", None)
        if lease is not None and hasattr(lease, "refresh"):
            if int(lease.refresh()) < 0:
                raise _Lost("the leadership lease expired at the backend")

    def _elected(self, started):
        # The group as it is now: the previous leader's term, if it is
        # still listed, is the highest.
        self._refresh_members()
        with self._mu:
            terms = [caps.get("term") for caps in self._members.values()]
            self.term = 1 + max([t for t in terms if isinstance(t, int)]
                                + [0])
            self._leader = True
            self._last_renewal = started
            self._acts_from = self.mono() + self.lease
            self.acting_since = self.clock()
        LOG.warning("leadership_taken", member=self.member, group=self.group,
                    wait=self.lease,
                    reason="elected: acting for every host after one lease, "
                           "in case the backend lost the previous "
                           "leader's lease early")
        try:
            self._coord.update_capabilities(
                self.group.encode(), self._capabilities()).get()
        except Exception as e:   # noqa: BLE001 - status only
            LOG.warning("coordination_capabilities_failed", reason=str(e))
        self.spawn(self.wait_out)

    def _ok(self):
        self.beat_ok_at = self.clock()
        if self._last_error is not None:
            LOG.info("coordination_recovered", member=self.member,
                     reason="the backend answers again")
            self._last_error = None
            self.error_since = None

    def _failed(self, e):
        text = mask_url("%s: %s" % (type(e).__name__, e))
        if self._last_error is None:
            LOG.warning("coordination_unreachable", member=self.member,
                        acting=self._leader, reason=text)
            self.error_since = self.clock()
        self._last_error = text

    def _capabilities(self):
        return {"host": socket.gethostname(), "pid": os.getpid(),
                "started_at": self.started_at,
                "acting_since": self.acting_since, "term": self.term}

    def _refresh_members(self):
        try:
            group = self.group.encode()
            ids = self._coord.get_members(group).get()
            members = {}
            for m in ids:
                try:
                    caps = self._coord.get_member_capabilities(
                        group, m).get()
                except Exception:   # noqa: BLE001 - left meanwhile
                    continue
                key = m.decode() if isinstance(m, bytes) else str(m)
                members[key] = caps if isinstance(caps, dict) else {}
            with self._mu:
                self._members = members
                self._members_at = self.mono()
        except Exception as e:   # noqa: BLE001 - status only
            self._failed(e)
            self._members_at = self.mono()

    # -- status ------------------------------------------------------------
    @property
    def leader(self):
        return self._leader and self._lost is None

    def status(self):
        """What ``instanceha status`` shows about the group."""
        why = self.may_act()
        with self._mu:
            members = dict(self._members)
            renewed = self._last_renewal
        members.setdefault(self.member, self._capabilities())
        members[self.member] = dict(members[self.member],
                                    acting_since=self.acting_since,
                                    term=self.term)
        # The latest election wins: its term, never the members' clocks
        # (each acting_since is its own host's wall clock).
        acting = [(caps.get("term") if isinstance(caps.get("term"), int)
                   else 0, m)
                  for m, caps in members.items() if caps.get("acting_since")]
        leader = max(acting)[1] if acting else None
        if self.leader:
            leader = self.member
        return {
            "backend": mask_url(self.url),
            "group": self.group,
            "member": self.member,
            "role": "acting" if why is None
            else "lost" if self._lost is not None
            else "elected" if self.leader else "standby",
            "reason": why,
            "acting_member": leader,
            "acting_since": (members.get(leader) or {}).get("acting_since")
            if leader else None,
            "lease": self.lease,
            "margin": self.margin,
            "lease_left": None if renewed is None or not self.leader
            else round(self.lease - (self.mono() - renewed), 2),
            "backend_error": self._last_error,
            "backend_error_since": self.error_since,
            "term": self.term,
            "members": [{"id": m, "host": c.get("host"), "pid": c.get("pid"),
                         "started_at": c.get("started_at"),
                         "acting_since": c.get("acting_since")}
                        for m, c in sorted(members.items())],
        }


def _election_thread(target):
    threading.Thread(target=target, daemon=True,
                     name="instanceha-elected").start()


class _Lost(Exception):
    pass
