"""Issue 21, hole 1: a proof of death is never reused. Every evacuation
pass proves the source host dead again (a fresh BMC read says Off, and
Nova has no heartbeat from it since our own write) before its first
evacuate request; a host not proven dead gets nothing sent and is watched
again."""

from instanceha.drivers.compute import base as cb
from instanceha.engine.engine import Engine
from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import Action, State as S
from instanceha.policy import proof
from instanceha.sources.reconciler import Reconciler
from tests.unit.test_engine import World
from tests.unit import fakes  # noqa: E402

P = machine.Policy(grace_period=10.0, resume_boot_time=300.0,
                   max_attempts=3)


# -- the pure decision ----------------------------------------------------------

def test_reproof_needs_a_fresh_off_and_no_heartbeat_since_our_write():
    ok, why = proof.reproof("off", updated_at=100.0, floor=100.0)
    assert ok, why
    ok, why = proof.reproof("on", updated_at=100.0, floor=100.0)
    assert not ok and "power On" in why
    ok, why = proof.reproof("no method answers a power-state read", 100.0,
                            100.0)
    assert not ok and "no fresh BMC read of power Off" in why
    ok, why = proof.reproof("off", updated_at=131.0, floor=100.0)
    assert not ok and "heartbeat from the host after it was fenced" in why
    ok, why = proof.reproof("off", 100.0, 100.0, "BMC x: reported Off while up")
    assert not ok and "reported Off while up" in why


# -- the transition ---------------------------------------------------------------

def _evacuating(attempts=1):
    return HostRecord(id="u1", name="c1", state=S.EVACUATING, since=50.0,
                      heartbeat_ok=False, lost_at=10.0, fenced_at=40.0,
                      written_at=41.0, isolated=True, attempts=attempts,
                      busy=True)


def test_failed_reproof_sends_nothing_and_watches_the_host_again():
    ev = Event(E.REPROOF_FAILED, "u1", 100.0, name="c1", source="action",
               reason="the BMC reports power On")
    new, actions = machine.step(_evacuating(), ev, P)
    assert new.state is S.PENDING and actions == []
    assert "not proven dead now (the BMC reports power On)" in new.reason
    # Its boot time and a grace period to report (then: cleanup check
    # only), else fenced again through the normal path.
    assert new.retry_at == 100.0 + 300.0 + 10.0
    assert new.isolated and not new.waits_for_capacity
    tick = Event(E.TICK, "u1", new.retry_at, name="c1")
    again, actions = machine.step(new, tick, P)
    assert again.state is S.FENCING and actions == [Action.FENCE]
    # Bounded like any other attempt.
    new, _ = machine.step(_evacuating(attempts=3), ev, P)
    assert new.state is S.FAILED and "after 3 attempts" in new.reason


def test_failed_reproof_of_a_host_that_reports_back_goes_to_cleanup_only():
    ev = Event(E.REPROOF_FAILED, "u1", 100.0, name="c1", source="action",
               reason="heartbeat")
    new, _ = machine.step(_evacuating(), ev, P)
    ok = Event(E.HEARTBEAT_OK, "u1", 101.0, name="c1",
               detail={"updated_at": 99.0, "forced_down": True})
    new, actions = machine.step(new, ok, P)
    assert new.state is S.RECOVERING and actions == [Action.CHECK_CLEANUP]


# -- the engine: a restart resumes a fenced host that was powered on meanwhile --

class Restorable(World):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.power_offs = []             # every power-off asked for
        real = self.fencer.power_off

        def power_off(bmc):
            self.power_offs.append(bmc.host)
            real(bmc)
        self.fencer.power_off = power_off

    def power_on(self, host):
        """The BMC's power-restore policy or a technician: the machine is
        On again (nova-compute still booting: no heartbeat yet)."""
        self.fencer.powered_off = [h for h in self.fencer.powered_off
                                   if h != host]

    def restart(self):
        self.engine = Engine(self.conf, self.ctx, self.journal, self.clock)
        assert self.engine.resume_from_journal() >= 1
        self.reconciler = Reconciler(self.conf, self.compute,
                                     self.engine.submit, self.clock)


def _fenced_then_restarted(w):
    """compute-1 proven dead and journalled 'fenced'; the isolation in
    Nova fails, then instanceha stops; the machine is powered on; a new
    instanceha resumes from the journal."""
    w.pass_()
    w.compute.fail["force_down"] = [cb.ComputeError("HTTP 503")] * 2
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
        if w.state("compute-1")[0] == "fenced":
            break
    assert w.state("compute-1")[0] == "fenced"
    assert w.power_offs == ["compute-1"]
    assert w.journal.latest()["uuid-1"]["state"] == "fenced"
    w.compute.fail.pop("force_down", None)
    w.power_on("compute-1")
    w.restart()


