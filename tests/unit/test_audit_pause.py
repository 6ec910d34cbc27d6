"""Issue 34 part 8: the fencing audit judges a BMC read against Nova's view
and the engine's from after that read, not against the rows it listed
before it waited for a recovery; and its wait for recoveries (and the
power watch's) is bounded, skipping only the hosts concerned.

The engine cases run the real engine (tests.unit.test_engine.World: fake
Nova and BMCs on a fake clock) with the audit's waits driving the world
forward; the bound runs the audit against the simulator's Nova and Redfish
BMCs through the real drivers, on the simulator's fake clock."""

import queue
import threading

import pytest
from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha.drivers import fencing
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.redfish import RedfishDriver
from instanceha.events import Event, EventKind as E, PowerReading
from instanceha.sim import SimCloud, SimServer
from instanceha.sources.audit import FencingAudit
from tests.unit.test_engine import World
from tests.unit.sim.conftest import Clock as SimClock


class NovaSeenByAudit:
    """The audit's view of Nova (the World's fake compute); ``after_list``
    runs once, right after the audit's first list of services (the world
    moves on between the list and the BMC reads); ``before_relist`` right
    before its second (between the BMC reads and that list)."""

    def __init__(self, compute, after_list=None, before_relist=None):
        self._compute = compute
        self.after_list = after_list
        self.before_relist = before_relist
        self.lists = 0

    def list_services(self):
        self.lists += 1
        if self.lists == 2 and self.before_relist is not None:
            self.before_relist()
        rows = self._compute.list_services()
        if self.lists == 1 and self.after_list is not None:
            self.after_list()
        return rows


class Relay:
    """Runs the audit in a thread of its own, as the service does, while
    the world (whose journal is an in-memory SQLite of this thread) steps
    only in the test's thread: ``ask(step)``, from the audit's threads,
    runs ``step`` here and waits for it."""

    def __init__(self):
        self._asks = queue.Queue()

    def ask(self, step):
        done = threading.Event()
        out = []
        self._asks.put((step, done, out))
        if not done.wait(60):
            raise AssertionError("the test's thread did not answer")
        return out[0]

    def run(self, fn):
        result, failed = [], []

        def body():
            try:
                result.append(fn())
            except BaseException as e:      # noqa: BLE001 - re-raised
                failed.append(e)
        t = threading.Thread(target=body, daemon=True)
        t.start()
        while t.is_alive():
            try:
                step, done, out = self._asks.get(timeout=0.01)
            except queue.Empty:
                continue
            out.append(step())
            done.set()
        if failed:
            raise failed[0]
        return result[0]


def _world():
    w = World(hosts=3, servers=1)
    # One reader, unpaced: the audit's waits are the test's, in order.
    w.conf.set_override("concurrency", 1, "audit")
    w.conf.set_override("hosts_per_second", 0, "audit")
    return w


def _passes_while(w, pred, budget=200):
    for _ in range(budget):
        if not pred():
            return
        w.pass_()
    raise AssertionError("the world did not settle")


def _repair(w, host):
    """The operator repairs the fenced host and powers it on: it reports
    back, instanceha puts it back (recovering, then active)."""
    w.fencer.powered_off.remove(host)
    w.compute.boot(host)
    w.until(host, "active")
    for _ in range(5):                     # it heartbeats on
        w.pass_()


