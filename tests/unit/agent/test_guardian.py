"""The agent's watchdog duty (issue 37): beats' watchdog reports, the
engines' answers and pills proven fresh, the peers' probes and answers
(fake sockets, datagrams handed over by the test), and the orderly stop
(magic close, then a disarmed beat). Test devices only; nothing sleeps."""

import itertools

import pytest

from instanceha.agent import guardian as guardian_mod
from instanceha.agent import main
from instanceha.agent import peers as peers_mod
from instanceha.agent import selffence as sf
from instanceha.agent import watchdog
from instanceha.heartbeat import challenge
from instanceha.heartbeat import keys
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from tests.unit.agent import helpers
from tests.unit.agent.watchdog_hw import FileHardware
from tests.unit.heartbeat import helpers as hb

ISSUER = b"E" * 8
PEER_KEYRING = keys.Keyring(keys.Key.from_secret(b"p" * 40))
X_KEY = keys.Key.for_host(b"x" * 40, "compute-x")
A_KEY = keys.Key.for_host(b"a" * 40, "compute-a")


def counter():
    n = itertools.count(1)
    return lambda size: bytes([next(n) % 256]) * size


def make_guardian(tmp_path, host="compute-x", key=X_KEY, peers=(),
                  clock=None):
    hw = FileHardware(tmp_path / ("dev-" + host), timeout=5)
    dev = watchdog.Device(hw.path, 5)
    g = guardian_mod.Guardian(dev, 10.0, 2.0, host, keys.Keyring(key),
                              peers=peers, monotonic=clock,
                              random=counter())
    g.arm()
    return g, hw


def engine_says(g, nonce, acting=True, condemned=False, key=X_KEY,
                host="compute-x"):
    ch = challenge.Challenge(ISSUER, b"c" * 16, host, nonce, acting,
                             condemned)
    data = challenge.encode(ch, key)
    return g.on_challenge(challenge.decode_signed(data, keys.Keyring(key))[0],
                          data)


def test_reports_armed_then_disarmed_with_timeouts(tmp_path):
    g, hw = make_guardian(tmp_path)
    r = g.report(100.0)
    assert (r.state, r.timeout, r.isolation_timeout) == (
        protocol.WATCHDOG_ARMED, 5, 10.0)
    assert g.report(101.0).nonce == r.nonce          # within the interval
    assert g.report(102.0).nonce != r.nonce          # a new one after it
    g.disarm()
    assert g.report(103.0).state == protocol.WATCHDOG_DISARMED
    hw.poll(103.0)
    assert hw.disarmed and not hw.poll(1000.0)


def test_an_acting_engines_answer_counts_from_the_nonces_draw(tmp_path):
    g, _ = make_guardian(tmp_path)
    nonce = g.report(100.0).nonce
    assert engine_says(g, nonce) == "engine"
    assert g.fence.inputs().engine_at == 100.0
    assert g.tick(110.0).feed and not g.tick(110.5).feed


def test_a_standby_or_unproven_answer_does_not_count(tmp_path):
    g, _ = make_guardian(tmp_path)
    nonce = g.report(100.0).nonce
    assert engine_says(g, nonce, acting=False) == "standby"
    assert engine_says(g, b"z" * 16) == "unproven"     # not our nonce
    assert engine_says(g, None) == "unproven"          # an older engine
    assert g.fence.inputs().engine_at is None


def test_a_pill_echoing_a_nonce_of_this_run_condemns(tmp_path):
    g, _ = make_guardian(tmp_path)
    nonce = g.report(100.0).nonce
    engine_says(g, nonce)
    assert engine_says(g, nonce, condemned=True) == "condemned"
    d = g.tick(100.5)
    assert not d.feed and d.reason == sf.CONDEMNED and g.pill


