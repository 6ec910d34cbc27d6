"""The simulated cloud's boots, deletes, compute services deleted and
hosts leaving aggregates (model_builds.py), on a fake clock: the world
after each step."""

import pytest

from instanceha.sim import SimCloud
from instanceha.sim import model as m


@pytest.fixture
def cloud(clock):
    return SimCloud(hosts=3, servers_per_host=2, clock=clock,
                    aggregates={"rack": {"hosts": ["compute-0",
                                                   "compute-1"]}})


def boot(cloud, host="compute-0", **kw):
    return cloud.create_server("smoke", "1", cloud.default_image,
                               host=host, **kw)


def later(cloud, clock, seconds):
    clock.advance(seconds)
    cloud.now()


def disable(cloud, host):
    cloud.update_service(cloud.hosts[host].service_uuid, status="disabled",
                         disabled_reason="drain")


def test_a_forced_boot_builds_then_runs_on_the_host(cloud, clock):
    before = cloud.usages("compute-2")["VCPU"]
    s = boot(cloud, "compute-2")
    assert (s.status, s.host, s.task_state) == ("BUILD", None, "scheduling")
    later(cloud, clock, 0.05)               # schedule_time: claimed
    assert (s.status, s.host, s.task_state) == ("BUILD", "compute-2",
                                                "spawning")
    assert cloud.usages("compute-2")["VCPU"] == before + 2
    later(cloud, clock, 1.0)                # server_boot_time
    assert (s.status, s.host, s.task_state, s.power_state) == (
        "ACTIVE", "compute-2", None, m.POWER_RUNNING)
    assert s in cloud.list_servers("compute-2")
    events = [e["event"] for e in cloud.instance_actions(s.id)[0]["events"]]
    assert events == ["conductor_schedule_and_build_instances",
                      "compute__do_build_and_run_instance"]


def test_a_disabled_host_takes_no_boot_since_train(cloud, clock):
    disable(cloud, "compute-0")
    s = boot(cloud)
    later(cloud, clock, 2)
    assert (s.status, s.host) == ("ERROR", None)
    assert s.fault["message"] == "No valid host was found. "
    # Before Train (or the trait not synced): the forced host skips the
    # filters, disabled or not.
    cloud.disabled_prefilter = False
    s = boot(cloud)
    later(cloud, clock, 2)
    assert (s.status, s.host) == ("ACTIVE", "compute-0")


@pytest.mark.parametrize("host,reason", [
    ("compute-9", "No such host - host: compute-9 node: None "),
    ("full", "")])
def test_no_valid_host(cloud, clock, host, reason):
    if host == "full":
        cloud.add_flavor("big", 61, 1024, 10)
        s = cloud.create_server("smoke", "big", cloud.default_image,
                                host="compute-0")
    else:
        s = boot(cloud, host)
    later(cloud, clock, 2)
    assert (s.status, s.host, s.fault["message"]) == (
        "ERROR", None, "No valid host was found. " + reason)


def test_a_failing_hypervisor_leaves_the_server_in_error(cloud, clock):
    cloud.fail_boots("compute-0", message="libvirt: no")
    used = cloud.usages("compute-0")["VCPU"]
    s = boot(cloud)
    later(cloud, clock, 2)
    assert (s.status, s.host, s.fault["message"]) == ("ERROR", None,
                                                      "libvirt: no")
    assert cloud.usages("compute-0")["VCPU"] == used
    assert cloud.snapshot()["hosts"]["compute-0"]["failing_boots"] == \
        "libvirt: no"
    cloud.fail_boots("compute-0", False)
    s = boot(cloud)
    later(cloud, clock, 2)
    assert s.status == "ACTIVE"


def test_a_dead_compute_takes_the_build_when_it_starts(cloud, clock):
    cloud.kill_compute("compute-1")
    s = boot(cloud, "compute-1")
    later(cloud, clock, 30)
    assert (s.status, s.host) == ("BUILD", None)
    assert cloud.restart_compute("compute-1")
    later(cloud, clock, 2.0)                # boot_time: the build taken
    later(cloud, clock, 1.0)
    assert (s.status, s.host) == ("ACTIVE", "compute-1")


