"""The self-fencing decision (issue 37, sections 2 and 3): every case,
with a clock given, and the feeding of a test device."""

import os

import pytest

from instanceha.agent import selffence as sf
from instanceha.agent import watchdog
from tests.unit.agent.watchdog_hw import FileHardware

ISO = 10.0


def inputs(engine_at=None, condemned=False, peers=(), peer_count=0):
    return sf.Inputs(engine_at, condemned, tuple(peers), peer_count)


def peer(name, at, hears=True, condemns=False):
    return sf.PeerAnswer(name, at, hears, condemns)


# -- the pure decision ---------------------------------------------------------

def test_fresh_engine_answer_feeds():
    d = sf.decide(100.0, inputs(engine_at=95.0), ISO)
    assert d.feed and d.reason == sf.ENGINE


def test_engine_answer_older_than_isolation_timeout_counts_for_nothing():
    d = sf.decide(100.0, inputs(engine_at=89.9), ISO)
    assert not d.feed and d.reason == sf.ISOLATED


def test_engine_answer_exactly_at_the_timeout_still_counts():
    assert sf.decide(100.0, inputs(engine_at=90.0), ISO).feed


def test_pill_stops_feeding_even_with_a_fresh_engine_answer():
    d = sf.decide(100.0, inputs(engine_at=99.0, condemned=True), ISO)
    assert not d.feed and d.reason == sf.CONDEMNED


def test_pill_relayed_by_one_peer_stops_feeding_despite_engine_and_peers():
    peers = [peer("a", 99), peer("b", 99), peer("c", 99, condemns=True)]
    d = sf.decide(100.0, inputs(engine_at=99.0, peers=peers,
                                peer_count=3), ISO)
    assert not d.feed and d.reason == sf.CONDEMNED_BY_PEER


def test_stale_peer_pill_answer_does_not_condemn():
    # a pill is sticky on the peer: it answers condemned at every probe,
    # so an old answer saying so adds nothing the fresh one would not
    peers = [peer("c", 80, condemns=True)]
    d = sf.decide(100.0, inputs(engine_at=99.0, peers=peers,
                                peer_count=1), ISO)
    assert d.feed


def test_cut_off_from_engines_majority_of_peers_hear_an_engine():
    peers = [peer("a", 98), peer("b", 97), peer("c", 50)]
    d = sf.decide(100.0, inputs(engine_at=None, peers=peers,
                                peer_count=3), ISO)
    assert d.feed and d.reason == sf.PEERS_HEAR_ENGINE


def test_cut_off_from_engines_minority_of_peers_answer():
    peers = [peer("a", 98)]
    d = sf.decide(100.0, inputs(engine_at=None, peers=peers,
                                peer_count=3), ISO)
    assert not d.feed and d.reason == sf.ISOLATED


def test_stale_peer_answers_do_not_make_a_majority():
    peers = [peer("a", 98), peer("b", 85), peer("c", 85)]
    d = sf.decide(100.0, inputs(engine_at=80.0, peers=peers,
                                peer_count=3), ISO)
    assert not d.feed


def test_answers_from_the_future_count_for_nothing():
    peers = [peer("a", 130), peer("b", 130)]
    assert not sf.decide(100.0, inputs(peers=peers, peer_count=3),
                         ISO).feed


def test_engines_gone_majority_of_peers_hear_no_engine():
    peers = [peer("a", 99, hears=False), peer("b", 99, hears=False),
             peer("c", 99, hears=False)]
    d = sf.decide(100.0, inputs(engine_at=None, peers=peers,
                                peer_count=5), ISO)
    assert d.feed and d.reason == sf.ENGINES_GONE


def test_mixed_majority_feeds_none_condemning():
    peers = [peer("a", 99, hears=False), peer("b", 99, hears=True),
             peer("c", 99, hears=False)]
    d = sf.decide(100.0, inputs(peers=peers, peer_count=4), ISO)
    # 3 of 4 answered: a majority (3), neither kind alone is one
    assert d.feed and d.reason == sf.PEERS_MIXED


