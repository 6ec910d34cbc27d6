"""A BMC reporting Off is the second witness of death: with the heartbeat
lost, fencing starts without the grace period. Alone, it starts nothing."""

from instanceha.drivers.fencing import base as fb
from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import State as S
from tests.unit.test_engine import World

P = machine.Policy(grace_period=10.0)


def _suspect(**kw):
    return HostRecord(id="u1", name="c1", state=S.SUSPECT, since=100.0,
                      heartbeat_ok=False, lost_at=100.0, **kw)


def _tick(rec, at, policy=P):
    return machine.step(rec, Event(E.TICK, "u1", at, name="c1"), policy)[0]


def test_power_off_skips_the_grace_period():
    new = _tick(_suspect(power_off_at=100.5), 101.0)
    assert new.state is S.FENCING and "BMC reports power Off" in new.reason
    assert _tick(_suspect(), 101.0).state is S.SUSPECT     # grace runs
    assert _tick(_suspect(), 110.0).state is S.FENCING


def test_power_off_alone_never_fences():
    rec = HostRecord(id="u1", name="c1", state=S.ACTIVE, heartbeat_ok=True)
    rec, _ = machine.step(rec, Event(E.POWER_OFF, "u1", 5.0, name="c1",
                                     detail={"vouched": True}), P)
    assert rec.state is S.ACTIVE and rec.power_off_at == 5.0
    assert _tick(rec, 500.0).state is S.ACTIVE
    # Off, then On again: the evidence is gone.
    rec = _suspect(power_off_at=100.5)
    rec, _ = machine.step(rec, Event(E.POWER_ON, "u1", 100.7, name="c1"), P)
    assert rec.power_off_at is None and _tick(rec, 101.0).state is S.SUSPECT


def test_power_evidence_can_be_turned_off():
    off = machine.Policy(grace_period=10.0, power_evidence=False)
    assert _tick(_suspect(power_off_at=100.5), 101.0, off).state is S.SUSPECT


def test_a_host_that_is_off_has_no_dump_to_wait_for():
    kd = machine.Policy(grace_period=10.0, kdump_enabled=True,
                        kdump_fence_delay=30.0)
    assert _tick(_suspect(), 101.0, kd).state is S.SUSPECT
    assert _tick(_suspect(power_off_at=100.5), 101.0, kd).state is S.FENCING


class PowerLoss(World):
    """The fake BMC reports Off for hosts that lost power."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.unpowered = set()
        fencer, unpowered = self.fencer, self.unpowered
        real = fencer.power_state

        def power_state(bmc):
            if bmc.host in unpowered:
                return fb.PowerState.OFF
            return real(bmc)
        fencer.power_state = power_state

    def lose_power(self, host):
        self.unpowered.add(host)
        self.compute.kill(host)


def _seconds_to_fencing(w, host):
    for n in range(1, 60):
        w.pass_()
        if w.state(host)[0] in ("fencing", "fenced", "evacuating",
                                "evacuated"):
            return n
    raise AssertionError(w.state(host))


def _seen_on(w):
    """What the audit's first pass leaves: every BMC seen On while its
    host heartbeats."""
    for host, bmc in w.ctx.inventory.items():
        w.ctx.evidence.read(host, bmc, "on", "audit", nova_up=True)


def test_engine_reads_the_bmc_when_the_heartbeat_is_lost():
    w = PowerLoss(hosts=4)
    w.pass_()
    _seen_on(w)
    w.lose_power("compute-1")
    fast = _seconds_to_fencing(w, "compute-1")
    w2 = PowerLoss(hosts=4)
    w2.pass_()
    _seen_on(w2)
    w2.compute.kill("compute-1")           # crashed, BMC still On
    slow = _seconds_to_fencing(w2, "compute-1")
    # Same heartbeat delta for both; only the grace period (5 s) differs.
    assert slow - fast >= 4, (fast, slow)
    rows = [t for t in w.journal.transitions()
            if t["host_name"] == "compute-1" and t["dst"] == "fencing"]
    assert "BMC reports power Off" in rows[0]["reason"]


def test_bmc_off_for_a_live_host_is_not_acted_on():
    """An inventory entry pointing at a machine that is off: the host runs
    on and heartbeats; nothing is fenced."""
    w = PowerLoss(hosts=4)
    w.unpowered.add("compute-2")
    for _ in range(30):
        w.pass_()
    assert w.state("compute-2")[0] == "active"
    assert w.fencer.powered_off == []