def test_restart_does_not_evacuate_a_fenced_host_powered_on_meanwhile():
    w = Restorable()
    w.conf.set_override("resume_boot_time", 20, "policy")
    _fenced_then_restarted(w)
    w.pass_()
    state, reason = w.state("compute-1")
    assert w.compute.migrations == []                 # nothing sent
    assert state == "pending", (state, reason)
    assert "BMC reports power On" in reason
    dsts = [t["dst"] for t in w.journal.transitions("uuid-1")]
    assert dsts[-2:] == ["evacuating", "pending"]
    # It stays silent (hung in its BIOS, say): after its boot time and
    # grace period it is powered off again and only then evacuated.
    for _ in range(20):
        w.pass_()
    assert w.compute.migrations == []
    w.until("compute-1", "evacuated", passes=30)
    assert w.power_offs == ["compute-1", "compute-1"]
    assert all(v["host"] != "compute-1" for v in w.compute.servers.values())


def test_restart_resumed_host_that_reports_back_is_put_back_not_evacuated():
    w = Restorable()
    _fenced_then_restarted(w)
    w.pass_()
    assert w.state("compute-1")[0] == "pending"
    w.compute.boot("compute-1")          # nova-compute up again
    w.until("compute-1", "active", passes=20)
    assert w.compute.migrations == []
    assert w.power_offs == ["compute-1"]       # not again
    assert not w.compute.services["compute-1"]["forced_down"]


def test_every_evacuation_pass_reproves_even_without_a_restart():
    """No restart: the host is powered on between its isolation and the
    evacuation pass (a long wait); the pass sends nothing."""
    w = Restorable()
    w.pass_()
    real = w.compute.force_down

    def force_down(service_id, reason):
        svc = real(service_id, reason)
        w.power_on("compute-1")       # on again right after the isolation
        return svc
    w.compute.force_down = force_down
    w.compute.kill("compute-1")
    w.until("compute-1", "pending", passes=30)
    assert w.compute.migrations == []
    assert "BMC reports power On" in w.state("compute-1")[1]


def test_a_long_pass_proves_the_host_dead_again_before_sending_more():
    """Within one pass, servers still to send after [evacuation]
    proof_max_age are sent only after a new proof: the host powered on
    after the first request gets nothing more."""
    from instanceha.engine import evacuator
    w = Restorable(servers=3)
    w.conf.set_override("concurrency", 1, "evacuation")
    w.conf.set_override("proof_max_age", 1.0, "evacuation")
    w.pass_()
    w.fencer.power_off(w.ctx.inventory["compute-1"])
    svc = w.compute.force_down("uuid-1", "instanceha: evacuating x")
    rec = w.engine.find("compute-1")
    rec = rec.__class__(**dict(rec.__dict__, isolated=True,
                               written_at=svc.updated_at))

    def on_evacuate(sid, dest):
        w.power_on("compute-1")          # a technician, mid-pass
        w.clock.advance(2.0)
    w.compute.on_evacuate = on_evacuate
    result = fakes.evacuate_to_end(w.ctx, rec, evacuator.evacuate)
    assert result.kind is E.REPROOF_FAILED, result
    assert "power On" in result.reason and "so far 1/3" in result.reason
    assert len(w.compute.migrations) == 1


def test_a_request_row_left_open_is_closed_when_the_host_is_put_back():
    """Issue 21 follow-up: a previous process left an evacuate request
    row open ('requested'); the re-proof fails (the machine was powered
    on) and the host reports back and is put back. The row is closed,
    with the reason, when the host is put back (not left open for ever);
    it stays open while the host is pending, so a later pass of the same
    recovery still waits for that request."""
    w = Restorable()
    _fenced_then_restarted(w)
    row = w.journal.evacuation_requested("uuid-1", "compute-1",
                                         "compute-1-vm-0", w.clock())
    w.pass_()
    assert w.state("compute-1")[0] == "pending"
    rows = {r["id"]: r for r in w.journal.evacuations()}
    assert rows[row]["status"] == "requested"
    w.compute.boot("compute-1")          # nova-compute up again
    w.until("compute-1", "active", passes=20)
    assert w.compute.migrations == []
    rows = {r["id"]: r for r in w.journal.evacuations()}
    assert rows[row]["status"] == "interrupted", rows[row]
    assert rows[row]["finished_at"] is not None
    assert "the host reported back and was put back" in rows[row]["detail"]
