"""The simulated cloud's rules, on a fake clock: nothing here sleeps."""

import pytest

from instanceha.sim import model
from instanceha.sim import SimCloud


def make(clock, **kw):
    params = dict(hosts=3, servers_per_host=2, report_interval=1.0,
                  service_down_time=4.0, schedule_time=0.05,
                  evacuation_time=0.5, boot_time=2.0, clock=clock)
    params.update(kw)
    return SimCloud(**params)


def service(cloud, host):
    return cloud.snapshot()["services"][host]


def servers_on(cloud, host):
    return sorted(s["name"] for s in cloud.snapshot()["servers"].values()
                  if s["host"] == host)


def migrations(cloud, **match):
    return [m for m in cloud.snapshot()["migrations"]
            if all(m[k] == v for k, v in match.items())]


def fence(cloud, clock, host):
    """What instanceha does before evacuating: power off, force down."""
    cloud.power(host, on=False)
    cloud.update_service(cloud.hosts[host].service_uuid, forced_down=True,
                         status="disabled", disabled_reason="instanceha: test")


def evacuate_all(cloud, host, **kw):
    return [cloud.evacuate(s.id, **kw) for s in cloud.list_servers(host=host)]


def test_initial_world(clock):
    cloud = make(clock)
    snap = cloud.snapshot()
    assert sorted(snap["hosts"]) == ["compute-0", "compute-1", "compute-2"]
    assert servers_on(cloud, "compute-1") == ["compute-1-vm-0",
                                              "compute-1-vm-1"]
    assert all(s["state"] == "up" and s["status"] == "enabled"
               for s in snap["services"].values())
    assert all(s["status"] == "ACTIVE" for s in snap["servers"].values())


def test_uuids_are_stable_for_a_seed(clock):
    a, b, c = make(clock, seed=1), make(clock, seed=1), make(clock, seed=2)
    assert a.hosts["compute-0"].service_uuid == \
        b.hosts["compute-0"].service_uuid != c.hosts["compute-0"].service_uuid
    assert sorted(a.servers) == sorted(b.servers)


def test_heartbeat_advances_in_report_intervals(clock):
    cloud = make(clock)
    start = clock.t
    clock.advance(3.7)
    assert service(cloud, "compute-0")["updated_at"] == start + 3.0


def test_killed_service_goes_down_after_service_down_time(clock):
    cloud = make(clock)
    clock.advance(2.5)
    cloud.kill("compute-1")
    frozen = service(cloud, "compute-1")["updated_at"]
    assert frozen == clock.t - 0.5
    clock.advance(4.4)                  # 4.9 s since the last heartbeat
    assert service(cloud, "compute-1")["state"] == "down"
    assert service(cloud, "compute-1")["updated_at"] == frozen
    assert cloud.snapshot()["hosts"]["compute-1"]["power"] == "on"
    assert service(cloud, "compute-0")["state"] == "up"


def test_down_exactly_at_the_boundary_is_still_up(clock):
    cloud = make(clock)
    cloud.kill("compute-1")
    clock.advance(4.0)
    assert service(cloud, "compute-1")["state"] == "up"
    clock.advance(0.01)
    assert service(cloud, "compute-1")["state"] == "down"


def test_forced_down_is_down_at_once(clock):
    cloud = make(clock)
    cloud.update_service(cloud.hosts["compute-0"].service_uuid,
                         forced_down=True)
    assert service(cloud, "compute-0")["state"] == "down"
    assert service(cloud, "compute-0")["forced_down"] is True


def test_power_off_stops_the_process_and_power_delay_applies(clock):
    cloud = make(clock, power_delay=1.0)
    cloud.power("compute-0", on=False)
    assert cloud.snapshot()["hosts"]["compute-0"]["pending_power"] is False
    assert cloud.snapshot()["hosts"]["compute-0"]["power"] == "on"
    clock.advance(1.0)
    host = cloud.snapshot()["hosts"]["compute-0"]
    assert (host["power"], host["compute_alive"]) == ("off", False)


def test_power_on_boots_after_boot_time(clock):
    cloud = make(clock)
    cloud.power("compute-0", on=False)
    clock.advance(10)
    cloud.power("compute-0", on=True)
    clock.advance(1.9)
    assert cloud.snapshot()["hosts"]["compute-0"]["compute_alive"] is False
    assert service(cloud, "compute-0")["state"] == "down"
    clock.advance(0.1)
    assert cloud.snapshot()["hosts"]["compute-0"]["compute_alive"] is True
    assert service(cloud, "compute-0")["state"] == "up"