def test_a_pill_recorded_before_this_run_is_refused(tmp_path):
    g, _ = make_guardian(tmp_path)
    g.report(100.0)
    assert engine_says(g, b"o" * 16, condemned=True) == "unproven"
    assert not g.fence.inputs().condemned


# -- peers --------------------------------------------------------------------

class Net:
    """Fake sockets that keep what is sent, by address."""

    def __init__(self):
        self.sent = []

    def sock(self, address):
        net = self

        class Sock:
            def sendto(self, data, to):
                net.sent.append((address, data, to))

            def setblocking(self, flag):
                pass

            def close(self):
                pass
        return Sock()

    def take(self, to):
        out = [(frm, d) for frm, d, t in self.sent if t == to]
        self.sent = [s for s in self.sent if s[2] != to]
        return out


ADDR = {"compute-x": ("127.0.0.1", 1), "compute-a": ("127.0.0.1", 2),
        "compute-b": ("127.0.0.1", 3)}


def make_peer(tmp_path, net, host, key, clock):
    others = [(n, a) for n, a in ADDR.items() if n != host]
    g, hw = make_guardian(tmp_path, host, key, [n for n, _ in others],
                          clock)
    p = peers_mod.Peers(host, others, PEER_KEYRING, g,
                        net.sock(ADDR[host]), clock, random=counter())
    return p, g, hw


def deliver(net, peers_by_host):
    for host, p in peers_by_host.items():
        for frm, data in net.take(ADDR[host]):
            p.handle(data, frm)


