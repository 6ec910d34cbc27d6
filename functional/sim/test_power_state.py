"""Power state across a recovery: the real engine process against the
simulator (20 hosts). A host dies carrying an ACTIVE, a SHUTOFF and a
PAUSED server: the first two end in their own state on live hosts, the
paused one is reported and left (instanceha.policy.power)."""

import pytest

from instanceha.sim import nova_api
from instanceha.sim.records import POWER_SHUTDOWN, STOPPED

HOSTS = 20
VICTIM = "compute-7"


def _set_states(cloud):
    """The victim's three servers: active, stopped by their owner, paused."""
    sim = cloud.sim
    with sim.lock:
        ids = sorted(s.id for s in sim.servers.values() if s.host == VICTIM)
        active, stopped, paused = ids
        sim.servers[stopped].vm_state = STOPPED
        sim.servers[stopped].power_state = POWER_SHUTDOWN
        sim.servers[paused].vm_state = "paused"
        sim.servers[paused].power_state = 3
    return active, stopped, paused


def _recover(cloud):
    active, stopped, paused = _set_states(cloud)
    cloud.start_engine()
    cloud.sim.kill(VICTIM)
    state, reason = cloud.wait_state(VICTIM, "evacuated", timeout=60)
    snap = cloud.sim.snapshot()
    live = {h for h, v in snap["hosts"].items() if v["power"] == "on"}
    assert VICTIM not in live and len(live) == HOSTS - 1
    servers = snap["servers"]
    for sid in (active, stopped):
        assert servers[sid]["host"] in live, servers[sid]
        assert servers[sid]["task_state"] is None
    # Reported, not dropped: still on the dead host, in its state.
    assert servers[paused]["host"] == VICTIM
    assert servers[paused]["vm_state"] == "paused"
    assert "2/2 servers evacuated, 1 not evacuable" in reason, reason
    evacs = cloud.journal().evacuations()
    sent = [e for e in evacs if e["status"] != "skipped"]
    assert {e["server_id"] for e in sent} == {active, stopped}
    assert {e["status"] for e in sent} == {"done"}
    left = [(e["server_id"], e["detail"]) for e in evacs
            if e["status"] == "skipped"]
    assert [sid for sid, _ in left] == [paused]
    assert "paused" in left[0][1], left
    log = open(cloud.log_path).read()
    assert "servers_not_evacuable" in log and "vm_state paused" in log
    return servers[active], servers[stopped]


def test_active_stays_active_and_stopped_stays_stopped(make_cloud):
    c = make_cloud(hosts=HOSTS)
    active, stopped = _recover(c)
    assert active["status"] == "ACTIVE"
    assert stopped["status"] == "SHUTOFF"


def test_same_on_a_nova_capped_below_2_95(make_cloud, monkeypatch):
    # Nova before 2023.1 (no 2.95): it powers a stopped server off again
    # after the rebuild all the same; instanceha needs no stop of its own.
    monkeypatch.setattr(nova_api, "MAX_VERSION", (2, 94))
    c = make_cloud(hosts=HOSTS)
    active, stopped = _recover(c)
    assert active["status"] == "ACTIVE"
    assert stopped["status"] == "SHUTOFF"
    assert "max_microversion='2.94'" in open(c.log_path).read()


def test_configured_2_95_leaves_every_evacuated_server_shutoff(make_cloud):
    # The operator's choice ([evacuation] microversion): from 2.95 Nova
    # stops every evacuated server, the active one too.
    c = make_cloud({"evacuation": {"microversion": "2.95"}}, hosts=HOSTS)
    active, stopped = _recover(c)
    assert active["status"] == "SHUTOFF"
    assert stopped["status"] == "SHUTOFF"


@pytest.mark.parametrize("mv, status", [((2, 94), "ACTIVE"),
                                        ((2, 95), "SHUTOFF")])
def test_nova_driver_evacuates_at_the_microversion_asked(tmp_path, mv,
                                                         status):
    from instanceha import conf as conf_pkg
    from instanceha.drivers.compute import base
    from instanceha.drivers.compute.nova import NovaDriver
    from instanceha.sim import SimCloud, SimServer
    cloud = SimCloud(hosts=3, servers_per_host=1, evacuation_time=0.0,
                     schedule_time=0.0)
    srv = SimServer(cloud).start()
    try:
        clouds, _ = srv.write_client_files(str(tmp_path))
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        sid = cloud.list_servers(host="compute-0")[0].id
        assert nova.get_server(sid).power_state == 1
        cloud.kill("compute-0")
        nova.force_down(cloud.hosts["compute-0"].service_uuid, "instanceha: t")
        with pytest.raises(base.ComputeError, match="supports up to"):
            nova.evacuate(sid, microversion=(2, 999))
        nova.evacuate(sid, microversion=mv)
        cloud.now()
        s = nova.get_server(sid)
        assert s.host != "compute-0" and s.status == status
        assert s.power_state == (1 if status == "ACTIVE" else 4)
    finally:
        srv.stop()
