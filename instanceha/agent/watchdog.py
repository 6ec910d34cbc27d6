"""The watchdog device the agent feeds (issue 37, section 2).

A Linux watchdog (``/dev/watchdog``: the hardware's, or the ``softdog``
module) resets the machine when nobody writes to it for its timeout. The
agent opens it (which arms it), sets the timeout (the ``WDIOC_SETTIMEOUT``
ioctl, on a character device only), writes one byte to feed it while
:mod:`instanceha.agent.selffence` says the host may live, and on an
orderly stop disarms it with the *magic close*: it writes ``V``, then
closes (a driver built with ``nowayout`` ignores that, and the host is
reset: doc/agent.md says so). A crash closes the file without the ``V``:
the watchdog stays armed and resets the host unless a restarted agent
feeds it again within the timeout.

Any other path (a FIFO, a plain file) is a *test device*: the same writes,
no ioctl; its reader plays the hardware (``tests/unit/agent/
watchdog_hw.py``). When the environment variable
:data:`NO_REAL_ENV` is set (the test suite sets it for itself and every
process it starts), a path under ``/dev/`` or any character device is
refused: no test can arm this machine's watchdog.
"""

import fcntl
import os
import stat
import struct

import structlog

LOG = structlog.get_logger("instanceha.agent.watchdog")

#: Set (to anything) by the test suite: real watchdogs are refused.
NO_REAL_ENV = "INSTANCEHA_NO_REAL_WATCHDOG"
#: linux/watchdog.h: _IOWR('W', 6, int) and _IOR('W', 5, int).
WDIOC_SETTIMEOUT = 0xC0045706
WDIOC_KEEPALIVE = 0x80045705
FEED = b"."
MAGIC_CLOSE = b"V"


class WatchdogError(Exception):
    """The device cannot be armed, fed or disarmed (the message says
    which and why)."""


def is_real(path):
    """True for what may reset this machine: a path under /dev/ or a
    character device."""
    real = os.path.realpath(path)
    if real.startswith("/dev/") or os.path.basename(real).startswith(
            "watchdog"):
        return True
    try:
        return stat.S_ISCHR(os.stat(real).st_mode)
    except OSError:
        return False


class Device:
    """One open watchdog (see the module's text). ``timeout`` is in
    seconds; ``environ`` is read for :data:`NO_REAL_ENV`."""

    def __init__(self, path, timeout, environ=None):
        self.path = path
        self.timeout = int(timeout)
        self._environ = os.environ if environ is None else environ
        self._fd = None
        self.real = False
        self.feeds = 0

    @property
    def armed(self):
        return self._fd is not None

    def check(self):
        """What :meth:`arm` would refuse, without opening (arming) the
        device: raises WatchdogError."""
        if is_real(self.path) and self._environ.get(NO_REAL_ENV):
            raise WatchdogError(
                "watchdog %s: a real watchdog, refused while %s is set "
                "(tests use test devices only)" % (self.path, NO_REAL_ENV))
        if not os.path.exists(self.path):
            raise WatchdogError("watchdog %s: no such device (load "
                                "softdog, or name the hardware's)"
                                % self.path)
        if not os.access(self.path, os.W_OK):
            raise WatchdogError("watchdog %s: not writable by this "
                                "process" % self.path)

    def arm(self):
        """Open the device (arming it) and set its timeout; raises
        WatchdogError."""
        if self._fd is not None:
            return
        self.check()
        real = is_real(self.path)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as e:
            raise WatchdogError("watchdog %s: cannot open (%s)"
                                % (self.path, e.strerror or e))
        self.real = real and self._is_chr(fd)
        if self.real:
            try:
                got = fcntl.ioctl(fd, WDIOC_SETTIMEOUT,
                                  struct.pack("i", self.timeout))
                self.timeout = struct.unpack("i", got)[0] or self.timeout
            except OSError as e:
                LOG.warning("agent.watchdog_timeout_not_set",
                            device=self.path, error=str(e),
                            effect="the device's own timeout applies")
        # Fed before it reads armed: a beat sent meanwhile by another
        # thread must not report a chip that was never fed.
        try:
            os.write(fd, FEED)
        except OSError as e:
            # Opened, so armed: left open (a close without the magic
            # character keeps a real one armed anyway); the next feed
            # is tried at the next check.
            self._fd = fd
            raise WatchdogError("watchdog %s: cannot feed (%s)"
                                % (self.path, e.strerror or e))
        self.feeds += 1
        self._fd = fd
        LOG.info("agent.watchdog_armed", device=self.path,
                 timeout=self.timeout, real=self.real)

    @staticmethod
    def _is_chr(fd):
        try:
            return stat.S_ISCHR(os.fstat(fd).st_mode)
        except OSError:
            return False

    def feed(self):
        """One keep-alive; raises WatchdogError (not armed, or the write
        failed)."""
        if self._fd is None:
            raise WatchdogError("watchdog %s: not armed" % self.path)
        try:
            os.write(self._fd, FEED)
        except OSError as e:
            raise WatchdogError("watchdog %s: cannot feed (%s)"
                                % (self.path, e.strerror or e))
        self.feeds += 1

    def disarm(self):
        """The magic close: ``V``, then close. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, MAGIC_CLOSE)
        except OSError as e:
            LOG.error("agent.watchdog_disarm_failed", device=self.path,
                      error=str(e),
                      effect="the watchdog may reset this host")
        finally:
            os.close(fd)
        LOG.info("agent.watchdog_disarmed", device=self.path)

    def abandon(self):
        """Close without the magic character: the watchdog stays armed
        (what a crash does; used by tests and by a self-fence)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class Absent:
    """No watchdog device (``[agent] watchdog_device`` unset) while the
    agent still probes its peers: never armed, so beats say "none" and
    the engines never count on a watchdog of this host."""

    path = None
    timeout = 0
    armed = False

    def check(self):
        pass

    def arm(self):
        raise WatchdogError("no watchdog device configured")

    def feed(self):
        raise WatchdogError("no watchdog device configured")

    def disarm(self):
        pass

    def abandon(self):
        pass
