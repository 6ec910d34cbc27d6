"""The hardware behind the real-bed agents' test watchdog devices.

Each agent of :class:`functional.realnova.agents.HostAgents` built with a
watchdog writes to a plain file of its own under the test's directory
(never ``/dev/watchdog``, never softdog: those reset this machine). A
thread here reads every device every ``interval`` seconds, as a watchdog
chip would count: a write arms it (and feeds it), a write ending in ``V``
disarms it (the magic close), and an armed device unfed for its timeout
*resets its host*. A reset is recorded (monotonic and wall time), and
``on_reset(host)`` is called when given (a test that lets a live host be
reset takes its nova-compute and agent down there; test_bmc_down.py's
victim is dead already, and a reset of any other host fails its test).
"""

import os
import threading
import time


class Device:
    """One device as the hardware sees it."""

    def __init__(self, host, path, timeout):
        self.host = host
        self.path = str(path)
        self.timeout = float(timeout)
        self.read = 0
        self.armed = False
        self.disarmed = False
        self.last_fed = None
        #: (monotonic, wall) of each reset
        self.resets = []

    def poll(self, now, wall):
        """True when the device resets its host at this poll."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return False
        if size < self.read:        # a new boot's empty device
            self.read = 0
        if size > self.read:
            with open(self.path, "rb") as f:
                f.seek(self.read)
                data = f.read(size - self.read)
            self.read += len(data)
            self.armed, self.disarmed = not data.endswith(b"V"), \
                data.endswith(b"V")
            self.last_fed = now
        if self.armed and now - self.last_fed > self.timeout:
            self.armed = False
            self.resets.append((self.last_fed + self.timeout,
                                wall - (now - self.last_fed - self.timeout)))
            return True
        return False


class WatchdogHardware:
    """The watchdogs of ``agents`` (a HostAgents with a watchdog), read
    every ``interval`` s from :meth:`start` to :meth:`stop`."""

    def __init__(self, agents, on_reset=None, interval=0.1):
        self.devices = {h: Device(h, agents.device_of(h),
                                  agents.watchdog["timeout"])
                        for h in agents.bed.hosts}
        self.on_reset = on_reset
        self.interval = interval
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="watchdog-hardware")

    def _run(self):
        while not self._stop.is_set():
            for host, dev in self.devices.items():
                if dev.poll(time.monotonic(), time.time()) \
                        and self.on_reset is not None:
                    try:
                        self.on_reset(host)
                    except Exception as e:  # noqa: BLE001 - seen by the test
                        self.errors.append((host, repr(e)))
            self._stop.wait(self.interval)

    def armed(self, host):
        return self.devices[host].armed

    def resets(self, host):
        return list(self.devices[host].resets)

    def reset_since(self, host, since):
        """The wall time of ``host``'s first reset after monotonic
        ``since``, or None."""
        for mono, wall in self.devices[host].resets:
            if mono >= since:
                return wall
        return None

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
