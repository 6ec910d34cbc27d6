"""A test watchdog: a plain file under the test's temp dir that the
agent's :class:`~instanceha.agent.watchdog.Device` writes to, and a
reader that plays the hardware. Nothing sleeps: :meth:`poll` is given
the (fake) clock's time, reads what was written since, and "resets" the
simulated host when it was not fed for its timeout."""

import os
import tempfile


class FileHardware:
    """The hardware behind the test device ``path`` (created here, empty;
    it must be under the system's temp dir)."""

    def __init__(self, path, timeout):
        path = os.path.realpath(str(path))
        assert path.startswith(os.path.realpath(tempfile.gettempdir())), \
            "test devices live under the temp dir only: %s" % path
        self.path = path
        self.timeout = timeout
        open(path, "wb").close()
        self._read = 0
        self.armed = False
        self.last_fed = None
        self.resets = 0
        self.reset_at = None
        self.disarmed = False

    def poll(self, now):
        """Take what was written since the last poll (at ``now``), then
        reset the host when it is armed and unfed for the timeout.
        Returns True when it reset the host at this poll."""
        with open(self.path, "rb") as f:
            f.seek(self._read)
            data = f.read()
        self._read += len(data)
        if data:
            self.armed = True
            self.disarmed = False
            if data.endswith(b"V"):
                self.disarmed = True
                self.armed = False
            self.last_fed = now
        if self.armed and now - self.last_fed > self.timeout:
            self.resets += 1
            self.reset_at = now
            self.armed = False
            return True
        return False
