"""The invariant fixture itself (functional/conftest.py): it must catch an
evacuate request for a server whose host is powered on, name the server,
host, time and power state, and fail the test that sent it, and only that
one.

Each test here breaks the invariant on purpose and reads what the fixture's
ledger recorded, or runs an inner pytest session and reads its verdicts, so
that this suite itself passes."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

from functional.conftest import REPO, invariant_failure
from instanceha.sim import invariant
from instanceha.sim.records import stable_uuid


def _servers_of(cloud, host):
    return {sid for sid, s in cloud.sim.snapshot()["servers"].items()
            if s["host"] == host}


def _noop_inventory(directory, hosts):
    path = os.path.join(str(directory), "noop-bmc.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"hosts": {"compute-%d" % i: {"driver": "noop"}
                                  for i in range(hosts)}}, f)
    return path


@pytest.mark.allows_unsafe_evacuation(
    "the deliberately unsafe change the invariant check must catch: the "
    "engine fences with the noop driver, which powers nothing off")
def test_check_catches_the_engine_evacuating_a_powered_on_host(
        make_cloud, evacuate_ledger, tmp_path):
    """The real engine, told that the noop driver may fence
    ([fencing] allow_unfenced), evacuates a host whose compute died while
    the machine stays on: every one of those requests is in the ledger with
    power On, and the check's message names each server, the host and the
    time of each request."""
    c = make_cloud({"fencing": {"allow_unfenced": True,
                                "inventory": _noop_inventory(tmp_path, 3)}},
                   hosts=3, servers_per_host=2)
    victims = _servers_of(c, "compute-1")
    c.start_engine()
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated", timeout=60)
    assert c.sim.snapshot()["hosts"]["compute-1"]["power"] == "on"

    seen = [r for r in evacuate_ledger.unread() if r.host == "compute-1"]
    assert {r.server for r in seen} == victims
    assert {r.power for r in seen} == {"On"}
    assert all(r.unsafe for r in seen)
    assert c.sim.unsafe_evacuate_requests() == seen
    nodeid = "functional/sim/test_x.py::test_y"
    message = invariant_failure(seen, nodeid)
    assert message.startswith(nodeid + ": invariant broken: %d evacuate "
                              "request(s)" % len(seen)), message
    for r in seen:
        assert "evacuate request for server %s at %s while its host " \
               "compute-1 was powered On" % (r.server, invariant.iso(r.time)) \
               in message, message
    # The marker this test carries is what keeps it passing.
    assert invariant_failure(seen, nodeid, allowed="why") is None


def test_a_fenced_recovery_sends_only_safe_requests(make_cloud,
                                                    evacuate_ledger):
    """The same recovery with Redfish fencing: every request found the
    host Off, and the check has nothing to say."""
    c = make_cloud(hosts=3, servers_per_host=2)
    victims = _servers_of(c, "compute-1")
    c.start_engine()
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated", timeout=60)
    seen = [r for r in evacuate_ledger.unread() if r.host == "compute-1"]
    assert {r.server for r in seen} == victims
    assert {r.power for r in seen} == {"Off"}
    assert invariant_failure(seen, "t") is None


INNER = '''
import pytest

from instanceha import conf as conf_pkg
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.sim import SimCloud, SimServer


def evacuate_one(tmp_path, power_off):
    """compute-0's compute dies (and its machine is powered off, or not);
    forced down, its first server evacuated through the Nova driver."""
    cloud = SimCloud(hosts=2, servers_per_host=1)
    srv = SimServer(cloud).start()
    try:
        clouds, _ = srv.write_client_files(str(tmp_path))
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        if power_off:
            cloud.power("compute-0", on=False)
        cloud.kill("compute-0")
        nova.force_down(cloud.hosts["compute-0"].service_uuid, "t")
        nova.evacuate(cloud.list_servers(host="compute-0")[0].id)
    finally:
        srv.stop()


def test_unsafe(tmp_path):
    evacuate_one(tmp_path, power_off=False)


def test_safe(tmp_path):
    evacuate_one(tmp_path, power_off=True)


@pytest.mark.allows_unsafe_evacuation("inner: on purpose")
def test_allowed(tmp_path):
    evacuate_one(tmp_path, power_off=False)


@pytest.fixture(scope="module")
def module_cloud(tmp_path_factory):
    evacuate_one(tmp_path_factory.mktemp("m"), power_off=False)


def test_module_first(module_cloud):
    pass


def test_module_second(module_cloud):
    pass
'''


def test_the_fixture_fails_the_test_that_sent_the_request(tmp_path):
    """An inner pytest session with functional/conftest.py as its plugin:
    the test that sent an unsafe request errors at teardown with the
    server, host, time and power state; a safe one, a marked one and the
    tests after a module fixture's unsafe request (counted for the first
    test, whose set-up ran it) pass."""
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(INNER))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "-p", "functional.conftest",
         "--rootdir", str(tmp_path), str(inner)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=240)
    out = res.stdout + res.stderr
    found = re.findall(r"^(PASSED|ERROR|FAILED) test_inner\.py::(\w+)",
                       out, re.M)
    errors = {name for verdict, name in found if verdict != "PASSED"}
    passed = {name for verdict, name in found if verdict == "PASSED"}
    assert errors == {"test_unsafe", "test_module_first"}, out
    assert {"test_safe", "test_allowed", "test_module_second"} <= passed, out
    assert "2 errors" in out, out
    server = stable_uuid(0, "server", "compute-0-vm-0")
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    for test in ("test_unsafe", "test_module_first"):
        assert re.search(
            r"test_inner\.py::%s: invariant broken: 1 evacuate request\(s\) "
            r"for a server whose host was not powered off:\n\s+evacuate "
            r"request for server %s at %s while its host compute-0 was "
            r"powered On \(simulator at http://127\.0\.0\.1:\d+, Nova "
            r"answered 200\)" % (test, server, stamp), out), out


@pytest.mark.allows_unsafe_evacuation(
    "evacuates a powered-on host's server through the recorder on purpose")
def test_the_beds_recorder_in_front_of_the_simulators_nova(tmp_path):
    """The real-peer bed's recording proxy (functional/peers/evacwatch.py,
    used there in front of real nova-api) here in front of the simulator's
    Nova: an evacuate request is recorded with the power its BMC reported
    just before it was forwarded, and Nova's answer; other requests, and
    an evacuation of a server that does not exist, are not."""
    from functional.peers.evacwatch import EvacuateRecorder
    from functional.peers.faultproxy import HttpFaultProxy
    from instanceha import conf as conf_pkg
    from instanceha.drivers.compute import base
    from instanceha.drivers.compute.nova import NovaDriver
    from instanceha.sim import SimCloud, SimServer

    cloud = SimCloud(hosts=2, servers_per_host=2)
    srv = SimServer(cloud).start()

    def host_of(sid):
        s = cloud.servers.get(sid)
        return s.host if s else None

    recorder = EvacuateRecorder(
        host_of, lambda h: cloud.power_state(cloud.host(h)), where="front")
    proxy = HttpFaultProxy(srv.url, inspect=recorder.inspect)
    try:
        clouds, _ = srv.write_client_files(str(tmp_path))
        with open(clouds) as f:
            doc = yaml.safe_load(f)
        doc["clouds"]["sim"]["compute_endpoint_override"] = \
            proxy.url + "/compute/v2.1"
        with open(clouds, "w") as f:
            yaml.safe_dump(doc, f)
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        a, b = (s.id for s in nova.list_servers("compute-0"))
        cloud.kill("compute-0")
        nova.force_down(cloud.hosts["compute-0"].service_uuid, "t")
        nova.evacuate(a)
        cloud.power("compute-0", on=False)
        nova.evacuate(b)
        with pytest.raises(base.NotFound):
            nova.evacuate("00000000-0000-0000-0000-000000000000")
        assert [(r.server, r.host, r.power, r.answer, r.where)
                for r in recorder.records] == [
            (a, "compute-0", "On", 200, "front"),
            (b, "compute-0", "Off", 200, "front")]
        assert [r.server for r in invariant.unsafe(recorder.records)] == [a]
    finally:
        proxy.close()
        srv.stop()