def test_evacuate_refused_while_source_service_is_up(clock):
    cloud = make(clock)
    server = cloud.list_servers(host="compute-0")[0]
    with pytest.raises(model.BadRequest) as err:
        cloud.evacuate(server.id)
    assert err.value.message == "Compute service of compute-0 is still in use."
    cloud.kill("compute-0")             # dead but not yet seen down
    with pytest.raises(model.BadRequest):
        cloud.evacuate(server.id)
    clock.advance(5)
    cloud.evacuate(server.id)           # heartbeat too old: allowed


def test_evacuation_goes_accepted_premigrating_done(clock):
    cloud = make(clock)
    fence(cloud, clock, "compute-0")
    server = cloud.list_servers(host="compute-0")[0]
    mig = cloud.evacuate(server.id)
    snap = cloud.snapshot()
    assert snap["servers"][server.id]["status"] == "REBUILD"
    assert snap["servers"][server.id]["task_state"] == "rebuilding"
    assert migrations(cloud)[0]["status"] == "accepted"
    assert mig.migration_type == "evacuation"
    assert mig.source_compute == "compute-0"
    clock.advance(0.05)
    assert migrations(cloud)[0]["status"] == "pre-migrating"
    dest = migrations(cloud)[0]["dest_compute"]
    assert dest in ("compute-1", "compute-2")
    clock.advance(0.5)
    snap = cloud.snapshot()
    assert snap["migrations"][0]["status"] == "done"
    assert snap["servers"][server.id]["host"] == dest
    assert snap["servers"][server.id]["status"] == "ACTIVE"
    assert snap["servers"][server.id]["task_state"] is None


def test_evacuate_at_2_95_leaves_server_shutoff(clock):
    cloud = make(clock)
    fence(cloud, clock, "compute-0")
    server = cloud.list_servers(host="compute-0")[0]
    cloud.evacuate(server.id, stop=True)
    clock.advance(1)
    assert cloud.snapshot()["servers"][server.id]["status"] == "SHUTOFF"


def test_second_evacuate_while_rebuilding_conflicts_only_if_asked(clock):
    # Nova 34 does not check the task state for evacuate; the older
    # simulator behaviour is still available.
    cloud = make(clock, evacuate_checks_task_state=True)
    fence(cloud, clock, "compute-0")
    server = cloud.list_servers(host="compute-0")[0]
    cloud.evacuate(server.id)
    with pytest.raises(model.Conflict) as err:
        cloud.evacuate(server.id)
    assert err.value.message == ("Cannot 'evacuate' instance %s while it is "
                                 "in task_state rebuilding" % server.id)


def test_scheduler_spreads_least_loaded_first(clock):
    cloud = make(clock, hosts=4, servers_per_host=3)
    cloud.kill("compute-3")
    clock.advance(5)                    # compute-3 is down: not a candidate
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    dests = [m["dest_compute"] for m in
             sorted(migrations(cloud), key=lambda m: m["id"])]
    # equal load: first by name, then whichever has fewer vcpus claimed
    assert dests == ["compute-1", "compute-2", "compute-1"]


def test_scheduler_skips_disabled_and_full_hosts(clock):
    cloud = make(clock, hosts=3, servers_per_host=2, host_vcpus=5,
                 server_vcpus=2)
    cloud.update_service(cloud.hosts["compute-1"].service_uuid,
                         status="disabled")
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    # compute-2 has 5 vcpus, 4 used: no room; compute-1 is disabled.
    snap = cloud.snapshot()
    assert [m["status"] for m in snap["migrations"]] == ["error", "error"]
    for s in snap["servers"].values():
        if s["name"].startswith("compute-0"):
            assert s["status"] == "ERROR"
            assert s["vm_state"] == "error"
            assert s["task_state"] is None
            assert s["fault"]["message"].startswith(
                "No valid host was found.")


def test_capacity_limits_how_many_land_on_a_host(clock):
    cloud = make(clock, hosts=2, servers_per_host=3, host_vcpus=10,
                 server_vcpus=2)
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    statuses = sorted(m["status"] for m in migrations(cloud))
    assert statuses == ["done", "done", "error"]
    assert len(servers_on(cloud, "compute-1")) == 5


def test_error_server_can_be_evacuated_again(clock):
    cloud = make(clock, hosts=2, servers_per_host=1)
    cloud.update_service(cloud.hosts["compute-1"].service_uuid,
                         status="disabled")
    fence(cloud, clock, "compute-0")
    server = cloud.list_servers(host="compute-0")[0]
    cloud.evacuate(server.id)
    clock.advance(1)
    assert cloud.snapshot()["servers"][server.id]["status"] == "ERROR"
    cloud.update_service(cloud.hosts["compute-1"].service_uuid,
                         status="enabled")
    cloud.evacuate(server.id)
    clock.advance(1)
    snap = cloud.snapshot()
    assert snap["servers"][server.id]["host"] == "compute-1"
    assert snap["servers"][server.id]["status"] == "ACTIVE"
    assert snap["servers"][server.id]["fault"] is None
    assert [m["status"] for m in snap["migrations"]] == ["error", "done"]


