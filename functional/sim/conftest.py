"""Fixtures: the simulator in this process, the real engine in another.

The engine runs as ``instanceha run`` in a subprocess and talks to the
simulator only over HTTP (Keystone, Nova API, Redfish through sushy), as it
would to a real cloud. Tests assert the state of the simulated world.
"""

import os
import subprocess
import sys

import pytest
import yaml

from instanceha import simrun
from functional import waiting
from functional.engine_process import EngineProcess
from instanceha.sim import SimCloud, SimServer


wait_for = waiting.wait_for


class Cloud:
    """A simulated cloud plus a real instanceha process pointed at it."""

    def __init__(self, workdir, overrides=None, **sim_params):
        self.workdir = str(workdir)
        self.sim = SimCloud(**sim_params)
        self.server = SimServer(self.sim).start()
        self.conf_path = simrun.write_config(self.workdir, self.server,
                                             overrides)
        self.engine = EngineProcess(
            self.workdir, self.conf_path,
            os.path.join(self.workdir, "status.json"),
            "sqlite:///" + os.path.join(self.workdir, "journal.sqlite"))
        self.log_path = self.engine.log_path

    def start_engine(self):
        # The engine's start (imports, the first reads of Nova and every
        # BMC) takes ~2.5 s on an idle 2-core machine and more than 30 s
        # at a load of 12: the budget is EngineProcess's own.
        self.engine.start(len(self.sim.hosts), timeout=60)

    def stop_engine(self):
        self.engine.stop()

    def compute_through(self, proxy):
        """Send the engine's Nova (compute) requests through ``proxy``
        (a functional.peers.faultproxy.HttpFaultProxy in front of this
        cloud's API, prefix /compute). Before the engine starts."""
        path = os.path.join(self.workdir, "clouds.yaml")
        with open(path) as f:
            data = yaml.safe_load(f)
        data["clouds"]["sim"]["compute_endpoint_override"] = \
            proxy.url + "/compute/v2.1"
        with open(path, "w") as f:
            yaml.safe_dump(data, f)

    def status(self):
        return self.engine.status()

    def states(self):
        return self.engine.states()

    def wait_state(self, host, state, timeout=30):
        return self.engine.wait_state(host, state, timeout)

    def journal(self):
        return self.engine.journal()

    def cli(self, *args):
        """``instanceha ARGS --config-file <this cloud's>``, as an operator
        types it; returns the CompletedProcess. A CLI run takes ~1.3 s on an
        idle machine; 60 s holds on a loaded one."""
        return subprocess.run(
            [sys.executable, "-m", "instanceha.cmd.main", *args,
             "--config-file", self.conf_path],
            capture_output=True, text=True, timeout=60)

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
