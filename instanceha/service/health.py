"""What the service says about itself: the status file, its role in the
group, and what /healthz and /readyz judge."""

import json
import os
import tempfile

import structlog

from instanceha import watchdog

LOG = structlog.get_logger("instanceha.service")


class Health:
    """Service's status and health half (instanceha.service.Service)."""

    def write_status(self):
        path = self.conf.status_file
        if not path:
            return
        data = self.engine.snapshot()
        if self.api is not None and self.api.port:
            data["api"] = "http://%s:%d" % (self.conf.api.listen_address,
                                            self.api.port)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".status-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, path)

    def _status_loop(self):
        """Rewrite the status file soon after a change (at most every
        0.2 s, however many hosts change at once) and every 2 s anyway."""
        while not self._status_stop.is_set():
            self._status_dirty.wait(2.0)
            self._status_dirty.clear()
            try:
                self.write_status()
            except Exception as e:
                LOG.warning("status_write_failed", reason=str(e))
            self._status_stop.wait(0.2)

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
