"""Issue 21, hole 2: a BMC reporting Off proves nothing unless it was seen
reporting On for that host; one that reported Off while its host was up
(Nova then recorded another heartbeat) makes the host UNPROTECTED, and it
is never fenced or evacuated through that entry."""

from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing.inventory import BMC
from instanceha.engine.engine import Context, Engine
from instanceha.policy import proof
from instanceha.sources.audit import FencingAudit
from instanceha.sources.reconciler import Reconciler
from tests.unit.test_engine import World

# -- the pure decisions -----------------------------------------------------------


def _suspected(updated_at=100.0):
    return proof.read(None, "off", 50.0, "audit", nova_up=True,
                      after=(updated_at, "enabled", None))


def test_off_while_up_then_a_newer_heartbeat_makes_the_bmc_untrusted():
    ev = _suspected()
    assert ev.suspicion is not None and ev.untrusted is None
    assert proof.heartbeat(ev, 100.0, "enabled").untrusted is None  # same
    ev = proof.heartbeat(ev, 110.0, "enabled", label="BMC x")
    assert "BMC x reported power Off while the host was up" in ev.untrusted
    assert proof.off_proves(ev)[0] is False
    assert proof.off_proves(ev, isolated=True)[0] is False


def test_a_host_that_lost_power_just_before_the_read_is_not_untrusted():
    """Nova still says up for a while after the last heartbeat: the read
    found Off because the power really went. No newer heartbeat comes;
    the loss clears the suspicion."""
    ev = proof.read(None, "on", 10.0, "audit", nova_up=True)   # seen On
    ev = proof.read(ev, "off", 50.0, "audit", nova_up=True,
                    after=(100.0, "enabled", None))
    ev = proof.heartbeat(ev, 100.0, "enabled")
    ev = proof.lost(ev)
    assert ev.suspicion is None and ev.untrusted is None
    assert proof.off_proves(ev) == (True, "")


def test_our_own_write_or_an_operators_is_not_a_heartbeat():
    ev = _suspected()
    # instanceha's force-down bumped updated_at to 120.
    assert proof.heartbeat(ev, 120.0, "disabled", "instanceha: x",
                           ours=120.0).untrusted is None
    # An operator disabling the service bumps it too: a new baseline.
    ev = proof.heartbeat(ev, 130.0, "disabled", "RAID swap")
    assert ev.untrusted is None and ev.suspicion.updated_at == 130.0
    assert proof.heartbeat(ev, 140.0, "disabled", "RAID swap").untrusted


def test_off_proves_only_from_a_bmc_seen_on_or_our_own_power_off():
    ok, why = proof.off_proves(None)
    assert not ok and "never seen reporting On" in why
    assert proof.off_proves(None, isolated=True) == (True, "")
    seen = proof.read(None, "on", 1.0, "heartbeat loss")
    assert proof.off_proves(seen) == (True, "")
    assert proof.Evidence.from_dict(_suspected().to_dict()) == _suspected()


# -- the engine: an entry pointing at a machine that is already off -----------

RETIRED = "bmc-retired"


class WrongEntry(World):
    """compute-1's inventory entry points at a retired machine that is
    off; compute-1 itself runs on."""

    def __init__(self, audit=True, **kw):
        super().__init__(**kw)
        self.ctx.inventory["compute-1"] = BMC(host="compute-1",
                                              driver="fake", address=RETIRED)
        fencer = self.fencer
        real_state, real_off = fencer.power_state, fencer.power_off
        self.retired_power_offs = 0

        def power_state(bmc):
            return fb.PowerState.OFF if bmc.address == RETIRED \
                else real_state(bmc)

        def power_off(bmc):
            if bmc.address == RETIRED:
                self.retired_power_offs += 1     # already off: "confirmed"
                return
            real_off(bmc)
        fencer.power_state, fencer.power_off = power_state, power_off
        self.audit = FencingAudit(self.conf, self.compute, self.ctx.bmc_for,
                                  self.ctx.fencer, self.clock,
                                  sink=self.engine.submit) if audit else None
        if audit:
            self.engine.unprotected = self.audit.unprotected

    def audit_once(self):
        self.audit.run_once()
        self.drain()


