"""A host whose fencing chain has a watchdog level is condemned at the
start of its fencing (issue 37, doc/safety.md rule 25): the pill leaves
before the power levels are tried, so the watchdog's deadline runs while
a dead BMC is retried; reaching the watchdog level goes on from that
condemnation (its deadline is not restarted); a chain without a watchdog
level never condemns. Fake clocks; nothing sleeps."""

from instanceha import conf as ih_conf
from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import watchdog as wd
from instanceha.drivers.fencing.inventory_entry import BMC
from tests.unit import test_watchdog_level_engine as lvl

ISO, WDT, MARGIN = 20.0, 30.0, 4.0


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Witness:
    """The heartbeat listener as the method reads it: one armed host,
    heard at 1000, with no peers (a condemnation is published at once)."""

    def __init__(self, clock, armed=True):
        self.clock = clock
        self.armed = armed
        self.condemned = []            # the time of each condemnation

    def monotonic(self):
        return self.clock()

    def watchdog_state(self, host):
        at = self.condemned[-1] if self.condemned else None
        return wd.WatchdogState(host, self.armed, 1 if self.armed else 0,
                                WDT, ISO, 1000.0, at, at, 0, 0)

    def condemn(self, host, reason):
        self.condemned.append(self.clock())
        return self.clock()

    def lift(self, host):
        self.condemned.clear()


class DeadBmc(fb.FencingDriver):
    """A BMC that never answers; each attempt takes 4 s of the clock.
    Records how many condemnations had been made when it was tried."""

    def __init__(self, name, clock, witness, off=False):
        self.name = name
        self.clock = clock
        self.witness = witness
        self.off = off
        self.seen = []

    def power_off(self, bmc):
        self.seen.append(len(self.witness.condemned))
        self.clock.now += 4.0
        if self.off:
            return None
        raise fb.BmcUnreachable("%s: BMC did not answer" % bmc.host)

    def power_state(self, bmc):
        return fb.PowerState.OFF if self.off else fb.PowerState.UNKNOWN


def _setup(levels=("redfish", "watchdog"), off=False, armed=True):
    clock = Clock()
    witness = Witness(clock, armed)
    drivers = {
        "watchdog": wd.WatchdogDriver(
            ih_conf.make({"fencing": {"watchdog_margin": MARGIN}}), witness,
            sleep=lambda s: None),
        "redfish": DeadBmc("redfish", clock, witness, off),
        "ipmi": DeadBmc("ipmi", clock, witness, off)}
    first, *rest = levels
    entry = BMC(host="h", driver=first, address="" if first == "watchdog"
                else "10.0.0.1",
                fallbacks=tuple(BMC(host="h", driver=d, address=""
                                    if d == "watchdog" else "10.0.0.2")
                                for d in rest),
                grouping=(1,) * len(levels))
    return clock, witness, drivers, entry


def test_the_pill_leaves_before_the_power_level_is_tried():
    clock, witness, drivers, entry = _setup()
    checked = []

    def check(method):
        checked.append((method.driver, len(witness.condemned)))
        return None
    done = chain.fence(entry, drivers.__getitem__, check=check,
                       progress=chain.Progress())
    assert isinstance(done, chain.Waiting)
    # condemned at 1000 (the attempt's start), before the BMC's attempt
    assert witness.condemned == [1000.0]
    assert drivers["redfish"].seen == [1]
    # the watchdog's check ran first (the engine journals the step
    # there), before its pill; the power level's after it
    assert checked == [("watchdog", 0), ("redfish", 1)]
    # the deadline runs from the condemnation, not from the level's turn
    # (1004): 1000 + 20 + 30 + 4, now 1004
    assert done.after == ISO + WDT + MARGIN - 4.0


def test_the_deadline_is_not_restarted_when_the_level_is_reached():
    clock, witness, drivers, entry = _setup()
    done = chain.fence(entry, drivers.__getitem__,
                       progress=chain.Progress())
    while isinstance(done, chain.Waiting):
        clock.now += done.after
        done = chain.fence(entry, drivers.__getitem__,
                           progress=done.progress)
    assert isinstance(done, chain.FenceOutcome) and done.level == 2
    assert witness.condemned == [1000.0]          # one pill, never again
    assert clock.now == 1000.0 + ISO + WDT + MARGIN


def test_a_power_level_proving_off_leaves_the_condemnation():
    """The host is off anyway: fenced by the power level; the pill stays
    until the host is back and cleaned up (unfence lifts it)."""
    clock, witness, drivers, entry = _setup(off=True)
    done = chain.fence(entry, drivers.__getitem__,
                       progress=chain.Progress())
    assert isinstance(done, chain.FenceOutcome) and done.level == 1
    assert witness.condemned == [1000.0]
    chain.unfence(entry, drivers.__getitem__)
    assert witness.condemned == []


def test_a_chain_without_a_watchdog_level_never_condemns():
    clock, witness, drivers, entry = _setup(levels=("redfish", "ipmi"))
    try:
        chain.fence(entry, drivers.__getitem__, progress=chain.Progress())
    except chain.FenceChainUnreachable:
        pass
    else:
        raise AssertionError("a dead BMC fenced the host")
    assert witness.condemned == []
    assert drivers["redfish"].seen == [0] and drivers["ipmi"].seen == [0]


def test_an_unarmed_host_is_not_condemned_early():
    clock, witness, drivers, entry = _setup(armed=False)
    try:
        chain.fence(entry, drivers.__getitem__, progress=chain.Progress())
    except chain.FenceChainError as e:
        assert "never reported an armed watchdog" in str(e)
    else:
        raise AssertionError("an unarmed host was counted fenced")
    assert witness.condemned == []


def test_a_failed_check_condemns_nothing_early():
    clock, witness, drivers, entry = _setup()

    def check(method):
        return "refused" if method.driver == "watchdog" else None
    try:
        chain.fence(entry, drivers.__getitem__, check=check,
                    progress=chain.Progress())
    except chain.FenceChainError:
        pass
    assert witness.condemned == []


def test_the_engine_condemns_before_the_bmc_is_tried():
    """In the engine: the condemnation is journalled and its pill sent
    within the fence action, before the BMC's power-off is tried."""
    w, src, _ = lvl._world()
    seen = []
    real = w.fencer.power_off

    def power_off(bmc):
        state = src.watchdog_state(bmc.host)
        seen.append(state is not None and state.condemned_at is not None)
        return real(bmc)
    w.fencer.power_off = power_off
    w.pass_()
    lvl.beat(src, "compute-1", 1)
    w.compute.kill("compute-1")
    w.until("compute-1", "fencing")
    w.pass_()
    assert seen and seen[0] is True, seen
    kinds = [a["kind"] for a in w.journal.actions()
             if a["host_name"] == "compute-1"]
    assert kinds.count("condemn") == 1 and \
        kinds.index("fence") < kinds.index("condemn"), kinds


def test_a_gate_held_at_the_start_condemns_nothing():
    """The engine's check raises FenceHeld when the fencing gate closed:
    the attempt stops before any pill."""
    clock, witness, drivers, entry = _setup()

    class Held(Exception):
        pass

    def check(method):
        raise Held("control plane down")
    try:
        chain.fence(entry, drivers.__getitem__, check=check,
                    progress=chain.Progress())
    except Held:
        pass
    else:
        raise AssertionError("the held gate did not stop the attempt")
    assert witness.condemned == [] and drivers["redfish"].seen == []
