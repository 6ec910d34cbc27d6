import pytest

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
