"""The simulated BMCs, the control API, client files and the CLI."""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import requests
import sushy
import yaml


def bmc(sim, host):
    h = sim.cloud.hosts[host]
    return (h.bmc_username, h.bmc_password)


def test_service_root_is_public(sim):
    root = requests.get(sim.url + "/redfish/v1/", timeout=10).json()
    assert root["Systems"] == {"@odata.id": "/redfish/v1/Systems"}
    assert root["RedfishVersion"]


def test_systems_need_the_hosts_credentials(sim):
    url = sim.url + "/redfish/v1/Systems"
    assert requests.get(url, timeout=10).status_code == 401
    r = requests.get(url, auth=("admin-compute-0", "wrong"), timeout=10)
    assert r.status_code == 401
    assert r.json()["error"]["@Message.ExtendedInfo"]
    members = requests.get(url, auth=bmc(sim, "compute-0"),
                           timeout=10).json()["Members"]
    assert members == [{"@odata.id": "/redfish/v1/Systems/compute-0"}]
    other = requests.get(url + "/compute-1", auth=bmc(sim, "compute-0"),
                         timeout=10)
    assert other.status_code == 404


def test_reset_force_off_and_on(sim, clock):
    url = sim.url + "/redfish/v1/Systems/compute-1"
    auth = bmc(sim, "compute-1")
    system = requests.get(url, auth=auth, timeout=10).json()
    assert system["PowerState"] == "On"
    action = system["Actions"]["#ComputerSystem.Reset"]
    assert "ForceOff" in action["ResetType@Redfish.AllowableValues"]
    r = requests.post(sim.url + action["target"], auth=auth, timeout=10,
                      json={"ResetType": "ForceOff"})
    assert r.status_code == 204
    assert requests.get(url, auth=auth, timeout=10).json()[
        "PowerState"] == "Off"
    assert sim.cloud.snapshot()["hosts"]["compute-1"]["compute_alive"] is \
        False
    r = requests.post(sim.url + action["target"], auth=auth, timeout=10,
                      json={"ResetType": "Bogus"})
    assert r.status_code == 400
    requests.post(sim.url + action["target"], auth=auth, timeout=10,
                  json={"ResetType": "On"})
    clock.advance(sim.cloud.boot_time)
    assert sim.cloud.snapshot()["services"]["compute-1"]["state"] == "up"


def test_unreachable_bmc_drops_the_connection(sim):
    requests.post(sim.url + "/sim/hosts/compute-2/bmc", timeout=10,
                  json={"reachable": False})
    with pytest.raises(requests.ConnectionError):
        requests.get(sim.url + "/redfish/v1/Systems/compute-2",
                     auth=bmc(sim, "compute-2"), timeout=10)
    with pytest.raises(requests.ConnectionError):
        requests.get(sim.url + "/redfish/v1/", auth=bmc(sim, "compute-2"),
                     timeout=10)
    # the other BMCs still answer
    assert requests.get(sim.url + "/redfish/v1/Systems/compute-0",
                        auth=bmc(sim, "compute-0"),
                        timeout=10).status_code == 200


def test_refused_power_off_is_a_redfish_error(sim):
    sim.cloud.set_bmc("compute-0", refuse_power_off=True)
    r = requests.post(
        sim.url + "/redfish/v1/Systems/compute-0/Actions/"
        "ComputerSystem.Reset", auth=bmc(sim, "compute-0"), timeout=10,
        json={"ResetType": "ForceOff"})
    assert r.status_code >= 400
    assert "error" in r.json()
    assert sim.cloud.snapshot()["hosts"]["compute-0"]["power"] == "on"


def test_sushy_finds_the_system(sim):
    user, password = bmc(sim, "compute-0")
    root = sushy.Sushy(sim.url, auth=sushy.auth.BasicAuth(user, password))
    assert root.get_system().identity == "compute-0"
    system = root.get_system("/redfish/v1/Systems/compute-0")
    assert system.power_state == sushy.PowerState.ON


def test_control_api(sim, clock):
    state = requests.get(sim.url + "/sim/state", timeout=10).json()
    assert set(state) >= {"hosts", "services", "servers", "migrations"}
    r = requests.post(sim.url + "/sim/hosts/compute-0/kill", timeout=10)
    assert r.json()["compute_alive"] is False
    assert r.json()["power"] == "on"
    clock.advance(sim.cloud.service_down_time + 1)
    state = requests.get(sim.url + "/sim/state", timeout=10).json()
    assert state["services"]["compute-0"]["state"] == "down"
    r = requests.post(sim.url + "/sim/hosts/compute-0/power-off", timeout=10)
    assert r.json()["power"] == "off"
    r = requests.post(sim.url + "/sim/hosts/nope/kill", timeout=10)
    assert r.status_code == 404
    r = requests.post(sim.url + "/sim/hosts/compute-0/bmc", timeout=10,
                      json={"reachable": "no"})
    assert r.status_code == 400
    r = requests.post(sim.url + "/sim/hosts/compute-0/bmc", timeout=10,
                      json={"refuse_power_off": True})
    assert r.json()["bmc"] == {"reachable": True, "refuse_power_off": True}


def test_client_files(sim):
    clouds = yaml.safe_load(open(sim.clouds_yaml))["clouds"]["sim"]
    assert clouds["auth"]["auth_url"] == sim.url + "/identity/v3"
    assert "compute_api_version" not in clouds
    inventory = yaml.safe_load(open(sim.bmc_yaml))["hosts"]
    assert sorted(inventory) == ["compute-0", "compute-1", "compute-2"]
    entry = inventory["compute-1"]
    assert entry["driver"] == "redfish"
    assert entry["address"] == sim.url
    assert entry["system_id"] == "/redfish/v1/Systems/compute-1"
    assert entry["verify"] is False
    for path in (sim.clouds_yaml, sim.bmc_yaml):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_cli_runs_until_sigterm(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "instanceha.sim", "--hosts", "2",
         "--servers-per-host", "1", "--port", "0",
         "--write-config", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stdout.readline()
        url = first.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        state = requests.get(url + "/sim/state", timeout=10).json()
        assert sorted(state["hosts"]) == ["compute-0", "compute-1"]
        assert proc.stdout.readline().strip().endswith("clouds.yaml")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert (tmp_path / "bmc.yaml").exists()


def test_api_latency_is_added_to_api_requests_only():
    from instanceha.sim import SimCloud, SimServer
    with SimServer(SimCloud(hosts=1, servers_per_host=0,
                            api_latency=0.3)) as srv:
        started = time.monotonic()
        requests.get(srv.url + "/compute/", timeout=10)
        assert time.monotonic() - started >= 0.3
        started = time.monotonic()
        requests.get(srv.url + "/sim/state", timeout=10)
        assert time.monotonic() - started < 5      # generous: shared box


def test_unknown_prefix_is_404(sim):
    assert requests.get(sim.url + "/volume/v3", timeout=10).status_code == 404


def test_control_cleanup_hold(sim):
    url = sim.url + "/sim/hosts/compute-1/cleanup"
    assert requests.post(url, json={"hold": True},
                         timeout=10).json()["hold_cleanup"] is True
    assert requests.post(url, json={"hold": "x"}, timeout=10).status_code \
        == 400
    assert requests.post(url, timeout=10).json()["hold_cleanup"] is False