def test_a_forced_down_compute_still_running_builds(cloud, clock):
    cloud.update_service(cloud.hosts["compute-1"].service_uuid,
                         forced_down=True)
    s = boot(cloud, "compute-1")
    later(cloud, clock, 2)
    assert (s.status, s.host) == ("ACTIVE", "compute-1")


def test_a_compute_stopping_mid_spawn_sets_error_when_back(cloud, clock):
    s = boot(cloud, "compute-1")
    later(cloud, clock, 0.5)
    cloud.kill_compute("compute-1")
    later(cloud, clock, 5)
    assert (s.status, s.host) == ("BUILD", "compute-1")
    cloud.restart_compute("compute-1")
    later(cloud, clock, 2.5)
    assert (s.status, s.host, s.fault) == ("ERROR", "compute-1", None)


def test_the_scheduler_picks_in_the_zone(cloud, clock):
    cloud.update_aggregate_metadata(1, {"availability_zone": "az1"})
    disable(cloud, "compute-0")
    s = cloud.create_server("any", "1", cloud.default_image, zone="az1")
    later(cloud, clock, 2)
    assert (s.status, s.host) == ("ACTIVE", "compute-1")
    with pytest.raises(m.BadRequest, match="availability zone"):
        cloud.create_server("x", "1", cloud.default_image, zone="az9")
    with pytest.raises(m.BadRequest, match="Flavor 7"):
        cloud.create_server("x", "7", cloud.default_image)
    with pytest.raises(m.BadRequest, match="Image nope"):
        cloud.create_server("x", "1", "nope")


def test_delete_server_frees_its_place(cloud, clock):
    s = boot(cloud, "compute-2")
    later(cloud, clock, 2)
    used = cloud.usages("compute-2")["VCPU"]
    cloud.delete_server(s.id)
    assert cloud.usages("compute-2")["VCPU"] == used - 2
    assert s.id not in [x.id for x in cloud.list_servers("compute-2")]
    with pytest.raises(m.NotFound):
        cloud.delete_server(s.id)
    assert cloud.snapshot()["deleted_servers"][0][1] == s.id


def test_delete_server_while_building_or_moving(cloud, clock):
    s = boot(cloud, "compute-2")
    cloud.delete_server(s.id)               # before the scheduler ran
    moving = cloud.list_servers("compute-0")[0]
    cloud.live_migrate(moving.id, synchronous=True)
    later(cloud, clock, 0.2)
    cloud.delete_server(moving.id)
    evacuated = cloud.list_servers("compute-1")[0]
    cloud.update_service(cloud.hosts["compute-1"].service_uuid,
                         forced_down=True)
    cloud.evacuate(evacuated.id)
    cloud.delete_server(evacuated.id)
    later(cloud, clock, 5)
    snap = cloud.snapshot()
    assert {s.id, moving.id, evacuated.id}.isdisjoint(snap["servers"])
    assert {x["status"] for x in snap["migrations"]} == {"error"}
    assert snap["hosts"]["compute-2"]["usage"]["VCPU"] == 4


