"""The control-plane monitor: can the cloud carry out a recovery now?

A fenced host whose servers cannot be rebuilt is the worst outcome of an
HA service: the servers were running, now they are down and stay down. An
evacuation needs Nova's API, a nova-conductor (the API casts the rebuild
to it), a nova-scheduler (the conductor asks it for a destination) and
Placement (the scheduler asks it for candidates). Every
``[control_plane] poll_interval`` this monitor reads the scheduler and
conductor services Nova lists (one os-services call per binary), makes one
small Placement read, and looks at the reconciler's passes. ``status()``
answers (ok, reason) from what it last saw, without I/O; the engine holds
every new fencing decision while it is not ok.

Not ok, with a reason naming what is down:

* every nova-scheduler (or nova-conductor) Nova lists is down, judged as
  the reconciler judges a compute heartbeat (``fsm.nova_row.classify``: Nova's
  state, and staleness on Nova's clock, ``reconciler.NovaClock``): several
  rows with one up is fine (a retired controller's row stays down
  forever). A binary Nova lists no row of is not judged: with cells v2 a
  super-conductor may have none, and holding forever would help nobody;
* Placement unanswered ``failures`` times in a row;
* Nova's API: any call failed (this monitor's, the reconciler's, an
  action's: the driver notes each in ``api_record``) since the last
  os-services read that succeeded, or that read is older than about one
  poll interval (``[control_plane] view_max_age``): a power-off needs a
  fresh, whole view of Nova, and during an API outage it would only
  lengthen the outage (nothing can be isolated or evacuated);
* not checked yet, or no check finished for much longer than a check can
  take (the monitor stuck): it cannot tell, so nothing is fenced.

For Placement, fewer than ``failures`` failures in a row keep the last
verdict, so one transient error does not flap the status. One structlog
line is logged each time the set of problems changes.
"""

import datetime
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, \
    Set, Tuple

import structlog

from instanceha.drivers.compute import base as cb
from instanceha.events import EventKind as E
from instanceha.drivers.compute.nova_clock import NovaClock
from instanceha.fsm.nova_row import classify
from instanceha.sources.base import Sink
from instanceha.util import periodic

LOG = structlog.get_logger("instanceha.control_plane")

#: Rows named in a reason, at most (the count says the rest).
SHOWN = 3

#: binary -> (up, total, [why each down one is])
Verdict = Dict[str, Tuple[int, int, List[str]]]
#: (key, reason) of something not ready
Problem = Tuple[str, str]


def judge_services(services: Iterable[cb.ComputeService],
                   binaries: Iterable[str], now: float,
                   delta: float) -> Verdict:
    """{binary: (up, total, [why each down one is])} for each of
    ``binaries`` Nova lists at least one row of; ``now`` is on Nova's clock
    (like the reconciler's)."""
    verdict: Verdict = {}
    for binary in binaries:
        rows = sorted((s for s in services if s.binary == binary),
                      key=lambda s: s.host)
        if not rows:
            continue
        up = 0
        down: List[str] = []
        for svc in rows:
            kind, why = classify(svc, now, delta)
            if kind is E.HEARTBEAT_OK:
                up += 1
            else:
                down.append("%s: %s" % (svc.host, why))
        verdict[binary] = (up, len(rows), down)
    return verdict