def test_peers_answer_whether_they_hear_an_engine(tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    x, gx, _ = make_peer(tmp_path, net, "compute-x", X_KEY, clock)
    a, ga, _ = make_peer(tmp_path, net, "compute-a", A_KEY, clock)
    engine_says(ga, ga.report(100.0).nonce, key=A_KEY, host="compute-a")
    assert x.probe(100.0) == 2
    deliver(net, {"compute-a": a})        # a answers; b is gone
    deliver(net, {"compute-x": x})
    answers = gx.fence.inputs().peers
    assert answers == (sf.PeerAnswer("compute-a", 100.0, True, False),)
    # one of two peers is not a majority of 2: cut off, no feed
    assert not gx.tick(101.0).feed


def test_a_peer_relays_the_engines_pill_and_the_prober_verifies_it(
        tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    x, gx, _ = make_peer(tmp_path, net, "compute-x", X_KEY, clock)
    a, ga, _ = make_peer(tmp_path, net, "compute-a", A_KEY, clock)
    nonce = gx.report(100.0).nonce
    pill = challenge.encode(challenge.Challenge(
        ISSUER, b"c" * 16, "compute-x", nonce, True, True), X_KEY)
    relay = peer.encode_relay(peer.Relay("compute-x", pill), A_KEY)
    assert a.handle(relay, ("192.0.2.1", 7411)) == "relay_kept"
    x.probe(101.0)
    deliver(net, {"compute-a": a})
    deliver(net, {"compute-x": x})
    assert x.counts["condemned"] == 1
    assert gx.fence.inputs().condemned and not gx.tick(101.5).feed


def test_a_forged_pill_from_a_peer_condemns_nothing(tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    x, gx, _ = make_peer(tmp_path, net, "compute-x", X_KEY, clock)
    nonce = gx.report(100.0).nonce
    forged = challenge.encode(challenge.Challenge(
        ISSUER, b"c" * 16, "compute-x", nonce, True, True), A_KEY)
    x.probe(100.0)
    probe_nonce = peer.decode_signed(net.sent[0][1], PEER_KEYRING)[0].nonce
    answer = peer.encode_answer(peer.Answer(
        probe_nonce, "compute-a", "compute-x", True, forged),
        PEER_KEYRING.current)
    assert x.handle(answer, ADDR["compute-a"]) == "answer"
    assert not gx.fence.inputs().condemned


def test_answers_that_prove_nothing_are_not_counted(tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    x, gx, _ = make_peer(tmp_path, net, "compute-x", X_KEY, clock)
    x.probe(100.0)
    probe_nonce = peer.decode_signed(net.sent[0][1], PEER_KEYRING)[0].nonce

    def answer(nonce=probe_nonce, host="compute-a", target="compute-x",
               key=PEER_KEYRING.current):
        return x.handle(peer.encode_answer(peer.Answer(
            nonce, host, target, True), key), None)
    assert answer(nonce=b"q" * 16) == "unproven"
    assert answer(host="compute-z") == "unknown_peer"
    assert answer(target="compute-b") == "wrong_target"
    assert answer(key=hb.OTHER_KEY) == "unknown_key"
    assert gx.fence.inputs().peers == ()
    # a probe of any agent of the peer set is answered where it came from
    stranger = peer.encode_probe(peer.Probe(b"s" * 16, "compute-z"),
                                 PEER_KEYRING.current)
    net.sent = []
    assert x.handle(stranger, ("192.0.2.99", 9)) == "answered"
    (_, data, to), = net.sent
    assert to == ("192.0.2.99", 9)
    assert peer.decode_signed(data, PEER_KEYRING)[0].target == "compute-z"
    # one signed with another key is not
    forged = peer.encode_probe(peer.Probe(b"s" * 16, "compute-z"),
                               hb.OTHER_KEY)
    assert x.handle(forged, ("192.0.2.99", 9)) == "unknown_key"


def test_at_most_sixteen_peers():
    from instanceha.conf import agent as agent_conf
    with pytest.raises(ValueError, match="at most 16"):
        agent_conf.parse_peers(["h%d=127.0.0.1:%d" % (i, i + 1)
                                for i in range(17)])


# -- the agent ----------------------------------------------------------------

def test_orderly_stop_disarms_first_then_tells_the_engines(tmp_path):
    hw = FileHardware(tmp_path / "dev", timeout=30)
    sockets = helpers.Sockets()
    conf = helpers.make_conf(watchdog_device=hw.path, watchdog_timeout=30,
                             isolation_timeout=10.0, compute_check="none",
                             libvirt_check="none", count_guests=False,
                             guest_events=False)
    agent = main.Agent(conf, hb.KEYRING, host="compute-1",
                       socket_factory=sockets, boot_id="boot-1",
                       resolver=helpers.resolver, seq_start=1,
                       monotonic=helpers.Clock(10.0))
    agent.start()
    hw.poll(0.0)
    assert not hw.armed                   # not before the host may live
    agent.sender.send_once()
    g = agent.guardian
    assert g.tick(10.0).reason == sf.ISOLATED and not hw.poll(10.0)
    nonce = g.report(10.0).nonce
    ch = challenge.Challenge(ISSUER, b"c" * 16, "compute-1", nonce, True)
    data = challenge.encode(ch, hb.KEY)
    assert agent.sender.handle_reply(data) == "echoed"
    assert g.tick(10.0).reason == sf.ENGINE
    hw.poll(10.0)
    assert hw.armed
    agent.sender.send_once()
    agent.stop_watchdog()
    hw.poll(1.0)
    assert hw.disarmed and not hw.poll(10 ** 6)
    sent = [protocol.decode(d, hb.KEYRING) for d, _ in sockets.made[0].sent]
    assert [b.watchdog.state for b in sent] == [
        protocol.WATCHDOG_NONE, protocol.WATCHDOG_ARMED,
        protocol.WATCHDOG_DISARMED]
    assert sent[1].watchdog.timeout == 30
    agent.control.stop()
    agent.sender.close()


def test_a_watchdog_that_cannot_be_armed_stops_the_start(tmp_path):
    conf = helpers.make_conf(watchdog_device="/dev/watchdog",
                             guest_events=False)
    agent = main.Agent(conf, hb.KEYRING, host="compute-1",
                       socket_factory=helpers.Sockets(), boot_id="boot-1",
                       resolver=helpers.resolver, seq_start=1)
    with pytest.raises(main.ConfigError, match="refused"):
        agent.start()


def test_a_device_that_does_not_exist_stops_the_start(tmp_path):
    conf = helpers.make_conf(watchdog_device=str(tmp_path / "absent"),
                             guest_events=False)
    agent = main.Agent(conf, hb.KEYRING, host="compute-1",
                       socket_factory=helpers.Sockets(), boot_id="boot-1",
                       resolver=helpers.resolver, seq_start=1)
    with pytest.raises(main.ConfigError, match="no such device"):
        agent.start()


def test_never_armed_before_the_host_may_live_nor_once_condemned(tmp_path):
    hw = FileHardware(tmp_path / "dev", timeout=5)
    g = guardian_mod.Guardian(watchdog.Device(hw.path, 5), 10.0, 2.0,
                              "compute-x", keys.Keyring(X_KEY),
                              random=counter())
    nonce = g.report(100.0).nonce
    assert g.report(100.0).state == protocol.WATCHDOG_NONE
    for t in range(100, 200, 2):          # nobody answers: no reset loop
        assert not g.tick(float(t)).feed
        assert not hw.poll(float(t))
    assert not hw.armed and not g.device.armed
    engine_says(g, nonce, condemned=True)
    engine_says(g, nonce)
    assert g.tick(200.0).reason == sf.CONDEMNED and not g.device.armed


def test_reports_name_the_peers_and_the_pills_held(tmp_path):
    clock = helpers.Clock(100.0)
    net = Net()
    a, ga, _ = make_peer(tmp_path, net, "compute-a", A_KEY, clock)
    assert ga.report(100.0).pills == ()
    assert set(ga.report(100.0).peers) == {
        protocol.name_digest("compute-x"), protocol.name_digest("compute-b")}
    a.keep_relay(peer.Relay("compute-x", b"pill"))
    assert ga.report(100.0).pills == (protocol.pill_digest(b"pill"),)


def test_the_path_sockets_hand_relays_to_the_peers(tmp_path):
    from instanceha.agent import sender as sender_mod
    got = []
    conf = helpers.make_conf()
    s = sender_mod.Sender(conf, hb.KEYRING, helpers.Clock(5000.0),
                          socket_factory=helpers.Sockets(),
                          host="compute-1", boot_id="b", seq_start=1,
                          resolver=helpers.resolver, on_relay=got.append)
    relay = peer.Relay("compute-x", b"pill")
    assert s.handle_reply(peer.encode_relay(relay, hb.KEY)) == \
        sender_mod.RELAYED
    assert got == [relay]
    # not signed with this host's key: dropped
    assert s.handle_reply(peer.encode_relay(relay, hb.OTHER_KEY)) == \
        "unknown_key"


def test_a_restarted_agent_obeys_a_pill_made_before_its_restart(tmp_path):
    """The nonces are kept in a file (under /run in production: emptied
    at boot): the same boot's earlier run's nonce makes a pill count, not
    an answer (its draw time is unknown to this run)."""
    store = str(tmp_path / "nonces")

    def run(name):
        hw = FileHardware(tmp_path / name, timeout=5)
        g = guardian_mod.Guardian(watchdog.Device(hw.path, 5), 10.0, 2.0,
                                  "compute-x", keys.Keyring(X_KEY),
                                  random=counter() if name == "one"
                                  else (lambda n: b"\xee" * n),
                                  nonce_file=store)
        g.arm()
        return g
    first = run("one")
    old = first.report(100.0).nonce
    second = run("two")                    # the agent restarted
    assert engine_says(second, old) == "unproven"      # an answer: no
    assert engine_says(second, old, condemned=True) == "condemned"
    # another boot: /run emptied
    (tmp_path / "nonces").unlink()
    third = run("three")
    assert engine_says(third, old, condemned=True) == "unproven"
