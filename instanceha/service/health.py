"""What the service says about itself: the status file, its role in the
group, and what /healthz and /readyz judge."""

import json
import os
import socket
import tempfile
import time

import structlog

from instanceha import runtime, watchdog
from instanceha.util.process import pid_namespace

LOG = structlog.get_logger("instanceha.service")

#: Seconds between two rewrites of the status file, at least.
STATUS_MIN_GAP = 0.2
#: Seconds the status loop waits for a change before rewriting the file
#: anyway: with the gap after a write, how often a running engine
#: rewrites it (the file's write_interval; ``instanceha status`` calls a
#: file not rewritten for a few intervals stale).
STATUS_EVERY = 2.0


def status_gap(took):
    """Seconds to wait after a status write that took ``took``: at least
    STATUS_MIN_GAP, and nine times the write (a tenth of the time)."""
    return max(STATUS_MIN_GAP, 9 * took)


class Health:
    """Service's status and health half (instanceha.service.Service)."""

    #: The wall clock of the status file's written_at and stopped_at (the
    #: engine's own clock may be a simulation's or a test's).
    wall = staticmethod(time.time)
    #: Seconds the last status write took.
    _status_took = 0.0

    def write_status(self, final=False):
        """The engine's snapshot, and what ``instanceha status`` needs to
        tell a running engine's from a dead one's: when it was written,
        by which process, how often it is rewritten, /healthz's verdict,
        and (``final``: the last write, at stop) that the engine
        stopped."""
        path = self.conf.status_file
        if not path:
            return
        data = self.engine.snapshot()
        ok, why = self.liveness()
        data.update(written_at=self.wall(), pid=os.getpid(),
                    hostname=socket.gethostname(), pid_ns=pid_namespace(),
                    write_interval=round(STATUS_EVERY + status_gap(
                        self._status_took), 3),
                    live={"ok": ok, "reason": why})
        if final:
            data["stopped_at"] = data["written_at"]
        if self.api is not None and self.api.port:
            data["api"] = "http://%s:%d" % (self.conf.api.listen_address,
                                            self.api.port)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # One string by the C encoder (json.dump to a file, or any
        # indent, encodes in Python: ~10x the CPU at thousands of hosts).
        text = json.dumps(data, default=str)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".status-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def _status_loop(self):
        """Rewrite the status file soon after a change and every 2 s
        anyway: at most every 0.2 s however many hosts change at once,
        and never more than a tenth of the time (a write of thousands of
        hosts during a storm waits ten times its own duration)."""
        while not self._status_stop.is_set():
            self._status_dirty.wait(STATUS_EVERY)
            self._status_dirty.clear()
            started = time.monotonic()
            try:
                # The snapshot is a few dicts per host, all dropped once
                # written: see runtime.collection_paused.
                with runtime.collection_paused():
                    self.write_status()
            except Exception as e:
                LOG.warning("status_write_failed", reason=str(e))
            self._status_took = time.monotonic() - started
            self._status_stop.wait(status_gap(self._status_took))

    def role(self):
        """acting (alone, or elected and acting), elected (waiting one
        lease), standby, or lost."""
        if self.membership is None or self._acting:
            return "acting"
        role = self.membership.status()["role"]
        # Elected and past the wait, but the engine not started yet.
        return "elected" if role == "acting" else role

    def health_view(self):
        """What /healthz and /readyz judge (watchdog.liveness/readiness)."""
        rec = self.reconciler.health()
        view = {"starting": self.awaiting.text(), "role": self.role(),
                "acting_since": self.acting_since,
                "last_pass_at": rec.get("last_pass_at"),
                "passes": self.reconciler.passes}
        m = self.membership
        if m is not None:
            st = m.status()
            view.update(group=st["group"], acting_member=st["acting_member"],
                        beat_attempt_at=m.beat_attempt_at,
                        beat_ok_at=m.beat_ok_at,
                        backend_error=st["backend_error"],
                        backend_error_since=st["backend_error_since"],
                        reason=st["reason"])
        return view

    def liveness(self):
        """(healthy, reason) for GET /healthz."""
        return watchdog.liveness(self.health_view(), self.clock(),
                                 self.conf.api.stale_after)

    def readiness(self):
        """(ready, role, reason) for GET /readyz."""
        return watchdog.readiness(self.health_view())
