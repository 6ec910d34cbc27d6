"""Safety of the whole engine with in-memory drivers on a fake clock: hosts
that must not be touched are not."""

import dataclasses

from instanceha.drivers.fencing.inventory import BMC
from instanceha.engine.engine import Engine
from instanceha.events import Event, EventKind as E
from instanceha.journal import Journal
from tests.unit.test_engine import World

OURS = "instanceha: evacuating 2026-11-23T10:00:00Z"


def _restart_without_journal(w):
    """A new instanceha (new machine, wiped SQLite) on the same cloud."""
    w.journal = Journal("sqlite://")
    w.ctx.journal = w.journal
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.reconciler._sink = w.engine.submit
    w.reconciler._wants_every = w.engine.wants_every_report


# -- 2. restart without the journal -------------------------------------------

def test_restart_without_journal_does_not_fence_a_host_that_came_back():
    w = World()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]
    _restart_without_journal(w)
    w.compute.boot("compute-1")        # back, cleaned up, heartbeating
    for _ in range(15):
        w.pass_()
    assert w.fencer.powered_off == ["compute-1"]       # not again
    assert w.state("compute-1")[0] == "active"
    svc = w.compute.services["compute-1"]
    assert svc["status"] == "enabled" and not svc["forced_down"]
    dsts = [t["dst"] for t in w.journal.transitions()
            if t["host_name"] == "compute-1"]
    assert "fencing" not in dsts and dsts[-2:] == ["recovering", "active"]


def test_restart_without_journal_gives_a_booting_host_time_then_fences():
    """Nova's updated_at is fresh from instanceha's own force-down, not
    from a heartbeat, and a booting nova-compute cleans up before its first
    heartbeat: the host is held for boot time + grace, then, still silent,
    proven dead again."""
    w = World()
    w.conf.set_override("resume_boot_time", 20, "policy")
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    _restart_without_journal(w)
    w.compute.services["compute-1"]["updated_at"] = w.clock()   # our PUT
    w.pass_()
    state, reason = w.state("compute-1")
    assert state == "pending" and "no journal" in reason
    for _ in range(20):                  # boot time: not before 20 + 5 s
        w.pass_()
    assert w.fencer.powered_off == ["compute-1"]
    for _ in range(15):
        w.pass_()
    assert w.fencer.powered_off == ["compute-1", "compute-1"]
    dsts = [t["dst"] for t in w.journal.transitions()]
    assert dsts[0] == "pending" and "fencing" in dsts, dsts
    assert w.state("compute-1")[0] == "evacuated"


# -- 3. a host its operator disabled --------------------------------------------

def _operator_disables(w, host, reason="RAID swap"):
    w.compute.services[host].update(status="disabled",
                                    disabled_reason=reason)


def test_host_disabled_by_operator_is_left_alone_and_shown():
    w = World()
    _operator_disables(w, "compute-1")
    w.pass_()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
    assert w.fencer.powered_off == []
    assert not w.compute.migrations
    state, reason = w.state("compute-1")
    assert state == "suspect"
    assert "disabled by operator: RAID swap" in reason
    host = next(h for h in w.engine.snapshot()["hosts"]
                if h["name"] == "compute-1")
    assert host["operator_disabled"] == "RAID swap"
    svc = w.compute.services["compute-1"]
    assert svc["disabled_reason"] == "RAID swap" and not svc["forced_down"]


def test_disabled_host_recovered_when_allowed_keeps_its_operator_state():
    w = World()
    w.conf.set_override("recover_disabled_hosts", True, "policy")
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.reconciler._sink = w.engine.submit
    w.reconciler._wants_every = w.engine.wants_every_report
    _operator_disables(w, "compute-1")
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]
    w.compute.boot("compute-1")
    w.until("compute-1", "active")
    svc = w.compute.services["compute-1"]
    assert not svc["forced_down"]
    assert svc["status"] == "disabled"
    assert svc["disabled_reason"] == "RAID swap"
    assert "as its operator had it: RAID swap" in w.state("compute-1")[1]


# -- 5. two service rows, one BMC ----------------------------------------------

def test_no_power_off_through_a_bmc_that_a_live_service_maps_to():
    w = World()
    # compute-2 is the stale row of a host renamed to compute-1: both
    # inventory entries reach the same machine.
    w.ctx.inventory["compute-2"] = dataclasses.replace(
        w.ctx.inventory["compute-1"], host="compute-2")
    w.pass_()
    w.compute.kill("compute-2")
    w.until("compute-2", "failed")
    assert w.fencer.powered_off == []
    assert not w.compute.migrations
    reason = w.state("compute-2")[1]
    assert "refusing to power off" in reason and "compute-1" in reason
    assert w.compute.services["compute-1"]["alive"]


def test_shared_bmc_of_a_dead_service_does_not_block_fencing():
    w = World(hosts=5)
    w.ctx.inventory["compute-2"] = BMC(host="compute-2", driver="fake",
                                       address="BMC-compute-1/")
    w.pass_()
    w.compute.kill("compute-1")
    w.compute.kill("compute-2")
    w.until("compute-1", "evacuated")
    assert "compute-1" in w.fencer.powered_off


# -- 8. suspend stops an evacuation at the next server boundary ----------------

