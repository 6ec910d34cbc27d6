"""The reconciler: level-triggered safety net, one os-services call a pass.

Each pass reads every nova-compute service and says, for every host, what
is true now: heartbeat fresh (HEARTBEAT_OK), stale or down (HEARTBEAT_LOST),
or forced down by somebody else (FORCED_DOWN). The state machine decides
what that means; the reconciler never acts. A dead compute sends no
notification, so this poll is what detects it when no other source does.
"""

import threading

import structlog

from instanceha.events import Event, EventKind as E

LOG = structlog.get_logger("instanceha.reconciler")
OUR_PREFIX = "instanceha:"


def classify(service, now, delta):
    """(EventKind, reason) for one ComputeService at time ``now``."""
    age = None if service.updated_at is None else now - service.updated_at
    fresh = age is not None and age <= delta
    ours = (service.disabled_reason or "").startswith(OUR_PREFIX)
    if service.forced_down and not ours:
        return E.FORCED_DOWN, ("forced_down set with reason %r"
                               % (service.disabled_reason or ""))
    if service.forced_down:
        # Nova reports any forced-down service as down; only the heartbeat
        # tells whether the compute process is running again.
        if fresh:
            return E.HEARTBEAT_OK, "reporting again (%.0fs ago)" % age
        return E.HEARTBEAT_LOST, _lost_reason(age)
    if service.state != "up":
        return E.HEARTBEAT_LOST, "Nova reports the service down" + (
            "" if age is None else " (last report %.0fs ago)" % age)
    if not fresh:
        return E.HEARTBEAT_LOST, _lost_reason(age) + " (Nova still says up)"
    return E.HEARTBEAT_OK, "reporting"


def _lost_reason(age):
    if age is None:
        return "never reported"
    return "last report %.0fs ago" % age


class Reconciler:

    def __init__(self, conf, compute, sink, clock):
        self._conf = conf
        self._compute = compute
        self._sink = sink
        self._clock = clock
        self._stop = threading.Event()
        self._thread = None
        self.passes = 0
        self.errors = 0
        self.last_pass_at = None
        self.last_error = None

    def run_once(self):
        """One pass: one API call, one event per compute host."""
        services = self._compute.list_services()
        now = self._clock()
        counts = {}
        for svc in services:
            kind, reason = classify(svc, now, self._conf.detection.delta)
            counts[kind.value] = counts.get(kind.value, 0) + 1
            self._sink(Event(kind, svc.id, now, name=svc.host, reason=reason,
                             source="reconciler",
                             detail={"forced_down": svc.forced_down,
                                     "updated_at": svc.updated_at,
                                     "status": svc.status,
                                     "disabled_reason": svc.disabled_reason}))
        self.passes += 1
        self.last_pass_at = now
        LOG.debug("reconcile_pass", services=len(services), **counts)
        return len(services)

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.run_once()
                self.last_error = None
            except Exception as e:
                self.errors += 1
                self.last_error = str(e)
                LOG.warning("reconcile_failed", reason=str(e),
                            retry_in=self._conf.detection.poll_interval)
            self._stop.wait(self._conf.detection.poll_interval)

    def start(self):
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="instanceha-reconciler")
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    def health(self):
        return {"passes": self.passes, "errors": self.errors,
                "last_pass_at": self.last_pass_at,
                "last_error": self.last_error}