def test_target_host_rules(clock):
    cloud = make(clock)
    fence(cloud, clock, "compute-0")
    server = cloud.list_servers(host="compute-0")[0]
    with pytest.raises(model.NotFound):
        cloud.evacuate(server.id, host="nope")
    with pytest.raises(model.BadRequest):
        cloud.evacuate(server.id, host="compute-0")
    cloud.evacuate(server.id, host="compute-2")
    clock.advance(1)
    assert cloud.snapshot()["servers"][server.id]["host"] == "compute-2"


def test_unset_forced_down_refused_until_source_cleans_up(clock):
    cloud = make(clock)
    uuid = cloud.hosts["compute-0"].service_uuid
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    assert {m["status"] for m in migrations(cloud)} == {"done"}
    with pytest.raises(model.BadRequest) as err:
        cloud.update_service(uuid, forced_down=False)
    assert err.value.message.startswith(
        "Unable to force up host compute-0 as `done` evacuation migration "
        "records remain associated with the host.")
    assert service(cloud, "compute-0")["forced_down"] is True
    cloud.power("compute-0", on=True)
    clock.advance(2.0)                  # boot_time: cleanup runs
    assert {m["status"] for m in migrations(cloud)} == {"completed"}
    cloud.update_service(uuid, forced_down=False, status="enabled")
    assert service(cloud, "compute-0")["state"] == "up"
    assert service(cloud, "compute-0")["status"] == "enabled"
    assert service(cloud, "compute-0")["disabled_reason"] is None


def test_cleanup_completes_accepted_and_premigrating_too(clock):
    cloud = make(clock, schedule_time=5, evacuation_time=50)
    fence(cloud, clock, "compute-0")
    first, second = evacuate_all(cloud, "compute-0")
    clock.advance(6)                    # both pre-migrating
    cloud.power("compute-0", on=True)
    clock.advance(2)
    assert {m["status"] for m in migrations(cloud)} == {"completed"}


def test_cleanup_ignores_errored_migrations(clock):
    cloud = make(clock, hosts=1, servers_per_host=1)
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    cloud.power("compute-0", on=True)
    clock.advance(2)
    assert [m["status"] for m in migrations(cloud)] == ["error"]


def test_power_cycle_restarts_compute(clock):
    cloud = make(clock)
    cloud.kill("compute-0")
    clock.advance(10)
    assert service(cloud, "compute-0")["state"] == "down"
    cloud.power_cycle("compute-0")
    clock.advance(2)
    assert service(cloud, "compute-0")["state"] == "up"


def test_update_service_validation(clock):
    cloud = make(clock)
    uuid = cloud.hosts["compute-0"].service_uuid
    with pytest.raises(model.BadRequest):
        cloud.update_service(uuid)
    with pytest.raises(model.BadRequest):
        cloud.update_service(uuid, status="enabled", disabled_reason="x")
    with pytest.raises(model.NotFound):
        cloud.update_service("00000000-0000-0000-0000-000000000000",
                             status="enabled")


def test_list_migrations_filters(clock):
    cloud = make(clock)
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    assert len(cloud.list_migrations(source_compute="compute-0")) == 2
    assert cloud.list_migrations(source_compute="compute-1") == []
    assert len(cloud.list_migrations(migration_type="evacuation",
                                     status="done")) == 2
    dest = cloud.list_migrations()[0].dest_compute
    assert cloud.list_migrations(host=dest)
    assert len(cloud.list_migrations(host="compute-0")) == 2


def test_held_cleanup_keeps_migrations_done_until_released(clock):
    cloud = make(clock)
    fence(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(1)
    cloud.hold_cleanup("compute-0")
    cloud.power("compute-0", on=True)
    clock.advance(2)
    assert cloud.snapshot()["hosts"]["compute-0"]["compute_alive"] is True
    assert {m["status"] for m in migrations(cloud)} == {"done"}
    with pytest.raises(model.BadRequest):
        cloud.update_service(cloud.hosts["compute-0"].service_uuid,
                             forced_down=False)
    cloud.hold_cleanup("compute-0", hold=False)
    assert {m["status"] for m in migrations(cloud)} == {"completed"}
