"""The simulated host's operating system as its agent sees it: a hang
(kill) against a crashed nova-compute (kill_compute), restarting
nova-compute, boot ids, the guest count. Fake clock; no sleep."""

import requests

from instanceha.sim import SimCloud


def make(clock, **kw):
    params = dict(hosts=3, servers_per_host=2, boot_time=2.0, clock=clock)
    params.update(kw)
    return SimCloud(**params)


def host(cloud, name="compute-1"):
    return cloud.snapshot()["hosts"][name]


def test_kill_hangs_the_host_kill_compute_does_not(clock):
    cloud = make(clock)
    cloud.kill("compute-1")
    cloud.kill_compute("compute-2")
    h1, h2 = cloud.hosts["compute-1"], cloud.hosts["compute-2"]
    assert (h1.alive, h1.hung, cloud.os_running(h1)) == (False, True, False)
    assert (h2.alive, h2.hung, cloud.os_running(h2)) == (False, False, True)
    assert host(cloud)["power"] == "on" and host(cloud)["hung"] is True


def test_both_look_the_same_to_nova(clock):
    cloud = make(clock)
    cloud.kill("compute-1")
    cloud.kill_compute("compute-2")
    clock.advance(5)
    services = cloud.snapshot()["services"]
    assert services["compute-1"]["state"] == "down"
    assert services["compute-2"]["state"] == "down"
    assert services["compute-1"]["updated_at"] == \
        services["compute-2"]["updated_at"]


def test_restart_compute_runs_it_again_after_boot_time(clock):
    cloud = make(clock)
    cloud.kill_compute("compute-1")
    assert cloud.restart_compute("compute-1") is True
    clock.advance(1.9)
    assert host(cloud)["compute_alive"] is False
    clock.advance(0.1)
    assert host(cloud)["compute_alive"] is True
    assert cloud.snapshot()["services"]["compute-1"]["state"] == "up"


def test_restart_compute_of_a_running_one_stops_it_first(clock):
    cloud = make(clock)
    assert cloud.restart_compute("compute-1", delay=0.5) is True
    assert host(cloud)["compute_alive"] is False
    clock.advance(0.5)
    assert host(cloud)["compute_alive"] is True


def test_restart_compute_refused_on_a_hung_or_powered_off_host(clock):
    cloud = make(clock)
    cloud.kill("compute-1")
    cloud.power("compute-2", on=False)
    assert cloud.restart_compute("compute-1") is False
    assert cloud.restart_compute("compute-2") is False
    clock.advance(10)
    assert host(cloud)["compute_alive"] is False
    assert host(cloud, "compute-2")["compute_alive"] is False


def test_a_hang_ends_with_the_power_and_a_boot_brings_a_new_boot_id(clock):
    cloud = make(clock)
    first = host(cloud)["boot_id"]
    cloud.kill("compute-1")
    assert host(cloud)["boot_id"] == first       # hung, not rebooted
    cloud.power("compute-1", on=False)
    assert host(cloud)["hung"] is False
    clock.advance(3)
    cloud.power("compute-1", on=True)
    h = cloud.hosts["compute-1"]
    assert cloud.os_running(h) and h.booted_at == clock.t
    second = host(cloud)["boot_id"]
    assert second != first
    cloud.power_cycle("compute-1")
    assert host(cloud)["boot_id"] not in (first, second)


def test_boot_ids_differ_between_hosts_and_are_stable_for_a_seed(clock):
    a, b = make(clock), make(clock)
    ids = {host(a, n)["boot_id"] for n in a.hosts}
    assert len(ids) == 3
    assert host(a)["boot_id"] == host(b)["boot_id"]


def test_running_guests_counts_active_servers_placed_there(clock):
    cloud = make(clock)
    assert cloud.running_guests("compute-0") == 2
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.stop_server(sid)
    assert cloud.running_guests("compute-0") == 1
    assert cloud.running_guests("nowhere") == 0


def test_control_api_kill_compute_and_restart_compute(sim, clock):
    r = requests.post(sim.url + "/sim/hosts/compute-0/kill-compute",
                      timeout=10)
    assert r.status_code == 200
    assert (r.json()["compute_alive"], r.json()["hung"]) == (False, False)
    r = requests.post(sim.url + "/sim/hosts/compute-0/restart-compute",
                      timeout=10)
    assert r.status_code == 200
    clock.advance(sim.cloud.boot_time)
    assert sim.cloud.snapshot()["hosts"]["compute-0"]["compute_alive"]
    requests.post(sim.url + "/sim/hosts/compute-1/kill", timeout=10)
    r = requests.post(sim.url + "/sim/hosts/compute-1/restart-compute",
                      timeout=10)
    assert r.status_code == 409
