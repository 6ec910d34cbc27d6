"""FakeCompute's live and cold migrations (the drain pass's unit-test
Nova) and the base driver's refusal of what it does not support."""

import pytest

from instanceha.drivers.compute import base as cb
from tests.unit.fakes import Clock, FakeCompute


@pytest.fixture
def nova():
    return FakeCompute(Clock(), hosts=3, servers_per_host=2)


def test_a_driver_without_migrations_refuses_them_as_a_compute_error():
    class Bare(cb.ComputeDriver):
        list_services = force_down = restore = list_servers = \
            get_server = evacuate = list_evacuations = lambda *a, **k: None

    d = Bare()
    for call in (lambda: d.live_migrate("s"), lambda: d.cold_migrate("s"),
                 lambda: d.confirm_resize("s"),
                 lambda: d.server_migrations("s"),
                 lambda: d.abort_migration("s", "1"),
                 lambda: d.force_complete_migration("s", "1"),
                 lambda: d.list_host_migrations("h")):
        with pytest.raises(cb.ComputeError,
                           match="not supported by this compute driver"):
            call()


def test_live_migration_completes_at_once_by_default(nova):
    nova.live_migrate("compute-0-vm-0")
    v = nova.get_server("compute-0-vm-0")
    assert v.host != "compute-0" and v.status == "ACTIVE"
    assert v.task_state is None
    assert nova.server_migrations("compute-0-vm-0") == []
    m, = nova.list_host_migrations("compute-0")
    assert (m.migration_type, m.status, m.source_host, m.dest_host) == (
        "live-migration", "completed", "compute-0", v.host)
    assert nova.list_host_migrations(v.host) == [m]
    assert nova.move_calls == [("live_migrate", "compute-0-vm-0")]


def test_a_stalled_live_migration_runs_until_aborted(nova):
    nova.moves_complete = False
    nova.live_migrate("compute-0-vm-0")
    assert nova.get_server("compute-0-vm-0").status == "MIGRATING"
    mig, = nova.server_migrations("compute-0-vm-0")
    assert mig.status == "running" and 0 < mig.memory_remaining
    nova.clock.advance(60)
    assert nova.server_migrations("compute-0-vm-0") == [mig]
    nova.abort_migration("compute-0-vm-0", mig.id)
    v = nova.get_server("compute-0-vm-0")
    assert (v.host, v.status, v.task_state) == ("compute-0", "ACTIVE", None)
    assert nova.list_host_migrations("compute-0")[0].status == "cancelled"
    # Nothing to abort any more: the task state refuses first (409).
    with pytest.raises(cb.Conflict):
        nova.abort_migration("compute-0-vm-0", mig.id)


def test_one_server_stalled_force_completed(nova):
    nova.stalled.add("compute-0-vm-1")
    nova.live_migrate("compute-0-vm-0")
    nova.live_migrate("compute-0-vm-1")
    assert nova.get_server("compute-0-vm-0").host != "compute-0"
    mig, = nova.server_migrations("compute-0-vm-1")
    nova.force_complete_migration("compute-0-vm-1", mig.id)
    assert nova.get_server("compute-0-vm-1").host != "compute-0"
    assert nova.move_calls[-1] == ("force_complete_migration",
                                   "compute-0-vm-1", mig.id)


def test_live_migration_refusals(nova):
    nova.servers["compute-0-vm-0"].update(vm_state="stopped",
                                          status="SHUTOFF")
    with pytest.raises(cb.Conflict) as e:
        nova.live_migrate("compute-0-vm-0")
    assert e.value.status == 409
    with pytest.raises(cb.NotFound):
        nova.live_migrate("nope")
    for name in ("compute-1", "compute-2"):
        nova.services[name]["status"] = "disabled"
    with pytest.raises(cb.ComputeError, match="No valid host") as e:
        nova.live_migrate("compute-0-vm-1")
    assert e.value.status == 400 and not isinstance(e.value, cb.Conflict)
    assert nova.list_host_migrations("compute-0")[0].status == "error"
    assert nova.get_server("compute-0-vm-1").status == "ACTIVE"


def test_a_host_dying_mid_migration_fails_it_and_keeps_the_server(nova):
    nova.moves_complete = False
    nova.live_migrate("compute-0-vm-0")
    nova.kill("compute-0")
    v = nova.get_server("compute-0-vm-0")
    assert (v.host, v.task_state) == ("compute-0", None)
    assert nova.list_host_migrations("compute-0")[0].status == "error"


def test_cold_migration_then_confirm(nova):
    nova.servers["compute-0-vm-1"].update(vm_state="stopped",
                                          status="SHUTOFF")
    for sid in ("compute-0-vm-0", "compute-0-vm-1"):
        nova.cold_migrate(sid)
        v = nova.get_server(sid)
        assert v.status == "VERIFY_RESIZE" and v.host != "compute-0"
    with pytest.raises(cb.Conflict):
        nova.cold_migrate("compute-0-vm-0")     # resized: not yet again
    nova.confirm_resize("compute-0-vm-0")
    nova.confirm_resize("compute-0-vm-1")
    assert nova.get_server("compute-0-vm-0").status == "ACTIVE"
    assert nova.get_server("compute-0-vm-1").status == "SHUTOFF"
    assert {m.status for m in nova.list_host_migrations("compute-0")} == {
        "confirmed"}
    with pytest.raises(cb.Conflict):
        nova.confirm_resize("compute-0-vm-0")


def test_host_migrations_since(nova):
    nova.live_migrate("compute-0-vm-0")
    nova.clock.advance(10)
    nova.heartbeat()
    nova.cold_migrate("compute-0-vm-1")
    since = nova.clock() - 1
    kinds = [m.migration_type
             for m in nova.list_host_migrations("compute-0", since=since)]
    assert kinds == ["migration"]
    assert [m.migration_type for m in nova.list_host_migrations(
        "compute-0")] == ["migration", "live-migration"]


def test_evacuations_are_not_mixed_with_moves(nova):
    nova.live_migrate("compute-0-vm-0")
    assert nova.list_evacuations("compute-0") == []
    assert nova.migrations == []
