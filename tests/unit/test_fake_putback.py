"""FakeCompute's calls for putting a drained host back and retiring it
(issue 24): a smoke test's server forced onto a host, deleting it,
deleting a compute service, leaving an aggregate, a live migration aimed
at a host; and the base driver's refusal of them."""

import pytest

from instanceha.drivers.compute import base as cb
from tests.unit.fakes import Clock, FakeCompute


@pytest.fixture
def nova():
    return FakeCompute(Clock(), hosts=3, servers_per_host=2)


def test_a_driver_without_them_refuses_them_as_a_compute_error():
    class Bare(cb.ComputeDriver):
        list_services = force_down = restore = list_servers = \
            get_server = evacuate = list_evacuations = lambda *a, **k: None

    d = Bare()
    for call in (lambda: d.create_server("n", "f", "i", "h"),
                 lambda: d.delete_server("s"),
                 lambda: d.delete_service("u"),
                 lambda: d.remove_host_from_aggregate("1", "h"),
                 lambda: d.live_migrate("s", host="h")):
        with pytest.raises(cb.ComputeError,
                           match="not supported by this compute driver"):
            call()


def test_a_forced_boot_is_active_at_once_on_a_disabled_host(nova):
    nova.disable_service("uuid-0", "drain")
    s = nova.create_server("smoke", "f1", "i1", "compute-0", zone="az1",
                           network="net-1")
    assert (s.status, s.host, s.name, s.fault) == (
        "ACTIVE", "compute-0", "smoke", None)
    assert nova.get_server(s.id) == s
    assert nova.boots == [dict(name="smoke", flavor_id="f1", image_id="i1",
                               host="compute-0", zone="az1",
                               network="net-1")]
    assert s.id in [v.id for v in nova.list_servers("compute-0")]
    nova.delete_server(s.id)
    nova.delete_server(s.id)                # gone already: no error
    assert nova.deleted == [s.id]
    with pytest.raises(KeyError):
        nova.get_server(s.id)


@pytest.mark.parametrize("why", ["dead", "forced_down", "fail", "unknown",
                                 "prefilter", "full"])
def test_a_forced_boot_fails_with_a_fault_and_no_host(nova, why):
    host = "compute-1"
    if why == "dead":
        nova.kill(host)
        nova.clock.advance(10)
    elif why == "forced_down":
        nova.force_down("uuid-1", "x")
    elif why == "fail":
        nova.fail_boots_on.add(host)
    elif why == "unknown":
        host = "compute-9"
    elif why == "prefilter":
        nova.disabled_prefilter = True
        nova.disable_service("uuid-1", "drain")
    elif why == "full":
        nova.capacity = 2
    s = nova.create_server("smoke", "f1", "i1", host)
    assert (s.status, s.vm_state, s.host) == ("ERROR", "error", None)
    if why == "fail":
        assert "aborted" in s.fault
    else:
        assert s.fault.startswith("No valid host was found.")
    # The failed server holds nothing on the host.
    assert len(nova.list_servers("compute-1")) == 2


def test_delete_service_refused_while_servers_or_moves_remain(nova):
    with pytest.raises(cb.Conflict, match="hosting instances") as e:
        nova.delete_service("uuid-0")
    assert e.value.status == 409
    nova.moves_complete = False
    nova.live_migrate("compute-0-vm-0")
    nova.live_migrate("compute-0-vm-1")
    # The servers are still on compute-0, migrating.
    with pytest.raises(cb.Conflict, match="hosting instances"):
        nova.delete_service("uuid-0")
    nova.finish_moves()
    assert nova.list_servers("compute-0") == []
    nova.delete_service("uuid-0")
    assert "compute-0" not in nova.services
    with pytest.raises(cb.NotFound):
        nova.delete_service("uuid-0")


def test_delete_service_refused_while_a_move_to_the_host_runs(nova):
    nova.moves_complete = False
    # compute-2 empty, a live migration from compute-1 running towards it.
    for sid in ("compute-2-vm-0", "compute-2-vm-1"):
        nova.servers[sid]["host"] = "compute-0"
    nova.live_migrate("compute-1-vm-0", host="compute-2")
    assert nova.list_servers("compute-2") == []
    with pytest.raises(cb.Conflict, match="in-progress migrations"):
        nova.delete_service("uuid-2")
    nova.finish_moves()
    nova.live_migrate("compute-1-vm-0", host="compute-1")
    nova.finish_moves()
    nova.delete_service("uuid-2")
    assert "compute-2" not in nova.services


def test_delete_service_leaves_every_aggregate(nova):
    nova.aggregates = [cb.Aggregate("a", ("compute-0", "compute-1"), id="1"),
                       cb.Aggregate("b", ("compute-1",), id="2")]
    for sid in ("compute-1-vm-0", "compute-1-vm-1"):
        nova.delete_server(sid)
    nova.delete_service("uuid-1")
    assert [a.hosts for a in nova.aggregates] == [("compute-0",), ()]


def test_remove_host_from_aggregate(nova):
    nova.aggregates = [cb.Aggregate("a", ("compute-0", "compute-1"),
                                    id="1")]
    nova.remove_host_from_aggregate("1", "compute-0")
    assert nova.get_aggregate("1").hosts == ("compute-1",)
    for agg, host in (("1", "compute-0"), ("9", "compute-1")):
        with pytest.raises(cb.NotFound, match="Cannot remove host"):
            nova.remove_host_from_aggregate(agg, host)
    assert nova.aggregate_calls == [
        ("remove_host", "1", "compute-0"), ("remove_host", "1", "compute-0"),
        ("remove_host", "9", "compute-1")]


def test_live_migrate_to_a_host(nova):
    nova.live_migrate("compute-0-vm-0", host="compute-2")
    assert nova.get_server("compute-0-vm-0").host == "compute-2"
    assert nova.move_calls == [("live_migrate", "compute-0-vm-0",
                                "compute-2")]
    m = nova.list_host_migrations("compute-2")[0]
    assert (m.dest_host, m.status) == ("compute-2", "completed")


@pytest.mark.parametrize("target,message", [
    ("compute-9", "Compute host compute-9 could not be found."),
    ("compute-0", "to current host"),
    ("disabled", "No valid host"), ("dead", "No valid host"),
    ("full", "No valid host")])
def test_live_migrate_to_a_host_it_cannot_take(nova, target, message):
    if target == "disabled":
        nova.disable_service("uuid-1", "drain")
    elif target == "dead":
        nova.kill("compute-1")
        nova.clock.advance(10)
        nova.heartbeat()
    elif target == "full":
        nova.capacity = 2
    host = target if target.startswith("compute-") else "compute-1"
    with pytest.raises(cb.ComputeError, match=message) as e:
        nova.live_migrate("compute-0-vm-0", host=host)
    assert e.value.status == 400 and not isinstance(e.value, cb.Conflict)
    s = nova.get_server("compute-0-vm-0")
    assert (s.host, s.status, s.task_state) == ("compute-0", "ACTIVE", None)