def test_delete_service_refused_then_done(cloud, clock):
    h = cloud.hosts["compute-0"]
    uuid = h.service_uuid
    with pytest.raises(m.Conflict, match="hosting instances"):
        cloud.delete_service(uuid)
    a, b = cloud.list_servers("compute-0")
    cloud.delete_server(a.id)
    cloud.live_migrate(b.id, host="compute-2", synchronous=True)
    later(cloud, clock, 0.3)
    assert b.host == "compute-0"
    with pytest.raises(m.Conflict, match="hosting instances"):
        cloud.delete_service(uuid)
    later(cloud, clock, 2)
    assert b.host == "compute-2"
    cloud.delete_service(uuid)
    snap = cloud.snapshot()
    assert "compute-0" not in snap["services"]
    assert snap["hosts"]["compute-0"]["service_deleted"]
    assert "compute-0" not in [h.name for h in cloud.computes()]
    assert cloud.list_aggregates()[0]["hosts"] == ["compute-1"]
    with pytest.raises(m.NotFound):
        cloud.delete_service(uuid)
    with pytest.raises(m.NotFound):
        cloud.update_service(uuid, status="enabled")
    # The scheduler no longer sees it; a forced boot finds no such host.
    s = boot(cloud, "compute-0")
    later(cloud, clock, 1)
    assert "No such host" in s.fault["message"]
    # Its nova-compute starting again registers a new service.
    cloud.restart_compute("compute-0")
    later(cloud, clock, 2.5)
    assert h.service_uuid != uuid and not h.service_deleted
    assert cloud.snapshot()["services"]["compute-0"]["status"] == "enabled"


def test_delete_service_refused_while_a_migration_is_not_over(cloud, clock):
    s = cloud.list_servers("compute-1")[0]
    for victim in cloud.list_servers("compute-2"):
        cloud.delete_server(victim.id)
    cloud.stall_migrations(server_id=s.id)
    cloud.live_migrate(s.id, host="compute-2", synchronous=True)
    later(cloud, clock, 0.5)
    assert cloud.list_servers("compute-2") == []
    with pytest.raises(m.Conflict, match="in-progress migrations"):
        cloud.delete_service(cloud.hosts["compute-2"].service_uuid)
    mig = cloud.server_migrations(s.id)[0]
    cloud.abort_migration(s.id, mig.id)
    later(cloud, clock, 0.1)
    cloud.delete_service(cloud.hosts["compute-2"].service_uuid)


def test_remove_host_from_aggregate(cloud, clock):
    with pytest.raises(m.NotFound, match="Cannot remove host compute-2 "
                                         "in aggregate 1"):
        cloud.remove_host_from_aggregate(1, "compute-2")
    with pytest.raises(m.NotFound, match="in aggregate 5"):
        cloud.remove_host_from_aggregate(5, "compute-0")
    cloud.update_aggregate_metadata(1, {"availability_zone": "az1"})
    # Its servers would change zone: refused.
    with pytest.raises(m.Conflict, match="from 'az1' to 'None'"):
        cloud.remove_host_from_aggregate(1, "compute-0")
    for s in cloud.list_servers("compute-0"):
        cloud.delete_server(s.id)
    agg = cloud.remove_host_from_aggregate("1", "compute-0")
    assert agg["hosts"] == ["compute-1"]
    assert cloud.zone_of("compute-0") == "nova"


@pytest.mark.parametrize("target,fits", [
    ("compute-2", True), ("disabled", False), ("full", False)])
def test_live_migrate_to_a_host(cloud, clock, target, fits):
    s = cloud.list_servers("compute-0")[0]
    host = "compute-2"
    if target == "disabled":
        disable(cloud, host)
    elif target == "full":
        cloud.add_flavor("big", 60, 1024, 10)
        big = cloud.create_server("big", "big", cloud.default_image,
                                  host=host)
        later(cloud, clock, 2)
        assert big.status == "ACTIVE"
    if fits:
        cloud.live_migrate(s.id, host=host, synchronous=True)
        later(cloud, clock, 2)
        assert (s.host, s.status) == (host, "ACTIVE")
    else:
        with pytest.raises(m.BadRequest, match="No valid host"):
            cloud.live_migrate(s.id, host=host, synchronous=True)
        assert (s.host, s.status) == ("compute-0", "ACTIVE")


def test_the_cli_sets_the_boot_time_and_the_prefilter():
    from instanceha.sim.__main__ import build_parser
    args = build_parser().parse_args(["--no-disabled-prefilter",
                                      "--server-boot-time", "3"])
    assert (args.disabled_prefilter, args.server_boot_time) == (False, 3.0)
    assert build_parser().parse_args([]).disabled_prefilter is True