def test_suspend_stops_a_running_evacuation_between_servers():
    w = World(servers=4)
    w.conf.set_override("concurrency", 1, "evacuation")
    seen = []

    def suspend_after_first(server_id, dest):
        if not seen:
            rec = w.engine.find("compute-1")
            w.engine.submit(Event(E.OPERATOR_SUSPEND, rec.id, w.clock(),
                                  name=rec.name, reason="hands off",
                                  source="operator"))
            seen.append(w.engine.running_work(rec.id))

    w.compute.on_evacuate = suspend_after_first
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspended")
    for _ in range(5):
        w.pass_()
    assert w.state("compute-1") == ("suspended",
                                    "suspended by operator: hands off")
    assert len(w.compute.migrations) == 1      # the one already sent
    assert seen and seen[0].startswith("evacuate: 0 of 4 servers sent")
    rec = w.engine.find("compute-1")
    assert w.engine.running_work(rec.id) is None
    outcome = [a for a in w.journal.actions() if a["kind"] == "evacuate"]
    assert "operator's suspend" in outcome[-1]["detail"]


# -- found in review ------------------------------------------------------------

def _restart_with_journal(w):
    """instanceha restarted on the same journal; the engine acts before its
    first poll of Nova only on what the poll allows (world_seen)."""
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.reconciler._sink = w.engine.submit
    w.reconciler._wants_every = w.engine.wants_every_report
    polled = w.reconciler.passes
    w.ctx.readiness.world_seen = lambda: w.reconciler.passes > polled
    w.engine.resume_from_journal()


def test_restart_does_not_fence_a_suspect_host_that_came_back_meanwhile():
    w = World()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    w.clock.advance(600)                 # instanceha down for 10 minutes
    w.compute.boot("compute-1")          # ... and the host came back
    _restart_with_journal(w)
    w.engine.tick()                      # before the first poll
    w.drain()
    assert w.fencer.powered_off == []
    w.pass_()
    assert w.state("compute-1")[0] == "active"
    assert w.fencer.powered_off == []


def test_restart_while_fencing_watches_the_host_afresh_first():
    from instanceha.fsm.machine import HostRecord
    from instanceha.fsm.states import State
    w = World()
    w.pass_()
    uuid = w.compute.services["compute-1"]["id"]
    # The journal a crash left mid-fencing (the power-off never happened);
    # the host is alive when instanceha comes back.
    w.journal.record_transition(
        HostRecord(id=uuid, name="compute-1"),
        HostRecord(id=uuid, name="compute-1", state=State.FENCING,
                   heartbeat_ok=False, lost_at=w.clock() - 60),
        Event(E.TICK, uuid, w.clock(), name="compute-1"))
    _restart_with_journal(w)
    assert w.state("compute-1")[0] == "suspect"
    w.engine.tick()
    w.drain()
    w.pass_()
    assert w.fencer.powered_off == []
    assert w.state("compute-1")[0] == "active"


def test_suspend_during_isolation_keeps_what_nova_was_told():
    w = World()
    force_down = w.compute.force_down

    def suspend_meanwhile(service_id, reason):
        out = force_down(service_id, reason)
        rec = w.engine.find("compute-1")
        w.engine.submit(Event(E.OPERATOR_SUSPEND, rec.id, w.clock(),
                              name=rec.name, reason="hands off",
                              source="operator"))
        return out
    w.compute.force_down = suspend_meanwhile
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspended")
    rec = w.engine.find("compute-1")
    assert rec.isolated and rec.written_at is not None
    assert w.compute.services["compute-1"]["forced_down"]
    w.compute.force_down = force_down
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name=rec.name, source="operator"))
    w.compute.boot("compute-1")          # repaired and back
    w.until("compute-1", "active")
    svc = w.compute.services["compute-1"]
    assert not svc["forced_down"] and svc["status"] == "enabled"


def test_hosts_left_to_their_operator_do_not_hold_the_others():
    w = World(hosts=4)
    for h in ("compute-0", "compute-1"):
        _operator_disables(w, h, "RMA")
    w.pass_()
    w.compute.kill("compute-0")
    w.compute.kill("compute-1")
    for _ in range(10):
        w.pass_()
    w.compute.kill("compute-2")          # a real failure
    w.until("compute-2", "evacuated")
    assert w.fencer.powered_off == ["compute-2"]


def test_no_nova_call_for_the_shared_bmc_check_when_no_entry_shares_it():
    """At 2,000 hosts, 20 fencings each listing every service slowed the
    power-offs to a minute: the check asks Nova only when some other
    inventory entry reaches the same BMC."""
    from instanceha.engine import actions
    w = World(hosts=5)
    w.pass_()
    rec = w.engine.find("compute-1")

    def no_call():
        raise AssertionError("Nova asked for nothing")
    real = w.compute.list_services
    w.compute.list_services = no_call
    bmc = w.ctx.bmc_for("compute-1")
    assert actions.live_sharers(w.ctx, rec, bmc) == []
    w.ctx.inventory["compute-2"] = dataclasses.replace(bmc, host="compute-2")
    w.compute.list_services = real
    assert [s.host for s in actions.live_sharers(w.ctx, rec, bmc)] == [
        "compute-2"]
