"""The fencing audit judges each level of a host's entry (issue 37): a
host whose entry has no power method at all (only a watchdog or Ceph
level) is protected when such a level can prove it dead now, and the
audit says which; it is unprotected, with each level's reason, when none
can. Fake clocks and drivers; nothing sleeps."""

import random

from instanceha import conf as conf_pkg
from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import watchdog as wd
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.heartbeat import protocol
from instanceha.sources.audit import FencingAudit, judge
from instanceha.sources.watchdog_book import WatchdogBook
from tests.unit.fakes import Clock, FakeCompute
from tests.unit.test_audit import svc

ON = fb.PowerState.ON
ISO, WDT = 20.0, 30


class Witness:
    def __init__(self, book, clock):
        self.book, self.clock = book, clock

    def monotonic(self):
        return self.clock()

    def watchdog_state(self, host_name):
        return self.book.state(host_name)

    def condemn(self, host_name, reason):
        raise AssertionError("the audit never condemns")

    def lift(self, host_name):
        raise AssertionError("the audit never lifts")


class Power(fb.FencingDriver):
    name = "fake"

    def __init__(self):
        self.broken = set()

    def power_off(self, bmc):
        raise AssertionError("the audit never powers off")

    def power_state(self, bmc):
        if bmc.host in self.broken:
            raise fb.BmcUnreachable("%s: BMC %s timed out"
                                    % (bmc.host, bmc.address))
        return ON


class Ceph(fb.FencingDriver):
    name = "ceph_blocklist"
    proves = fb.STORAGE

    def __init__(self):
        self.down = False

    def ready(self, bmc):
        if self.down:
            raise fb.BmcUnreachable("ceph_blocklist: cannot connect to the "
                                    "monitors")
        return None

    def power_off(self, bmc):
        raise AssertionError("powers nothing off")

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


def armed(book, host, at):
    book.beat(host, protocol.WatchdogReport(
        protocol.WATCHDOG_ARMED, WDT, ISO, b"n" * 16, (), ()), at)


class Rig:
    def __init__(self):
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts=3, servers_per_host=0)
        self.book = WatchdogBook()
        self.power, self.ceph = Power(), Ceph()
        drivers = {
            "fake": self.power, "ceph_blocklist": self.ceph,
            "watchdog": wd.WatchdogDriver(
                conf_pkg.make({}), Witness(self.book, self.clock))}
        watchdog = BMC(host="compute-0", driver="watchdog")
        self.inventory = {
            # only a watchdog
            "compute-0": watchdog,
            # a watchdog and a Ceph blocklist, one level
            "compute-1": BMC(host="compute-1", driver="watchdog",
                             fallbacks=(BMC(host="compute-1",
                                            driver="ceph_blocklist"),),
                             grouping=(2,)),
            # Redfish, then the watchdog
            "compute-2": BMC(host="compute-2", driver="fake",
                             address="10.0.0.2",
                             fallbacks=(BMC(host="compute-2",
                                            driver="watchdog"),),
                             grouping=(1, 1)),
        }
        self.audit = FencingAudit(
            conf_pkg.make({"audit": {"interval": 300}}), self.compute,
            self.inventory.get, drivers.__getitem__, self.clock,
            rng=random.Random(1))


def test_a_host_with_no_power_method_is_judged_by_its_levels():
    r = Rig()
    for host in r.inventory:
        armed(r.book, host, r.clock())
    assert r.audit.run_once() == {}
    assert r.audit.protected_by() == {
        "compute-0": "method 1 (watchdog): ready",
        "compute-1": "level 1 (watchdog + ceph_blocklist): ready"}
    assert r.audit.health()["protected_without_power"] == 2
    # The Redfish BMC stops answering: the watchdog level protects it,
    # and the failure is named.
    r.power.broken.add("compute-2")
    assert r.audit.run_once() == {}
    assert r.audit.protected_by()["compute-2"] == \
        "level 2 (watchdog): ready"
    assert r.audit.degraded()["compute-2"] == [
        "fake 10.0.0.2: compute-2: BMC 10.0.0.2 timed out"]


def test_no_level_ready_is_unprotected_with_each_levels_reason():
    r = Rig()
    armed(r.book, "compute-1", r.clock())
    r.ceph.down = True
    r.power.broken.add("compute-2")
    found = r.audit.run_once()
    assert found == {
        "compute-0": "no fencing level can prove the host dead now: "
                     "method 1 (watchdog): watchdog: its agent was never "
                     "heard",
        "compute-1": "no fencing level can prove the host dead now: "
                     "level 1 (watchdog + ceph_blocklist): ceph_blocklist: "
                     "cannot connect to the monitors",
        "compute-2": "no fencing level can prove the host dead now: "
                     "fake 10.0.0.2: compute-2: BMC 10.0.0.2 timed out; "
                     "level 2 (watchdog): watchdog: its agent was never "
                     "heard"}
    assert not any("noop" in why for why in found.values())
    # A watchdog last reported armed long ago proves nothing now.
    armed(r.book, "compute-0", r.clock())
    r.clock.advance(ISO + 1)
    assert "its agent's last beat (armed) is 21 s old" in \
        r.audit.run_once()["compute-0"]


def test_judge_keeps_the_power_rules():
    """Unchanged for an entry of power methods; an Off while Nova says
    up stays unprotected even with a ready watchdog level."""
    entry = BMC(host="c1", driver="redfish", address="https://10.0.0.1",
                fallbacks=(BMC(host="c1", driver="watchdog"),),
                grouping=(1, 1))
    from instanceha.sources.audit import verdict
    why, _ = verdict(True, entry, [("redfish x", fb.PowerState.OFF)],
                     [("level 2 (watchdog)", None)])
    assert "another machine" in why
    assert judge(svc(), BMC(host="c1", driver="noop"), [])[0] == \
        "fencing driver noop does not power anything off"