def test_half_of_an_even_peer_set_is_not_a_majority():
    peers = [peer("a", 99, hears=False), peer("b", 99, hears=False)]
    assert not sf.decide(100.0, inputs(peers=peers, peer_count=4),
                         ISO).feed


def test_no_peers_configured_only_an_engine_keeps_the_host():
    assert not sf.decide(100.0, inputs(peer_count=0), ISO).feed
    assert sf.decide(100.0, inputs(engine_at=95.0, peer_count=0),
                     ISO).feed


def test_majority():
    assert [sf.majority(n) for n in (0, 1, 2, 3, 4, 5, 20)] == \
        [1, 1, 2, 2, 3, 3, 11]


# -- the device ---------------------------------------------------------------

@pytest.fixture
def hw(tmp_path):
    return FileHardware(tmp_path / "wd-test-device", timeout=5)


def test_device_refuses_a_real_watchdog_under_the_test_suite(tmp_path):
    assert os.environ.get(watchdog.NO_REAL_ENV)
    for path in ("/dev/watchdog", "/dev/watchdog0", "/dev/null"):
        with pytest.raises(watchdog.WatchdogError, match="refused"):
            watchdog.Device(path, 5).arm()
    with pytest.raises(watchdog.WatchdogError, match="refused"):
        watchdog.Device(str(tmp_path / "watchdog"), 5).arm()


def test_arm_feeds_and_magic_close_disarms(hw):
    dev = watchdog.Device(hw.path, 5)
    dev.arm()
    assert dev.armed and not dev.real
    hw.poll(0.0)
    assert hw.armed
    dev.feed()
    hw.poll(4.0)
    dev.disarm()
    assert not dev.armed
    hw.poll(5.0)
    assert hw.disarmed and not hw.poll(100.0) and hw.resets == 0


def test_abandoned_device_resets_the_host(hw):
    dev = watchdog.Device(hw.path, 5)
    dev.arm()
    hw.poll(0.0)
    dev.abandon()                         # a crash: no magic close
    assert not hw.poll(5.0)
    assert hw.poll(5.1) and hw.resets == 1


def test_feeding_an_unarmed_device_raises(hw):
    with pytest.raises(watchdog.WatchdogError, match="not armed"):
        watchdog.Device(hw.path, 5).feed()


# -- the loop -----------------------------------------------------------------

def run(fence, hw, start, end, step=1.0):
    """Tick the loop and poll the hardware from start to end."""
    now = start
    while now <= end + 1e-9:
        fence.tick(now)
        if hw.poll(now):
            return now
        now += step
    return None


def test_loop_feeds_while_the_engine_answers(hw):
    dev = watchdog.Device(hw.path, 5)
    dev.arm()
    fence = sf.SelfFence(dev, ISO, peers=["a", "b", "c"])
    for t in range(0, 60, 2):
        fence.engine_answered(float(t))
        fence.tick(float(t))
        assert not hw.poll(float(t))
    assert hw.resets == 0


def test_loop_isolated_host_resets_after_isolation_plus_watchdog(hw):
    dev = watchdog.Device(hw.path, 5)
    dev.arm()
    hw.poll(0.0)
    fence = sf.SelfFence(dev, ISO, peers=["a", "b", "c"])
    fence.engine_answered(0.0)
    reset = run(fence, hw, 0.0, 60.0)
    # last fed at 10 (answer + isolation), reset once 5 s pass unfed
    assert reset == 16.0
    assert fence.last.reason == sf.ISOLATED


def test_loop_pill_resets_at_once_and_is_never_lifted(hw):
    dev = watchdog.Device(hw.path, 5)
    dev.arm()
    hw.poll(0.0)
    fence = sf.SelfFence(dev, ISO)
    fence.engine_answered(0.0)
    fence.tick(0.0)
    hw.poll(0.0)                          # last fed at 0
    fence.condemn("engine")
    fence.engine_answered(1.0)            # a later answer lifts nothing
    reset = run(fence, hw, 1.0, 60.0)
    assert reset == 6.0 and fence.last.reason == sf.CONDEMNED