def test_a_host_fenced_and_repaired_while_the_audit_waits_stays_protected():
    """compute-1 dies right after the audit listed Nova's services (up);
    the audit waits while it is fenced and evacuated, then reads its BMC:
    Off. Judged against the rows listed before the wait ("up"), that was
    "Off while Nova reports the compute up": once the host was repaired and
    reported back, its BMC was untrusted and it was never fenced again.
    Judged against Nova's view after the read (forced down), it stays
    protected, and its next death is recovered."""
    w = _world()
    w.pass_()

    relay = Relay()

    def waits(seconds):
        relay.ask(w.pass_)                 # the recovery goes on meanwhile
        return False

    def dies():
        def step():
            w.compute.kill("compute-1")
            _passes_while(w, lambda: w.state("compute-1")[0] == "active")
        relay.ask(step)
    nova = NovaSeenByAudit(w.compute)
    audit = FencingAudit(w.conf, nova, w.ctx.bmc_for, w.ctx.fencer, w.clock,
                         sink=w.engine.submit, give_way=w.engine.urgent,
                         wait=waits)
    w.engine.unprotected = audit.unprotected
    assert audit.run_once() == {}          # every BMC seen On
    w.drain()
    nova.lists, nova.after_list = 0, dies
    with capture_logs() as logs:
        verdict = relay.run(audit.run_once)
        w.drain()
    assert [x["event"] for x in logs if x["event"].startswith("audit_")] \
        == ["audit_paused", "audit_resumed"]
    assert w.state("compute-1")[0] == "evacuated"
    assert "compute-1" not in verdict, verdict
    assert w.ctx.evidence.suspected() == set()
    bmc = w.ctx.inventory["compute-1"]
    _repair(w, "compute-1")
    assert w.ctx.evidence.untrusted(bmc) is None
    assert "compute-1" not in w.engine.snapshot()["unprotected"]
    assert audit.run_once() == {}
    # Still protected: its next death is recovered.
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]


# -- the wait for recoveries is bounded ---------------------------------------

VETOED = "1 host(s) in recovery (suspect 1): fencing and evacuation come first"


@pytest.fixture
def simcloud(tmp_path, monkeypatch):
    """3 hosts of the simulator on a fake clock, read through the real
    Nova and Redfish drivers: (cloud, clock, conf, nova, inventory,
    fencer)."""
    clock = SimClock()      # also the audit's: its waits advance it
    cloud = SimCloud(hosts=3, servers_per_host=0, clock=clock)
    srv = SimServer(cloud).start()
    try:
        clouds_yaml, bmc_yaml = srv.write_client_files(str(tmp_path))
        monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", clouds_yaml)
        conf = conf_pkg.make({
            "DEFAULT": {"cloud": "sim", "clouds_file": clouds_yaml},
            "audit": {"concurrency": 1, "hosts_per_second": 0,
                      "power_watch_interval": 10}})
        nova = NovaDriver(conf, clock=clock)
        redfish = RedfishDriver(conf, sleep=clock.advance)
        inv = inventory.load(bmc_yaml, fencing.FIELDS)
        yield cloud, clock, conf, nova, inv, (lambda name: redfish)
    finally:
        srv.stop()


def test_a_host_suspect_for_ever_does_not_stop_the_audit_or_the_power_watch(
        simcloud):
    """A host held by its agent's veto stays suspect as long as the veto
    lasts. The audit and the power watch wait for it at most [audit]
    max_pause (default 600 s), then read the other hosts: compute-2's
    rotated BMC password is found, and the power watch reports power."""
    cloud, clock, conf, nova, inv, fencer = simcloud
    cloud.set_bmc("compute-2", password="rotated-behind-our-back")
    start = clock()
    waited = []

    def wait(seconds):
        waited.append(seconds)
        clock.advance(seconds)
        # The test's own end: a day of veto (today's code waits for ever).
        return clock() - start > 86400
    events = []
    audit = FencingAudit(conf, nova, inv.get, fencer, clock,
                         sink=events.append, give_way=lambda: VETOED,
                         wait=wait)
    with capture_logs() as logs:
        verdict = audit.run_once()
    assert sorted(verdict) == ["compute-2"], verdict
    assert "401" in verdict["compute-2"] or \
        "credential" in verdict["compute-2"].lower()
    assert audit.health()["audits"] == 1
    assert 600 <= clock() - start <= 601, clock() - start
    paused = [x for x in logs if x["event"].startswith("audit_")]
    assert [x["event"] for x in paused] == ["audit_paused",
                                            "audit_pause_bounded"]
    assert "suspect 1" in paused[1]["reason"]
    # The veto lasts: the power watch reads at once (the bound has passed).
    del waited[:]
    with capture_logs() as logs:
        states = audit.watch_once()
    assert states["compute-0"] is fb.PowerState.ON and waited == []
    assert [x for x in logs if x["event"].startswith("audit_")] == []


