"""Fixtures: the simulator in this process, the real engine in another.

The engine runs as ``instanceha run`` in a subprocess and talks to the
simulator only over HTTP (Keystone, Nova API, Redfish through sushy), as it
would to a real cloud. Tests assert the state of the simulated world.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from instanceha import simrun
from instanceha.journal import Journal
from instanceha.sim import SimCloud, SimServer


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


class Cloud:
    """A simulated cloud plus a running instanceha process pointed at it."""

    def __init__(self, workdir, overrides=None, **sim_params):
        self.workdir = str(workdir)
        self.sim = SimCloud(**sim_params)
        self.server = SimServer(self.sim).start()
        self.conf_path = simrun.write_config(self.workdir, self.server,
                                             overrides)
        self.log_path = os.path.join(self.workdir, "instanceha.log")
        self.proc = None

    def start_engine(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "instanceha.cmd.main", "run",
             "--config-file", self.conf_path],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: len(self.states()) == len(self.sim.hosts), 30,
                 "the engine to see every host (log: %s)" % self.log_path)

    def stop_engine(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def status(self):
        try:
            with open(os.path.join(self.workdir, "status.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"hosts": []}

    def states(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError("engine exited with %s; log: %s\n%s" % (
                self.proc.returncode, self.log_path,
                open(self.log_path).read()[-3000:]))
        return {h["name"]: (h["state"], h["reason"])
                for h in self.status()["hosts"]}

    def wait_state(self, host, state, timeout=30):
        return wait_for(lambda: self.states().get(host, ("",))[0] == state
                        and self.states()[host], timeout,
                        "%s to be %s (now %s; log %s)" % (
                            host, state, self.states().get(host),
                            self.log_path))

    def journal(self):
        return Journal("sqlite:///" + os.path.join(self.workdir,
                                                   "journal.sqlite"))

    def close(self):
        self.stop_engine()
        self.server.stop()


@pytest.fixture
def make_cloud(tmp_path):
    clouds = []

    def make(overrides=None, **sim_params):
        sim_params.setdefault("hosts", 4)
        sim_params.setdefault("servers_per_host", 3)
        sim_params.setdefault("evacuation_time", 0.2)
        c = Cloud(tmp_path / ("cloud%d" % len(clouds)), overrides,
                  **sim_params)
        clouds.append(c)
        return c

    yield make
    for c in clouds:
        c.close()