class ControlPlaneMonitor:

    def __init__(self, conf: Any, compute: cb.ComputeDriver,
                 clock: Callable[[], float] = time.time,
                 monotonic: Optional[Callable[[], float]] = None,
                 reconciler_health: Optional[
                     Callable[[], Mapping[str, Any]]] = None) -> None:
        """``reconciler_health``: the reconciler's ``health`` (passes,
        errors, last_error), or None."""
        self._conf = conf
        self._opts = conf.control_plane
        self._compute = compute
        self._clock = clock
        if monotonic is None:
            monotonic = time.monotonic if clock is time.time else clock
        self._monotonic = monotonic
        self._reconciler_health = reconciler_health
        # Nova's clock as the reconciler sees it (one per Nova: the
        # driver's), so control services and computes are judged alike.
        self._nova_clock = getattr(compute, "nova_clock", None) \
            or NovaClock()
        self._api_record = getattr(compute, "api_record", None) \
            or cb.CallRecord()
        self._lock = threading.RLock()
        self._periodic = periodic.Periodic(
            "instanceha-control-plane", self.check_once,
            lambda: self._opts.poll_interval,
            error_event="control_plane_check_error", log=LOG)
        self.checks = 0
        self.last_check_at: Optional[float] = None       # local clock
        # monotonic, when the last check ended
        self._checked_mono: Optional[float] = None
        # Nova services: the verdict of the last answer (None: none yet)
        # and the calls failed since.
        self._services: Optional[Verdict] = None
        # why they are not judged at all
        self._services_skip: Optional[str] = None
        self._api_failures = 0
        self._api_error: Optional[str] = None
        # Placement: answered once at least; failures in a row since.
        self._placement_answered = False
        self._placement_failures = 0
        self._placement_error: Optional[str] = None
        self._placement_skip: Optional[str] = None   # why it is not checked
        # Reconciler: (passes, errors) at its last success seen.
        self._rec_base = (0, 0)
        self._rec_failures = 0
        self._rec_error: Optional[str] = None
        # What was last logged: no line for the initial "not checked yet".
        self._reported: Tuple[bool, Tuple[str, ...]] = (False, ("unchecked",))
        self._warned: Set[str] = set()

    # -- checking ------------------------------------------------------------
    def check_once(self) -> Tuple[bool, str]:
        """One check (the I/O); returns status()."""
        now = self._clock()
        self._check_services(now)
        self._check_placement()
        self._check_reconciler()
        with self._lock:
            self.checks += 1
            self.last_check_at = now
            self._checked_mono = self._monotonic()
        return self.status()

    def _check_services(self, now: float) -> None:
        if not self._opts.services:
            with self._lock:
                self._services, self._services_skip = {}, "none configured"
            return
        started = self._monotonic()
        try:
            services = self._compute.list_control_services()
        except NotImplementedError:
            self._warn_once("services", "the compute driver cannot list "
                                        "nova-scheduler and nova-conductor; "
                                        "they are not judged")
            with self._lock:
                self._services = {}
                self._services_skip = "not listed by the compute driver"
            return
        except Exception as e:   # noqa: BLE001 - ComputeError, or worse
            self._api_record.failed(self._monotonic(), "GET /os-services",
                                    e)
            with self._lock:
                self._api_failures += 1
                self._api_error = _text(e)
            LOG.debug("control_plane_call_failed", what="os-services",
                      failures=self._api_failures, reason=_text(e))
            return
        ended = self._monotonic()
        self._api_record.services_read(started, ended)
        self._nova_clock.observe(services, started, ended)
        nova_now = self._nova_clock.now(ended)
        verdict = judge_services(
            services, self._opts.services,
            nova_now if nova_now is not None else now,
            self._conf.detection.delta)
        for binary in self._opts.services:
            if binary in verdict:
                self._warned.discard("absent:" + binary)
            else:
                self._warn_once("absent:" + binary,
                                "Nova lists no %s service; it is not judged "
                                "(with cells v2 a super-conductor may have "
                                "no row)" % binary)
        with self._lock:
            self._services, self._services_skip = verdict, None
            self._api_failures, self._api_error = 0, None

    def _check_placement(self) -> None:
        skip: Optional[str] = None
        if not self._opts.check_placement:
            skip = "disabled ([control_plane] check_placement = false)"
        else:
            try:
                self._compute.check_placement()
            except cb.NoEndpoint as e:
                skip = "not checked: %s" % e
            except NotImplementedError:
                skip = "not checked: the compute driver cannot"
            except Exception as e:   # noqa: BLE001 - ComputeError, or worse
                with self._lock:
                    self._placement_skip = None
                    self._placement_failures += 1
                    self._placement_error = _text(e)
                LOG.debug("control_plane_call_failed", what="placement",
                          failures=self._placement_failures, reason=_text(e))
                return
        if skip is not None and self._opts.check_placement:
            self._warn_once("placement", "Placement " + skip)
        with self._lock:
            self._placement_skip = skip
            if skip is None:
                self._placement_answered = True
            self._placement_failures, self._placement_error = 0, None

    def _check_reconciler(self) -> None:
        if self._reconciler_health is None:
            return
        h = self._reconciler_health()
        passes, errors = h.get("passes", 0), h.get("errors", 0)
        error = h.get("last_error")
        with self._lock:
            if error is None:
                self._rec_base = (passes, errors)
                self._rec_failures, self._rec_error = 0, None
                return
            if passes != self._rec_base[0]:
                # A pass succeeded since the last look, then at least the
                # last one failed: count from that one.
                self._rec_base = (passes, errors - 1)
            self._rec_failures = errors - self._rec_base[1]
            self._rec_error = error

    def _warn_once(self, key: str, reason: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            LOG.warning("control_plane_not_checked", reason=reason)

    # -- verdict -------------------------------------------------------------
    def stale_after(self) -> float:
        """Seconds without a finished check after which the last verdict
        is no longer trusted: a check plus its retries, with every call
        (one per service, one to Placement) taking its full timeout."""
        calls = len(self._opts.services) + 1
        return (self._opts.poll_interval * (self._opts.failures + 1)
                + calls * self._conf.api_timeout)

    def view_max_age(self) -> float:
        """Seconds after which the last successful os-services read is
        not a fresh view of Nova any more."""
        return (self._opts.view_max_age
                or 1.5 * self._conf.detection.poll_interval)

    def _view_problem(self, mono: float) -> Optional[Problem]:
        """(key, reason) when no fresh, whole view of Nova backs a
        power-off now, else None."""
        # The reason names *when* (UTC, whole seconds), never how long
        # ago: it becomes a held host's reason, and a reason that changed
        # at every tick would journal and log the host again each time.
        read_at, answered_at, failed_at, failure = self._api_record.view()
        if failed_at is not None and (read_at is None
                                      or failed_at >= read_at):
            return ("api", "Nova API: a call failed at %s, since the last "
                           "successful read of Nova's services: %s"
                    % (self._utc(mono, failed_at), failure))
        if read_at is None:
            return ("unchecked", "Nova's services not read yet")
        age = mono - answered_at
        if age > self.view_max_age():
            return ("view", "no fresh view of Nova: its services last read "
                            "at %s (more than %.1fs ago)"
                    % (self._utc(mono, answered_at), self.view_max_age()))
        return None

    def _utc(self, mono: float, then: float) -> str:
        """The monotonic instant ``then`` on this node's wall clock."""
        at = self._clock() - max(0.0, mono - then)
        return datetime.datetime.fromtimestamp(
            int(at), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _problems(self, mono: float) -> List[Problem]:
        """[(key, reason)] of everything not ready now."""
        if self._checked_mono is None:
            return [("unchecked", "not checked yet")]
        limit = self._opts.failures
        problems: List[Problem] = []
        age = mono - self._checked_mono
        if age > self.stale_after():
            problems.append(("stale", "no check finished for %.0fs: the "
                                      "monitor cannot tell" % age))
        view = self._view_problem(mono)
        if view is not None:
            problems.append(view)
        if view is not None and view[0] != "view":
            pass        # Nova's API failing, or never read: said above
        elif self._services is None:
            problems.append(("unchecked", "Nova services not checked yet: %s"
                             % (self._api_error or "no answer")))
        else:
            for binary in self._opts.services:
                verdict = self._services.get(binary)
                if verdict is None or verdict[0] > 0:
                    continue
                _, total, down = verdict
                more = ("; and %d more" % (len(down) - SHOWN)
                        if len(down) > SHOWN else "")
                problems.append((binary, "%s: 0 of %d up (%s%s)" % (
                    binary, total, "; ".join(down[:SHOWN]), more)))
        if self._placement_skip is None:
            if self._placement_failures >= limit:
                problems.append(("placement", "placement: unreachable: %s "
                                              "(%d checks in a row)"
                                 % (self._placement_error,
                                    self._placement_failures)))
            elif not self._placement_answered:
                problems.append(("unchecked", "placement not checked yet: %s"
                                 % (self._placement_error or "no answer")))
        return problems

    def status(self) -> Tuple[bool, str]:
        """(ok, reason) for the engine's gate: no I/O."""
        if not self._opts.enabled:
            return True, ""
        with self._lock:
            problems = self._problems(self._monotonic())
            ok = not problems
            reason = "; ".join(text for _, text in problems)
            keys = (ok, tuple(key for key, _ in problems))
            if keys != self._reported:
                self._reported = keys
                if ok:
                    LOG.info("control_plane", ok=True,
                             reason="ready for a recovery: Nova's API, "
                                    "scheduler, conductor and Placement "
                                    "answer")
                else:
                    LOG.warning("control_plane", ok=False,
                                reason="no fencing: " + reason)
        return ok, reason

    def health(self) -> Dict[str, Any]:
        if not self._opts.enabled:
            return {"enabled": False}
        ok, reason = self.status()
        with self._lock:
            h: Dict[str, Any] = {"ok": ok, "reason": reason, "checks": self.checks,
                 "last_check_at": self.last_check_at,
                 "api_failures": self._api_failures,
                 "last_error": self._api_error}
            for binary in self._opts.services:
                if self._services is None:
                    h[binary] = "not checked yet"
                elif self._services_skip is not None:
                    h[binary] = self._services_skip
                elif binary not in self._services:
                    h[binary] = "not listed by Nova; not judged"
                else:
                    h[binary] = "%d of %d up" % self._services[binary][:2]
            if self._placement_skip is not None:
                h["placement"] = self._placement_skip
            elif self._placement_failures:
                h["placement"] = "%d checks failed in a row: %s" % (
                    self._placement_failures, self._placement_error)
            else:
                h["placement"] = ("answering" if self._placement_answered
                                  else "not checked yet")
            if self._reconciler_health is not None:
                h["reconciler_failures"] = self._rec_failures
            return h

    # -- thread ---------------------------------------------------------------
    # An exception from check_once is a bug: logged, and checking goes on.
    def start(self, sink: Optional[Sink] = None) -> None:
        """``sink`` is accepted (sources.base.Source) and unused: this
        watch sends no events; the engine's gate asks its status()."""
        if not self._opts.enabled:
            return
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop(5)


def _text(error: BaseException) -> str:
    return str(error) or type(error).__name__
