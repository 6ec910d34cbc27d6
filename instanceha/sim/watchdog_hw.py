"""The simulated hosts' watchdog hardware (issue 37, section 2).

Each simulated host with a watchdog has a *test device*: a FIFO under the
run's own directory (never ``/dev/watchdog*``: :func:`device_path`
refuses anything that :func:`instanceha.agent.watchdog.is_real` calls
real). The host's agent opens it with the real
:class:`instanceha.agent.watchdog.Device` (which arms it) and writes to
it; :class:`Hardware` holds the FIFO's read end and plays the chip:

* a write arms it and feeds it; a ``V`` as the last byte written before
  the writer closes is the magic close (disarmed);
* armed and unfed for its timeout (on the simulator's clock), it resets
  the host: ``SimCloud.watchdog_reset`` (a reboot, or a power off);
* it runs on the host's power: a host powered off (or whose power was
  lost) has its watchdog disarmed, and a new boot starts it disarmed
  (the agent arms it again).

:meth:`Hardware.poll` is called by the agents' thread
(:class:`instanceha.sim.agents.SimAgents`) with the simulator's time;
nothing here sleeps or runs a thread.
"""

import errno
import os

import structlog

from instanceha.agent import watchdog

LOG = structlog.get_logger("instanceha.sim.watchdog_hw")

#: what the hardware does when it fires
REBOOT = "reboot"
POWER_OFF = "off"
ACTIONS = (REBOOT, POWER_OFF)


def device_path(directory, host):
    """The test device of ``host`` under ``directory``; raises ValueError
    for a place where a real watchdog could be."""
    path = os.path.join(os.path.abspath(directory), "wdt-%s" % host)
    if watchdog.is_real(path):
        raise ValueError("%s: a real watchdog's path; simulated hosts use "
                         "test devices only" % path)
    return path


class Hardware:
    """The watchdog chip of simulated host ``host`` behind the FIFO
    ``path`` (created here). ``timeout``: seconds unfed before it fires;
    ``action``: :data:`REBOOT` or :data:`POWER_OFF`."""

    def __init__(self, host, path, timeout, action=REBOOT):
        if action not in ACTIONS:
            raise ValueError("watchdog action: one of %s" % ", ".join(
                ACTIONS))
        if watchdog.is_real(path):
            raise ValueError("%s: not a test device" % path)
        self.host = host
        self.path = path
        self.timeout = float(timeout)
        self.action = action
        if os.path.lexists(path):
            os.unlink(path)
        os.mkfifo(path, 0o600)
        # The read end, held for the whole run: the agent's open for
        # writing never blocks, and what it writes is read exactly.
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.armed = False
        self.disarmed = False       # the last writer closed with a V
        self.last_fed = None
        self.feeds = 0
        #: times it fired
        self.fired = []

    def _read(self):
        out = b""
        while self._fd is not None:
            try:
                data = os.read(self._fd, 65536)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                raise
            if not data:
                break
            out += data
        return out

    def power_lost(self):
        """The host has no power: the chip is off (disarmed), and what
        was written is gone."""
        self._read()
        self.armed = False
        self.last_fed = None

    def poll(self, now, powered):
        """Take what was written since the last poll; return True when
        the chip fires at ``now`` (armed and unfed for its timeout; the
        caller resets the host). ``powered``: whether the host has
        power (without, the chip does nothing)."""
        data = self._read()
        if not powered:
            self.power_lost()
            return False
        if data:
            self.feeds += len(data)
            self.last_fed = now
            if data.endswith(watchdog.MAGIC_CLOSE):
                self.armed, self.disarmed = False, True
            else:
                self.armed, self.disarmed = True, False
        if self.armed and now - self.last_fed > self.timeout:
            self.armed = False
            self.fired.append(now)
            LOG.warning("sim.watchdog_fired", host=self.host,
                        unfed=round(now - self.last_fed, 3),
                        timeout=self.timeout, action=self.action)
            return True
        return False

    def close(self):
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(self.path)
        except OSError:
            pass
