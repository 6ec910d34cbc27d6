"""What an agent tells the engines of its peers (issue 37, section 1):
which peers answered a probe sent within peer_window, carried in the
beat (appended to the watchdog report, readable by older engines), with
or without a watchdog; and the deterministic choice of peers from a
long candidate list (peers_from): bounded fan-out, each host probed by
exactly peer_count others. Fake sockets and clocks; nothing sleeps."""

import collections

import pytest

from instanceha.agent import main
from instanceha.conf import agent as agent_conf
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from tests.unit.agent import helpers
from tests.unit.agent.test_guardian import (
    A_KEY, ADDR, Net, PEER_KEYRING, X_KEY, deliver, make_peer)
from tests.unit.heartbeat import helpers as hb


def test_the_beat_says_which_peers_answered_within_the_window(tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    x, gx, _ = make_peer(tmp_path, net, "compute-x", X_KEY, clock)
    a, _, _ = make_peer(tmp_path, net, "compute-a", A_KEY, clock)
    x.window = 3.0
    r = gx.report(100.0)
    assert r.hearing == (False, False) and r.hearing_window == 3.0
    x.probe(100.0)
    deliver(net, {"compute-a": a})        # a answers; b is gone
    deliver(net, {"compute-x": x})
    names = [n for n, _ in ADDR.items() if n != "compute-x"]
    r = gx.report(101.0)
    assert dict(zip(names, r.hearing)) == {"compute-a": True,
                                           "compute-b": False}
    assert r.peers == tuple(protocol.name_digest(n) for n in names)
    # a answers nothing more: unheard once its last answered probe (sent
    # at 100) is older than the window
    assert gx.report(103.0).hearing[0] is True
    assert gx.report(103.5).hearing == (False, False)


def test_the_hearing_report_round_trips_and_older_readers_skip_it():
    digests = tuple(protocol.name_digest("p%d" % i) for i in range(11))
    flags = tuple(i % 3 == 0 for i in range(11))
    report = protocol.WatchdogReport(protocol.WATCHDOG_NONE, 0, 20.0,
                                     b"n" * 16, digests, (), flags, 2.5)
    data = protocol.encode_beat(hb.beat(watchdog=report), hb.KEY)
    got = protocol.decode(data, hb.KEYRING).watchdog
    assert got.hearing == flags and got.hearing_window == 2.5
    assert got.peers == digests
    # a report without it (an older agent) reads as no hearing report
    old = report._replace(hearing=None, hearing_window=0.0)
    got = protocol.decode(protocol.encode_beat(hb.beat(watchdog=old),
                                               hb.KEY), hb.KEYRING).watchdog
    assert got.hearing is None
    # appended: the older layout, then 2 bytes of window and 2 of flags
    # (an older engine reads the report up to the pills and stops there)
    old_data = protocol.encode_beat(hb.beat(watchdog=old), hb.KEY)
    assert len(data) == len(old_data) + 2 + 2
    body_end = len(old_data) - protocol.MAC_SIZE
    assert data[protocol._HEADER.size:body_end] == \
        old_data[protocol._HEADER.size:body_end]


def test_a_hearing_report_that_does_not_match_its_peers_is_refused():
    report = protocol.WatchdogReport(
        protocol.WATCHDOG_NONE, 0, 20.0, b"n" * 16,
        (protocol.name_digest("p"),), (), (True, False), 3.0)
    with pytest.raises(ValueError, match="hearing"):
        protocol.encode_beat(hb.beat(watchdog=report), hb.KEY)


def test_peers_are_probed_and_reported_without_a_watchdog():
    sockets = helpers.Sockets()
    net = Net()
    conf = helpers.make_conf(peers=["compute-a=127.0.0.1:2"],
                             peer_address="127.0.0.1:1", peer_window=3.0,
                             compute_check="none", libvirt_check="none",
                             count_guests=False, guest_events=False)
    clock = helpers.Clock(10.0)
    agent = main.Agent(conf, hb.KEYRING, host="compute-x",
                       socket_factory=sockets, boot_id="boot-1",
                       resolver=helpers.resolver, seq_start=1,
                       monotonic=clock, peer_keyring=PEER_KEYRING,
                       peer_socket=net.sock(ADDR["compute-x"]))
    assert agent.peers is not None
    assert agent.peers.probe(10.0) == 1
    [(_, probe_data, to)] = net.sent
    assert to == ("127.0.0.1", 2)
    nonce = peer.decode_signed(probe_data, PEER_KEYRING)[0].nonce
    assert agent.peers.handle(peer.encode_answer(peer.Answer(
        nonce, "compute-a", "compute-x", True, b""),
        PEER_KEYRING.current), ("127.0.0.1", 2)) == "answer"
    agent.sender.send_once()
    [beat] = [protocol.decode(d, hb.KEYRING)
              for d, _ in sockets.made[0].sent]
    assert beat.watchdog.state == protocol.WATCHDOG_NONE   # no watchdog
    assert beat.watchdog.hearing == (True,)
    assert beat.watchdog.peers == (protocol.name_digest("compute-a"),)
    agent.stop_watchdog()                  # nothing to disarm
    assert agent.guardian.report(11.0).state == protocol.WATCHDOG_NONE
    agent.control.stop()
    agent.sender.close()


def test_an_agent_without_peers_nor_watchdog_sends_no_report():
    conf = helpers.make_conf(guest_events=False)
    agent = main.Agent(conf, hb.KEYRING, host="compute-x",
                       socket_factory=helpers.Sockets(), boot_id="boot-1",
                       resolver=helpers.resolver, seq_start=1)
    assert agent.guardian is None and agent.peers is None
    agent.sender.close()


def _candidates(n):
    return [("c%05d" % i, "10.0.%d.%d" % (i // 250, i % 250), 7413)
            for i in range(n)]


def test_peers_from_a_ring_each_host_probed_by_exactly_k_others():
    cands = _candidates(300)
    watchers = collections.Counter()
    for name, _, _ in cands:
        chosen = agent_conf.ring_peers(name, cands, 5)
        assert len(chosen) == 5 and name not in [c[0] for c in chosen]
        assert chosen == agent_conf.ring_peers(name, list(reversed(cands)),
                                               5)      # deterministic
        watchers.update(c[0] for c in chosen)
    assert set(watchers.values()) == {5}


def test_peers_from_stays_bounded_at_twenty_thousand_hosts():
    cands = _candidates(20000)
    conf = helpers.make_conf(peers_from=["%s=%s:%d" % c for c in cands[:50]],
                             peer_count=16, peers=["x=127.0.0.1:9"],
                             peer_address="127.0.0.1:1")
    chosen = agent_conf.peer_set("c00003", conf.agent)
    assert len(chosen) == 16 and chosen[0][0] == "x"
    assert len(agent_conf.ring_peers("c00003", cands, 8)) == 8
    assert len(agent_conf.ring_peers("c00001", cands[:3], 8)) == 2


def test_peer_window_must_span_two_probes():
    conf = helpers.make_conf(peers=["a=127.0.0.1:2"],
                             peer_address="127.0.0.1:1", peer_interval=2.0,
                             peer_window=3.0)
    with pytest.raises(Exception, match="peer_window"):
        agent_conf.validate(conf)
    conf = helpers.make_conf(peers_from=["a=127.0.0.1:2"])
    with pytest.raises(Exception, match="peer_address"):
        agent_conf.validate(conf)

