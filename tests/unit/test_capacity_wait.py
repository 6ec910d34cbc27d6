"""A host whose servers found no capacity waits in pending; a compute host
becoming schedulable (enabled and up) makes it try again at once instead
of after its back-off. A resumed host's boot wait is never shortened."""

from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.states import State
from tests.unit.test_engine import World


def _full_world():
    """Every live host is full; compute-3 is a disabled spare."""
    w = World(hosts=4, servers=2, capacity=2)
    spare = w.compute.services["compute-3"]
    spare.update(status="disabled", disabled_reason="spare")
    for sid in [s for s, v in w.compute.servers.items()
                if v["host"] == "compute-3"]:
        del w.compute.servers[sid]
    w.pass_()
    return w


def test_enabling_a_host_retries_a_host_waiting_for_capacity_at_once():
    w = _full_world()
    w.compute.kill("compute-1")
    w.until("compute-1", "pending")
    rec = w.engine.find("compute-1")
    assert rec.waits_for_capacity
    assert rec.retry_at - w.clock() > 20        # retry_backoff 30 s
    w.compute.services["compute-3"].update(status="enabled",
                                           disabled_reason=None)
    enabled_at = w.clock()
    w.until("compute-1", "evacuated", passes=10)
    assert w.clock() - enabled_at < 10, "waited for the back-off"
    assert {v["host"] for sid, v in w.compute.servers.items()
            if sid.startswith("compute-1-")} == {"compute-3"}


def test_without_new_capacity_the_back_off_applies():
    w = _full_world()
    w.compute.kill("compute-1")
    w.until("compute-1", "pending")
    for _ in range(10):
        w.pass_()
        assert w.state("compute-1")[0] == "pending"


def test_capacity_never_shortens_a_resumed_hosts_boot_wait():
    policy = machine.Policy()
    rec = machine.HostRecord(id="h", name="h", state=State.PENDING,
                             isolated=True, retry_at=500.0,
                             waits_for_capacity=False)
    new, actions = machine.step(rec, Event(E.CAPACITY, "h", 100.0,
                                           reason="x up"), policy)
    assert new.retry_at == 500.0 and actions == []
    waiting = machine.HostRecord(id="h", name="h", state=State.PENDING,
                                 isolated=True, retry_at=500.0,
                                 waits_for_capacity=True)
    new, actions = machine.step(waiting, Event(E.CAPACITY, "h", 100.0,
                                               reason="x up"), policy)
    assert new.retry_at == 100.0 and actions == []
    assert "capacity may have appeared (x up)" in new.reason


def test_capacity_flag_only_from_a_no_capacity_result():
    policy = machine.Policy()
    rec = machine.HostRecord(id="h", name="h", state=State.EVACUATING,
                             isolated=True, attempts=1, busy=True)
    new, _ = machine.step(rec, Event(E.EVACUATE_NO_CAPACITY, "h", 10.0,
                                     reason="no host"), policy)
    assert new.state is State.PENDING and new.waits_for_capacity
    # Leaving pending clears it.
    later, _ = machine.step(dataclass_replace(new, retry_at=10.0),
                            Event(E.TICK, "h", 50.0), policy)
    assert later.state is State.FENCING and not later.waits_for_capacity


def dataclass_replace(rec, **kw):
    import dataclasses
    return dataclasses.replace(rec, **kw)


def test_preflight_sends_what_fits_in_priority_order_and_holds_the_rest():
    """Room for 2 of 4: the two of highest priority go, the other two wait
    (journal rows 'no_capacity' saying why; the host's reason names the
    shortfall) and are not sent into NoValidHost."""
    w = World(hosts=3, servers=4, capacity=5)
    w.compute.report_capacity = True
    vms = ["compute-1-vm-%d" % i for i in range(4)]
    for vm, prio in zip(vms, ("1", "9", "5", "0")):
        w.compute.servers[vm]["metadata"] = {"instanceha:priority": prio}
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "pending")
    sent = [m["server"] for m in w.compute.migrations]
    assert sent == [vms[1], vms[2]]         # 9 then 5; nothing else tried
    assert all(m["status"] == "done" for m in w.compute.migrations)
    rows = {r["server_id"]: r for r in w.journal.evacuations()
            if r["status"] == "no_capacity"}
    assert sorted(rows) == sorted([vms[0], vms[3]])
    assert all(r["detail"].startswith("preflight: needs 1 vCPU")
               for r in rows.values()), rows
    state, reason = w.state("compute-1")
    assert "2 of 4 servers wait for capacity: short of" in reason, reason
    assert w.compute.servers[vms[0]]["vm_state"] == "active"   # not errored


def test_unknown_capacity_sends_everything():
    w = World(hosts=3, servers=2, capacity=2)
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "pending")
    # No preflight: both were sent and found no valid host.
    assert len(w.compute.migrations) == 2
    assert {m["status"] for m in w.compute.migrations} == {"error"}


def test_physical_cpu_counts_never_hold_servers_back():
    """os-hypervisors (Placement unreadable) counts physical CPUs without
    the allocation ratio: an overcommitted host is not taken for full."""
    from instanceha.drivers.compute import base as cb
    w = World(hosts=3, servers=2, capacity=5)
    w.compute.report_capacity = True
    real = w.compute.host_capacities

    def hypervisors():
        return {h: cb.HostCapacity(h, c.vcpus, c.vcpus + 10, c.ram_mb,
                                   c.ram_mb_used, c.disk_gb, c.disk_gb_used,
                                   source="hypervisors")
                for h, c in real().items()}

    w.compute.host_capacities = hypervisors
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert len(w.compute.migrations) == 2
