"""A destination dying mid-evacuation: the simulator's Nova behaviour, the
classification of per-server failures, and the evacuator's bounded retry."""

import pytest

from instanceha.sim import SimCloud
from tests.unit.sim.conftest import Clock


# -- the simulator: what Nova 34 does when the destination dies --------------

def _sim(**kw):
    clock = Clock()
    params = dict(hosts=4, servers_per_host=2, report_interval=1.0,
                  service_down_time=4.0, schedule_time=0.05,
                  evacuation_time=0.5, boot_time=2.0, clock=clock)
    params.update(kw)
    return SimCloud(**params), clock


def _fence(cloud, host):
    cloud.power(host, on=False)
    cloud.update_service(cloud.hosts[host].service_uuid, forced_down=True,
                         status="disabled", disabled_reason="instanceha: t")


def _migs(cloud, sid):
    return [(m.status, m.dest_compute) for m in
            sorted(cloud.list_migrations(instance_uuid=sid),
                   key=lambda m: m.id)]


def test_sim_destination_dead_at_cast_never_takes_the_rebuild():
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(10)
    s = cloud.get_server(sid)
    # Stuck for good: still on its source, rebuilding; no destination.
    assert (s.host, s.vm_state, s.task_state) == (
        "compute-0", "active", "rebuilding")
    assert _migs(cloud, sid) == [("accepted", None)]
    dead = [h for h in cloud.hosts.values() if not h.alive]
    assert [h.name for h in dead] == ["compute-0", "compute-1"]
    events = cloud.instance_actions(sid)[0]["events"]
    assert [(e["event"], e["result"]) for e in events] == [
        ("conductor_rebuild_server", "Success")]


def test_sim_destination_dying_during_the_rebuild_stays_pre_migrating():
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(10)
    s = cloud.get_server(sid)
    assert (s.host, s.task_state) == ("compute-0", "rebuilding")
    assert _migs(cloud, sid) == [("pre-migrating", "compute-1")]
    events = cloud.instance_actions(sid)[0]["events"]
    assert [(e["event"], e["host"], e["result"]) for e in events] == [
        ("conductor_rebuild_server", "conductor", "Success"),
        ("compute_rebuild_instance", "compute-1", None)]


def test_sim_second_evacuate_uses_the_oldest_accepted_migration():
    """Nova accepts evacuating a server stuck in 'rebuilding'; its conductor
    then works on the first evacuation's migration, and the new one stays
    'accepted' until the source host cleans up."""
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)                     # compute-1 seen down now
    cloud.evacuate(sid)
    clock.advance(2)
    s = cloud.get_server(sid)
    assert s.host not in ("compute-0", "compute-1") and s.status == "ACTIVE"
    assert _migs(cloud, sid) == [("done", s.host), ("accepted", None)]
    assert cloud.double_rebuilds == []


def test_sim_stopped_server_rebuilt_after_a_dead_destination_stays_stopped():
    cloud, clock = _sim()
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.servers[sid].vm_state = "stopped"
    _fence(cloud, "compute-0")
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)
    clock.advance(2)
    assert cloud.get_server(sid).status == "SHUTOFF"


def test_sim_returning_destination_runs_its_stale_rebuild():
    """The rebuild cast to a dead compute waits in its queue: when that
    host comes back, it fails the migration and sets the server (rebuilt
    elsewhere meanwhile) to error — what real Nova 34 did on the test bed."""
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)
    clock.advance(2)
    dest = cloud.get_server(sid).host
    cloud.power("compute-1", on=False)
    cloud.power("compute-1", on=True)
    clock.advance(3)
    s = cloud.get_server(sid)
    assert (s.host, s.vm_state, s.task_state) == (dest, "error",
                                                  "rebuilding")
    assert _migs(cloud, sid)[0] == ("failed", "compute-1")


def test_sim_stale_rebuild_while_another_runs_is_a_double_evacuation():
    cloud, clock = _sim(evacuation_time=5.0)
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)                  # rebuilding on another host now
    clock.advance(0.1)
    cloud.power("compute-1", on=False)
    cloud.power("compute-1", on=True)
    clock.advance(2.5)                   # back while the retry still runs
    cloud.now()
    assert [d[1] for d in cloud.double_rebuilds] == [sid]


def test_sim_instance_actions_over_http():
    from instanceha.sim import nova_api
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(1)
    api = nova_api.NovaAPI(cloud, None)
    listed = api.instance_actions(sid, [], (2, 62))["instanceActions"]
    assert [a["action"] for a in listed] == ["evacuate"]
    shown = api.instance_actions(sid, [listed[0]["request_id"]], (2, 62))
    hosts = [e["host"] for e in shown["instanceAction"]["events"]]
    assert hosts == ["conductor", "compute-1"]
    old = api.instance_actions(sid, [listed[0]["request_id"]], (2, 51))
    assert "host" not in old["instanceAction"]["events"][0]
    with pytest.raises(nova_api.ApiFault):
        api.instance_actions(sid, ["req-nope"], (2, 62))
