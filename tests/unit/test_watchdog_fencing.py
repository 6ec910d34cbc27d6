"""The engine's side of watchdog self-fencing (issue 37): the book of the
agents' reports, condemnations and acknowledgements, the deadline rule,
the ``watchdog`` fencing method, and the heartbeat listener answering,
condemning and relaying. Fake clocks; nothing sleeps."""

import pytest

from instanceha import conf as ih_conf
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.fencing import base
from instanceha.drivers.fencing import watchdog as wd
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.heartbeat import challenge
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from instanceha.sources.watchdog_book import WatchdogBook
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import FakeClock, Sink

D = protocol.name_digest
NONCE = b"n" * 16
ISO, WDT, MARGIN = 20.0, 30, 10.0


def report(state=protocol.WATCHDOG_ARMED, peers=(), pills=(), nonce=NONCE):
    return protocol.WatchdogReport(state, WDT, ISO, nonce,
                                   tuple(D(p) for p in peers), tuple(pills))


# -- the book -----------------------------------------------------------------

def test_a_host_without_peers_is_published_at_its_condemnation():
    book = WatchdogBook()
    book.beat("x", report(), 100.0)
    assert book.condemn("x", 110.0, b"pill") == 110.0
    s = book.state("x")
    assert (s.armed, s.last_beat, s.condemned_at, s.published_at) == (
        True, 100.0, 110.0, 110.0)
    assert book.condemn("never-heard", 1.0) is None


def test_a_renewed_condemnation_starts_over():
    book = WatchdogBook()
    book.beat("x", report(peers=["a"]), 100.0)
    book.beat("a", report(), 100.0)
    book.condemn("x", 110.0, b"old")
    book.beat("a", report(pills=(protocol.pill_digest(b"old"),)), 111.0)
    assert book.state("x").published_at == 111.0
    assert book.condemn("x", 120.0, b"new") == 120.0
    s = book.state("x")
    assert (s.condemned_at, s.published_at, s.acks) == (120.0, None, 0)
    book.beat("a", report(pills=(protocol.pill_digest(b"old"),)), 121.0)
    assert book.state("x").published_at is None      # the old pill
    book.beat("a", report(pills=(protocol.pill_digest(b"new"),)), 122.0)
    assert book.state("x").published_at == 122.0 and book.pill("x") == b"new"


def test_published_once_a_majority_of_its_peers_hold_the_pill():
    book = WatchdogBook()
    book.beat("x", report(peers=["a", "b", "c"]), 100.0)
    for p in ("a", "b", "c", "z"):
        book.beat(p, report(), 100.0)
    book.condemn("x", 110.0, b"pill")
    assert sorted(book.relays()) == [("x", "a"), ("x", "b"), ("x", "c")]
    held = (protocol.pill_digest(b"pill"),)
    book.beat("z", report(pills=held), 111.0)        # not its peer
    book.beat("a", report(pills=(protocol.pill_digest(b"old"),)), 111.0)
    assert book.state("x").published_at is None
    book.beat("a", report(pills=held), 112.0)
    assert book.state("x").published_at is None      # 1 of 3
    book.beat("b", report(pills=held), 113.0)
    s = book.state("x")
    assert (s.published_at, s.acks, s.peers) == (113.0, 2, 3)


def test_acknowledgements_before_the_condemnation_do_not_count():
    book = WatchdogBook()
    book.beat("x", report(peers=["a"]), 100.0)
    book.beat("a", report(pills=(protocol.pill_digest(b"pill"),)), 101.0)
    book.condemn("x", 110.0, b"pill")
    assert book.state("x").published_at is None


def test_lift_forgets_the_condemnation():
    book = WatchdogBook()
    book.beat("x", report(), 100.0)
    book.condemn("x", 110.0, b"pill")
    book.lift("x")
    assert not book.condemned("x") and book.pill("x") is None


# -- the rule -----------------------------------------------------------------

def state(**kw):
    book = WatchdogBook()
    book.beat("x", kw.pop("rep", report()), kw.pop("last", 100.0))
    if kw.pop("condemn", True):
        book.condemn("x", kw.pop("at", 110.0), b"pill")
    return book.state("x")


def test_never_armed_or_disarmed_is_never_dead():
    assert wd.deadline(None, 1e9, MARGIN).why == \
        "its agent was never heard"
    j = wd.deadline(state(rep=None), 1e9, MARGIN)
    assert not j.dead and "never reported an armed watchdog" in j.why
    j = wd.deadline(state(rep=report(protocol.WATCHDOG_DISARMED)), 1e9,
                    MARGIN)
    assert not j.dead and "disarmed" in j.why