def test_an_entry_pointing_at_a_machine_that_is_off_is_never_proof():
    w = WrongEntry()
    w.pass_()
    w.audit_once()                      # Off while Nova has compute-1 up
    w.pass_()                           # ... and it heartbeats again
    unprotected = w.engine.snapshot()["unprotected"]
    assert "BMC untrusted" in unprotected["compute-1"]
    w.compute.kill("compute-1")         # nova-compute crashes; host runs
    w.until("compute-1", "failed", passes=40)
    reason = w.state("compute-1")[1]
    assert "UNPROTECTED" in reason and RETIRED in reason, reason
    assert w.compute.migrations == []
    assert w.retired_power_offs == 0
    assert all(v["host"] == "compute-1" for k, v in w.compute.servers.items()
               if k.startswith("compute-1"))


def test_without_the_audit_a_bmc_never_seen_on_proves_nothing():
    """No audit ([audit] enabled = false): the read when the heartbeat is
    lost says Off from a BMC never seen On: no shortcut, and the fence
    refuses to count that Off as a proof."""
    w = WrongEntry(audit=False, hosts=5)
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "failed", passes=40)
    reason = w.state("compute-1")[1]
    assert "never seen reporting On" in reason, reason
    assert w.compute.migrations == []
    # The other hosts are protected as before.
    w.compute.kill("compute-2")
    w.until("compute-2", "evacuated", passes=40)


def test_a_host_that_really_lost_power_is_still_recovered():
    """Seen On at the first audit; its power goes just before the next
    audit reads it (Nova still says up): recovered, not refused."""
    w = WrongEntry()
    w.ctx.inventory["compute-1"] = BMC(host="compute-1", driver="fake",
                                       address="bmc-compute-1")
    w.pass_()
    w.audit_once()                                   # On while up
    w.fencer.powered_off.append("compute-1")         # power lost ...
    w.compute.services["compute-1"]["alive"] = False
    w.audit_once()                                   # ... read: Off, "up"
    w.until("compute-1", "evacuated", passes=40)
    assert w.ctx.evidence.untrusted(w.ctx.inventory["compute-1"]) is None


def test_evidence_survives_a_restart():
    """A host seen On before instanceha stopped, dead (Off) when it starts
    again: recovered through the BMC seen On before."""
    w = World()
    w.pass_()
    w.compute.kill("compute-1")        # the read at the loss sees On
    w.until("compute-1", "suspect")
    assert w.ctx.evidence.off_proves(
        "compute-1", w.ctx.inventory["compute-1"])[0]
    # instanceha stops; the host loses its power meanwhile.
    w.fencer.powered_off.append("compute-1")
    w.ctx = Context(w.conf, w.compute, w.journal, dict(w.ctx.inventory),
                    lambda name: w.fencer, w.clock, w.ctx.board)
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.engine.resume_from_journal()
    w.reconciler = Reconciler(w.conf, w.compute, w.engine.submit, w.clock)
    w.until("compute-1", "evacuated", passes=40)


def test_an_audit_read_before_novas_first_word_does_not_make_the_record():
    """At start the audit may read the BMCs before the reconciler's first
    pass: its reads are kept as evidence, and a host instanceha isolated
    (no journal) is still adopted from Nova's marker (rule 3), not taken
    for a new active host."""
    w = WrongEntry()
    w.compute.services["compute-1"].update(
        forced_down=True, status="disabled",
        disabled_reason="instanceha: evacuating 2026-11-23T10:00:00Z")
    w.audit_once()                          # before any reconciler pass
    assert w.engine.records() == {}
    w.pass_()
    state, reason = w.state("compute-1")
    assert state == "pending" and "no journal" in reason, (state, reason)
    assert w.ctx.evidence.get("compute-0", w.ctx.inventory["compute-0"]) \
        .seen_on_at is not None
