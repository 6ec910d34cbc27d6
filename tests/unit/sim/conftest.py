import openstack
import pytest
import requests

from instanceha import conf as conf_pkg
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.sim import SimCloud, SimServer


class Clock:
    """A fake clock shared by the model and the test (never sleeps)."""

    def __init__(self, t=1_800_000_000.0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def sim(clock, tmp_path, monkeypatch):
    """A 3-host cloud on a fake clock, served on a free loopback port, with
    clouds.yaml/bmc.yaml written and OS_CLIENT_CONFIG_FILE pointing at it."""
    cloud = SimCloud(hosts=3, servers_per_host=2, clock=clock)
    srv = SimServer(cloud).start()
    clouds_yaml, bmc_yaml = srv.write_client_files(str(tmp_path))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", clouds_yaml)
    srv.clouds_yaml, srv.bmc_yaml = clouds_yaml, bmc_yaml
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def nova(sim, clock):
    """The real NovaDriver against the simulator."""
    conf = conf_pkg.make({"DEFAULT": {"cloud": "sim",
                                      "clouds_file": sim.clouds_yaml}})
    return NovaDriver(conf, clock=clock)


@pytest.fixture
def api(sim):
    """Raw requests to the simulator's Nova API: call(method, path,
    microversion, json)."""
    conn = openstack.connect(cloud="sim")
    token = conn.auth_token

    def call(method, path, microversion="2.1", json=None):
        headers = {"X-Auth-Token": token,
                   "OpenStack-API-Version": "compute " + microversion}
        return requests.request(method, sim.url + "/compute/v2.1" + path,
                                headers=headers, json=json, timeout=10)
    yield call
    conn.close()


def control(sim, path, body=None):
    """POST to the simulator's control API."""
    return requests.post(sim.url + "/sim" + path, json=body, timeout=10)


def run(sim, clock, seconds):
    """Time passes in the simulated cloud."""
    clock.advance(seconds)
    sim.cloud.now()