def test_the_method_and_the_protocol_agree_on_disarmed():
    assert wd.DISARMED == protocol.WATCHDOG_DISARMED


def test_not_condemned_or_not_published_is_not_dead():
    assert wd.deadline(state(condemn=False), 1e9, MARGIN).why == \
        "not condemned"
    j = wd.deadline(state(rep=report(peers=["a", "b", "c"])), 1e9, MARGIN)
    assert not j.dead and "0 of 3 peers" in j.why


def test_dead_once_isolation_watchdog_and_margin_passed_after_the_later():
    s = state(last=100.0, at=110.0)     # published at 110 (no peers)
    at = 110.0 + ISO + WDT + MARGIN
    assert not wd.deadline(s, at - 0.01, MARGIN).dead
    j = wd.deadline(s, at, MARGIN)
    assert j.dead and j.deadline == at and "self-fenced by watchdog" in j.why
    # a beat after the condemnation pushes the deadline
    s = s._replace(last_beat=150.0)
    assert wd.deadline(s, at, MARGIN).deadline == 150.0 + ISO + WDT + MARGIN


# -- the driver ---------------------------------------------------------------

class FakeWitness:
    def __init__(self, book, clock):
        self.book = book
        self.clock = clock
        self.condemned = []

    def monotonic(self):
        return self.clock()

    def watchdog_state(self, host_name):
        return self.book.state(host_name)

    def condemn(self, host_name, reason):
        self.condemned.append((host_name, reason))
        return self.book.condemn(host_name, self.clock(), b"pill")


def driver(book, clock, **fencing):
    fencing.setdefault("watchdog_margin", MARGIN)
    conf = ih_conf.make({"fencing": fencing})
    return wd.WatchdogDriver(conf, FakeWitness(book, clock),
                             sleep=clock.advance)


BMC_X = BMC(host="x", driver="watchdog", address="")


def test_each_power_off_condemns_anew():
    clock = FakeClock(200.0)
    book = WatchdogBook()
    book.beat("x", report(), 190.0)
    book.condemn("x", 50.0, b"long ago")
    drv = driver(book, clock)
    drv.power_off(BMC_X)
    assert drv.witness.condemned == [("x", "fencing by watchdog")]
    assert clock() >= 200.0 + ISO + WDT + MARGIN


def test_power_off_condemns_then_returns_at_the_deadline():
    clock = FakeClock(200.0)
    book = WatchdogBook()
    book.beat("x", report(), 190.0)
    drv = driver(book, clock)
    assert drv.power_state(BMC_X) is base.PowerState.UNKNOWN
    drv.power_off(BMC_X)
    assert drv.witness.condemned == [("x", "fencing by watchdog")]
    assert clock() >= 200.0 + ISO + WDT + MARGIN
    assert clock() < 200.0 + ISO + WDT + MARGIN + 1.0
    assert drv.power_state(BMC_X) is base.PowerState.OFF


def test_power_off_refuses_a_host_without_an_armed_watchdog():
    clock = FakeClock(200.0)
    book = WatchdogBook()
    book.beat("x", None, 190.0)
    drv = driver(book, clock)
    with pytest.raises(base.FenceError, match="never reported an armed"):
        drv.power_off(BMC_X)
    assert drv.witness.condemned == [] and clock() == 200.0


def test_power_off_gives_up_when_the_peers_never_acknowledge():
    clock = FakeClock(200.0)
    book = WatchdogBook()
    book.beat("x", report(peers=["a", "b", "c"]), 190.0)
    drv = driver(book, clock, watchdog_wait_max=120.0)
    with pytest.raises(base.FenceError, match="not proven within 120"):
        drv.power_off(BMC_X)
    assert 320.0 <= clock() < 322.0


def test_load_driver_hands_the_witness_to_the_watchdog_method_only():
    conf = ih_conf.make({})
    witness = object()
    drv = fencing_pkg.load_driver("watchdog", conf, watchdog_witness=witness)
    assert drv.witness is witness
    with pytest.raises(base.FenceError, match="no heartbeat listener"):
        fencing_pkg.load_driver("watchdog", conf).power_state(BMC_X)