def _counting(fencer):
    """The fencer, counting power-state reads per host (the power watch's
    power_state, the audit's read_machine)."""
    reads = {}
    driver = fencer("redfish")

    def counted(real):
        def read(bmc):
            reads[bmc.host] = reads.get(bmc.host, 0) + 1
            return real(bmc)
        return read
    driver.power_state = counted(driver.power_state)
    driver.read_machine = counted(driver.read_machine)
    return reads


def test_after_the_bound_only_the_hosts_concerned_are_skipped(simcloud):
    """The veto holds compute-1; after max_pause the audit and the power
    watch read every other host and never compute-1's BMC, whose last
    verdict stands; its rotated password is found once the veto ends."""
    cloud, clock, conf, nova, inv, fencer = simcloud
    conf.set_override("max_pause", 120, "audit")
    reads = _counting(fencer)
    recovery = [None]

    def wait(seconds):
        clock.advance(seconds)
        return False
    audit = FencingAudit(conf, nova, inv.get, fencer, clock,
                         sink=lambda e: None, give_way=lambda: recovery[0],
                         wait=wait, handled=lambda h: h == "compute-1")
    assert audit.run_once() == {}
    cloud.set_bmc("compute-1", password="rotated")
    cloud.set_bmc("compute-2", password="rotated")
    recovery[0] = VETOED
    reads.clear()
    start = clock()
    assert sorted(audit.run_once()) == ["compute-2"]
    assert clock() - start == 120
    assert reads == {"compute-0": 1, "compute-2": 1}, reads
    h = audit.health()
    assert h["pause_bounded"] and not h["paused_for_recovery"]
    assert h["skipped"] == 1
    reads.clear()
    states = audit.watch_once()
    assert states["compute-1"] is None and "compute-1" not in reads
    assert states["compute-0"] is fb.PowerState.ON
    recovery[0] = None                      # the veto ends
    with capture_logs() as logs:
        assert sorted(audit.run_once()) == ["compute-1", "compute-2"]
    assert [x["event"] for x in logs if x["event"].startswith("audit_")] \
        == ["audit_resumed"]
    assert audit.health()["skipped"] == 0


def test_a_new_recovery_after_the_last_one_ended_is_waited_for_again(
        simcloud):
    cloud, clock, conf, nova, inv, fencer = simcloud
    conf.set_override("max_pause", 30, "audit")
    recovery = [VETOED]
    waits = []

    def wait(seconds):
        waits.append(seconds)
        clock.advance(seconds)
        return False
    audit = FencingAudit(conf, nova, inv.get, fencer, clock,
                         give_way=lambda: recovery[0], wait=wait)
    audit.run_once()
    assert sum(waits) == 30
    recovery[0] = None
    del waits[:]
    audit.watch_once()                      # no host in recovery: at once
    assert waits == []
    recovery[0] = "2 host(s) in recovery (fencing 2)"
    with capture_logs() as logs:
        audit.run_once()
    assert sum(waits) == 30
    assert [x["event"] for x in logs if x["event"].startswith("audit_")] \
        == ["audit_paused", "audit_pause_bounded"]


def test_max_pause_zero_never_waits_and_skips_the_hosts_concerned(simcloud):
    cloud, clock, conf, nova, inv, fencer = simcloud
    conf.set_override("max_pause", 0, "audit")
    reads = _counting(fencer)

    def wait(seconds):
        raise AssertionError("waited %s s" % seconds)
    audit = FencingAudit(conf, nova, inv.get, fencer, clock,
                         give_way=lambda: VETOED, wait=wait,
                         handled=lambda h: h == "compute-1")
    with capture_logs() as logs:
        audit.run_once()
    assert reads == {"compute-0": 1, "compute-2": 1}
    assert [x["event"] for x in logs if x["event"].startswith("audit_")] \
        == ["audit_pause_bounded"]


