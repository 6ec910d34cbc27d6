"""Tie each simulated host's BMC to its nova-compute process.

A watcher thread polls every BMC's power state. On an On→Off edge it kills
the host's compute (SIGKILL: the machine lost power); on an Off→On edge it
starts the compute again, and Nova's own start-up code then cleans up the
host's evacuated servers and marks their migrations ``completed``.

Only edges act: a compute killed while its BMC stays On remains dead (a hung
host stays hung) until its power is cycled, exactly like real hardware.
Every action is recorded in ``events`` as (monotonic time, host, what).
"""

import threading
import time


class BMCLink:

    def __init__(self, cloud, bmcs, interval=0.3):
        self.cloud = cloud
        self.bmcs = dict(bmcs)
        self.interval = interval
        self.events = []
        self.errors = []
        self._last = {}
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        for host, bmc in self.bmcs.items():
            self._last[host] = bmc.power_state()
        self._thread = threading.Thread(target=self._run, name="bmclink",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def replace(self, host, bmc):
        """Link ``host`` to another BMC (e.g. switch a host to IPMI)."""
        self._last[host] = bmc.power_state()
        self.bmcs[host] = bmc

    def settle(self, host, timeout=15.0):
        """Wait until the link has acted on the host's present power state
        (its last edge handled). A power command a test sends right after
        a fence would otherwise make an Off and an On that both fall
        between two polls: the link sees no edge, and the machine runs
        without its compute."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._last.get(host) == self.bmcs[host].power_state():
                return
            time.sleep(0.05)
        raise AssertionError("BMC link: %s's power edge not handled after "
                             "%.0fs (errors: %s)" % (host, timeout,
                                                     self.errors[-3:]))

    def linked(self, host):
        """The host's BMC, whose power commands first wait for the link
        to have handled the previous edge (settle)."""
        return _Linked(self, host)

    def _run(self):
        while not self._stop.is_set():
            for host, bmc in list(self.bmcs.items()):
                try:
                    self._check(host, bmc)
                except Exception as e:  # noqa: BLE001 - kept for the test to see
                    self.errors.append((time.monotonic(), host, repr(e)))
            self._stop.wait(self.interval)

    def _check(self, host, bmc):
        state = bmc.power_state()
        if state == self._last.get(host):
            return
        # The edge counts as handled only once its action succeeded: a
        # start (or kill) that raised is tried again at the next poll,
        # instead of leaving a powered-on machine without its compute.
        if state == "off":
            self.cloud.kill_compute(host)
            self.events.append((time.monotonic(), host, "power-off: compute killed"))
        elif state == "on":
            self.cloud.start_compute(host)
            self.events.append((time.monotonic(), host, "power-on: compute started"))
        self._last[host] = state

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _Linked:
    """A BMC seen through the link: power_on/power_off settle first."""

    def __init__(self, link, host):
        self._link = link
        self._host = host

    def __getattr__(self, name):
        return getattr(self._link.bmcs[self._host], name)

    def power_on(self):
        self._link.settle(self._host)
        self._link.bmcs[self._host].power_on()

    def power_off(self):
        self._link.settle(self._host)
        self._link.bmcs[self._host].power_off()