def test_the_inventory_accepts_the_watchdog_method_without_address():
    from instanceha.drivers.fencing import inventory
    inv = inventory.parse({"hosts": {"x": {"driver": "watchdog"}}},
                          fencing_pkg.FIELDS)
    assert inv.get("x").driver == "watchdog"


# -- the heartbeat listener -----------------------------------------------------

T0 = 5000.0
ADDR = {"compute-x": ("192.0.2.11", 4001), "compute-a": ("192.0.2.12", 4001),
        "compute-b": ("192.0.2.13", 4001)}


class Wire:
    def __init__(self):
        self.sent = []

    def __call__(self, via, data, address):
        self.sent.append((data, address))

    def to(self, host):
        return [d for d, a in self.sent if a == ADDR[host]]


def listener(acting=True):
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    wire = Wire()
    mono = FakeClock(100.0)
    src = heartbeat.HeartbeatSource(
        conf, Sink(), FakeClock(T0),
        lambda: [("id-" + h, h) for h in ADDR], keyring=helpers.KEYRING,
        sendto=wire, acting=lambda: acting, monotonic=mono)
    src.refresh(T0)
    src.challenge(T0)
    return src, wire, mono


def beat_of(src, host, seq, rep):
    data = protocol.encode_beat(helpers.beat(
        host=host, seq=seq, sent_at=T0, echoes=(src.challenges.newest,),
        watchdog=rep), helpers.KEY)
    src.handle_datagram(data, ADDR[host], now=T0)


def decoded(data):
    return protocol.decode_signed(data, helpers.KEYRING, {
        protocol.CHALLENGE: challenge.read_body,
        peer.RELAY: peer.read_relay})[0]


def test_answers_echo_the_agents_nonce_and_say_acting():
    for acting in (True, False):
        src, wire, _ = listener(acting)
        beat_of(src, "compute-x", 1, report(nonce=b"x" * 16))
        src.challenge(T0 + 2)
        ch = decoded(wire.to("compute-x")[-1])
        assert (ch.answer, ch.acting, ch.condemned) == (b"x" * 16, acting,
                                                        False)


def test_condemn_sends_the_pill_to_the_host_and_its_peers_until_published():
    src, wire, mono = listener()
    beat_of(src, "compute-x", 1, report(peers=["compute-a", "compute-b"],
                                        nonce=b"x" * 16))
    beat_of(src, "compute-a", 1, report(nonce=b"a" * 16))
    beat_of(src, "compute-b", 1, report(nonce=b"b" * 16))
    mono.advance(5.0)
    assert src.condemn("compute-x", "test") == 105.0
    pill = wire.to("compute-x")[-1]
    ch = decoded(pill)
    assert ch.condemned and ch.answer == b"x" * 16 and ch.host == "compute-x"
    relays = [decoded(d) for d in wire.to("compute-a")]
    assert peer.Relay("compute-x", pill) in relays
    src.challenge(T0 + 2)                   # every round, the same pill
    assert wire.to("compute-x")[-1] == pill
    assert src.watchdog_state("compute-x").published_at is None
    mono.advance(1.0)
    beat_of(src, "compute-a", 2, report(nonce=b"a" * 16,
                                        pills=(protocol.pill_digest(pill),)))
    s = src.watchdog_state("compute-x")
    # 1 of 2 peers: a majority of 2 is 2
    assert s.published_at is None and s.acks == 1
    beat_of(src, "compute-b", 2, report(nonce=b"b" * 16,
                                        pills=(protocol.pill_digest(pill),)))
    assert src.watchdog_state("compute-x").published_at == 106.0


def test_the_listeners_view_shows_the_watchdog_and_the_condemnation():
    src, _, mono = listener()
    beat_of(src, "compute-x", 1, report(peers=["compute-a"]))
    beat_of(src, "compute-a", 1, None)
    assert "watchdog" not in src.view(T0)["compute-a"]
    view = src.view(T0)["compute-x"]["watchdog"]
    assert view == {"state": "armed", "timeout": WDT,
                    "isolation_timeout": ISO, "condemned_ago": None,
                    "pill_held_by": 0, "peers": 1}
    src.condemn("compute-x", "test")
    mono.advance(4.0)
    assert src.view(T0)["compute-x"]["watchdog"]["condemned_ago"] == 4.0


# -- the service's wiring -------------------------------------------------------