def test_a_stepped_back_clock_does_not_make_the_wait_endless(simcloud):
    """The clock steps back an hour during the wait: the pause counts from
    then, so it lasts at most twice max_pause."""
    cloud, clock, conf, nova, inv, fencer = simcloud
    conf.set_override("max_pause", 60, "audit")
    waited = []

    def wait(seconds):
        waited.append(seconds)
        clock.advance(seconds - (3600 if len(waited) == 30 else 0))
        return sum(waited) > 3600          # the test's own end
    audit = FencingAudit(conf, nova, inv.get, fencer, clock,
                         give_way=lambda: VETOED, wait=wait)
    audit.run_once()
    assert audit.health()["audits"] == 1
    assert 60 < sum(waited) <= 120


# -- the engine's own view ----------------------------------------------------

def test_the_engine_names_the_hosts_it_handles_and_their_bmc_mates():
    w = World(hosts=4, servers=1)
    # compute-3's entry reaches compute-1's BMC (a chassis shared by both).
    w.ctx.inventory["compute-3"] = inventory.BMC(
        host="compute-3", driver="fake", address="bmc-compute-1")
    w.ctx.index_bmcs()
    w.pass_()
    assert not any(w.engine.handled(h) for h in w.compute.services)
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    assert [h for h in sorted(w.compute.services) if w.engine.handled(h)] \
        == ["compute-1", "compute-3"]
    assert w.engine.handled("compute-1")


def test_an_off_while_up_read_of_a_host_in_recovery_starts_no_suspicion():
    """The audit's Off arrives while the engine is proving the host dead
    (its view of Nova still said up): instanceha's own recovery, not a
    wrong entry; once repaired and back, the host is still protected."""
    w = World(hosts=3, servers=1)
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    bmc = w.ctx.inventory["compute-1"]
    svc = w.compute.services["compute-1"]
    w.engine.submit(Event(
        E.POWER_OFF, svc["id"], w.clock(), name="compute-1", source="audit",
        payload=PowerReading(
            readings=((inventory.method_key(bmc), "off"),), by="audit",
            nova_up=True, after=(svc["updated_at"], "enabled", None))))
    w.drain()
    assert w.ctx.evidence.suspected() == set()
    w.until("compute-1", "evacuated")
    _repair(w, "compute-1")
    assert w.ctx.evidence.untrusted(bmc) is None


def test_a_host_read_off_while_handled_and_back_before_novas_reread():
    """As above, and the host is repaired and put back (Nova: up, not
    forced down) between the audit's read of its BMC (Off) and its second
    list of Nova's services. The engine was handling the host when it was
    read: no mismatch, and it stays protected."""
    w = _world()
    w.pass_()
    relay = Relay()

    def waits(seconds):
        relay.ask(w.pass_)
        return False

    def dies():
        def step():
            w.compute.kill("compute-1")
            _passes_while(w, lambda: w.state("compute-1")[0] == "active")
        relay.ask(step)
    repaired = []

    def repairs():
        repaired.append(relay.ask(lambda: _repair(w, "compute-1")))
    audit = FencingAudit(w.conf, NovaSeenByAudit(w.compute, dies, repairs),
                         w.ctx.bmc_for, w.ctx.fencer, w.clock,
                         sink=w.engine.submit, give_way=w.engine.urgent,
                         wait=waits, handled=w.engine.handled)
    verdict = relay.run(audit.run_once)
    w.drain()
    assert repaired and w.state("compute-1")[0] == "active"
    assert w.compute.list_services()[1].state == "up"
    assert "compute-1" not in verdict, verdict
    for _ in range(5):
        w.pass_()
    assert w.ctx.evidence.untrusted(w.ctx.inventory["compute-1"]) is None
