"""systemd's notification protocol (sd_notify), without a dependency.

Under ``Type=notify`` systemd passes the path of an AF_UNIX datagram socket
in ``NOTIFY_SOCKET``; the service sends newline-separated ``KEY=value``
lines to it: ``READY=1`` once it serves, ``WATCHDOG=1`` at least every
``WATCHDOG_USEC`` microseconds while healthy, ``STATUS=...`` for
``systemctl status``, ``RELOADING=1``, ``STOPPING=1`` and
``EXTEND_TIMEOUT_USEC=`` (more time for a start that waits for a backend). A path starting
with ``@`` names a socket in the abstract namespace. Outside systemd
(no ``NOTIFY_SOCKET``) every call does nothing and returns False.

Nothing here raises: a notification that cannot be sent is logged once per
kind of failure and the service carries on (a missing WATCHDOG=1 is then
what tells systemd).
"""

import os
import socket
import time

import structlog

LOG = structlog.get_logger("instanceha.sdnotify")


class Notifier:
    """Sends notifications to the socket named at construction."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.path = environ.get("NOTIFY_SOCKET") or None
        self.watchdog_usec = _watchdog_usec(environ)
        self._failed = set()

    @property
    def enabled(self):
        return self.path is not None

    @property
    def watchdog_interval(self):
        """Seconds between WATCHDOG=1 messages (half systemd's timeout, as
        sd_watchdog_enabled(3) advises), or None without a watchdog."""
        if not self.watchdog_usec:
            return None
        return self.watchdog_usec / 2e6

    def _address(self):
        if self.path.startswith("@"):
            return "\0" + self.path[1:]
        return self.path

    def send(self, **fields):
        """Send ``KEY=value`` lines (keyword names upper-cased); True when
        the datagram went out."""
        if self.path is None:
            return False
        lines = []
        for key, value in fields.items():
            text = str(value).replace("\n", " ")
            lines.append("%s=%s" % (key.upper(), text))
        data = ("\n".join(lines) + "\n").encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.connect(self._address())
                sock.sendall(data)
        except OSError as e:
            kind = type(e).__name__
            if kind not in self._failed:
                self._failed.add(kind)
                LOG.warning("sd_notify_failed", socket=self.path,
                            reason="%s: %s" % (kind, e),
                            effect="systemd does not hear from instanceha; "
                                   "with a watchdog it restarts the service")
            return False
        return True

    def ready(self, status):
        return self.send(ready=1, status=status)

    def watchdog(self, status=None):
        if status is None:
            return self.send(watchdog=1)
        return self.send(watchdog=1, status=status)

    def status(self, status):
        return self.send(status=status)

    def extend_timeout(self, seconds, status):
        """Ask systemd (>= 236) for ``seconds`` more before the start (or
        stop) times out: the start is waiting for a backend, not stuck."""
        return self.send(extend_timeout_usec=int(max(1.0, seconds) * 1e6),
                         status=status)

    def reloading(self, status="reloading the configuration"):
        # systemd >= 253 wants the monotonic time with RELOADING=1.
        return self.send(reloading=1, status=status,
                         monotonic_usec=int(time.monotonic() * 1e6))

    def stopping(self, status="stopping"):
        return self.send(stopping=1, status=status)


def _watchdog_usec(environ):
    """WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset
    or ours), else None."""
    try:
        usec = int(environ.get("WATCHDOG_USEC") or 0)
    except ValueError:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec if usec > 0 else None