def test_the_service_hands_its_heartbeat_listener_to_the_watchdog_method(
        tmp_path):
    """Built by the service (no fencer given), the method reads and
    condemns through the service's own heartbeat listener."""
    from instanceha import service as service_mod
    from tests.unit.fakes import Clock, FakeCompute
    from tests.unit.test_backend_wait import _conf
    key = helpers.write_key(tmp_path / "master.key")
    conf, _ = _conf(tmp_path, agent={"listen_addresses": "127.0.0.1:0",
                                     "master_key_file": str(key)})
    svc = service_mod.Service(conf, compute=FakeCompute(Clock(), hosts=2))
    try:
        drv = svc.engine.ctx.fencer("watchdog")
        src = svc.sources.heartbeat
        assert src is not None
        src.watchdogs.beat("compute-0", report(), src.monotonic())
        state = drv.witness.watchdog_state("compute-0")
        assert state is not None and state.armed
        assert drv.witness.condemn("compute-0", "test") is not None
        assert src.watchdogs.condemned("compute-0")
    finally:
        svc.engine.ctx.close_fencers()


def test_fence_pass_condemns_once_then_reads_until_the_deadline():
    """The engine's form: no sleep; the first pass condemns and says
    when the deadline falls; a later pass with its mark only reads."""
    clock = FakeClock(200.0)
    book = WatchdogBook()
    book.beat("x", report(), 190.0)

    def no_sleep(seconds):
        raise AssertionError("a pass never sleeps")
    drv = wd.WatchdogDriver(ih_conf.make({"fencing": {
        "watchdog_margin": MARGIN}}), FakeWitness(book, clock),
        sleep=no_sleep)
    pending = drv.fence_pass(BMC_X)
    at = 200.0 + ISO + WDT + MARGIN
    assert pending.after == at - 200.0 and pending.mark == 200.0
    clock.advance(30.0)
    again = drv.fence_pass(BMC_X, pending.mark)
    assert again.after == at - 230.0 and again.mark == 200.0
    assert drv.witness.condemned == [("x", "fencing by watchdog")]
    assert book.state("x").condemned_at == 200.0
    clock.advance(again.after)
    assert drv.fence_pass(BMC_X, again.mark) is None
    assert drv.witness.condemned == [("x", "fencing by watchdog")]


def test_a_host_entering_active_while_condemned_is_lifted():
    """An operator's resume after a watchdog fencing that failed (or was
    abandoned by a suspend) watches the host as alive again: its pill
    stops. Other transitions, and hosts not condemned, change nothing."""
    import dataclasses
    from instanceha.fsm.record import HostRecord
    from instanceha.fsm.states import State
    from instanceha.sources.watchdog_book import lifter
    book = WatchdogBook()
    book.beat("x", report(), 100.0)
    book.condemn("x", 110.0, b"pill")
    on_change = lifter(book.lift, book.condemned)
    failed = HostRecord(id="u", name="x", state=State.FAILED)
    on_change(failed, dataclasses.replace(failed, state=State.SUSPENDED),
              None)
    assert book.condemned("x")
    on_change(failed, dataclasses.replace(failed, state=State.ACTIVE), None)
    assert not book.condemned("x") and book.pill("x") is None


def test_the_service_lifts_a_condemned_host_that_becomes_active(tmp_path):
    from instanceha import service as service_mod
    from instanceha.fsm.record import HostRecord
    from instanceha.fsm.states import State
    from tests.unit.fakes import Clock, FakeCompute
    from tests.unit.test_backend_wait import _conf
    key = helpers.write_key(tmp_path / "master.key")
    conf, _ = _conf(tmp_path, agent={"listen_addresses": "127.0.0.1:0",
                                     "master_key_file": str(key)})
    svc = service_mod.Service(conf, compute=FakeCompute(Clock(), hosts=2))
    try:
        src = svc.sources.heartbeat
        src.watchdogs.beat("compute-0", report(), src.monotonic())
        src.condemn("compute-0", "test")
        from instanceha.events import Event, EventKind
        old = HostRecord(id="u", name="compute-0", state=State.SUSPENDED)
        resume = Event(EventKind.OPERATOR_RESUME, "u", 1.0,
                       name="compute-0", source="operator")
        for fn in svc.engine._listeners:
            fn(old, HostRecord(id="u", name="compute-0",
                               state=State.ACTIVE), resume)
        assert not src.watchdogs.condemned("compute-0")
    finally:
        svc.engine.ctx.close_fencers()
