"""Sender: what one beat carries, paths and engines, sequences across
restarts, the step-free send time, the schedule (fake clock and event),
send failures, the host's name."""

import errno
import socket
import time

import pytest
from structlog.testing import capture_logs

from instanceha.agent import sender
from instanceha.errors import ConfigError
from instanceha.heartbeat import challenge
from instanceha.heartbeat import protocol
from instanceha.heartbeat import replay
from tests.unit.agent import helpers
from instanceha.util import waiting
from tests.unit.heartbeat import helpers as hb

FACTS = protocol.Facts(compute=True, libvirt=True, guests=2)


def make(sockets=None, clock=None, mono=None, seq_start=100, **overrides):
    conf = helpers.make_conf(**overrides)
    return sender.Sender(conf, hb.KEYRING, clock or helpers.Clock(5000.0),
                         lambda: FACTS, sockets or helpers.Sockets(),
                         host="compute-1", boot_id="boot-1",
                         monotonic=mono or helpers.Clock(10.0),
                         seq_start=seq_start, resolver=helpers.resolver)


def beats(sock):
    return [(protocol.decode(data, hb.KEYRING), address)
            for data, address in sock.sent]


def test_one_beat_per_path_to_every_engine():
    sockets = helpers.Sockets()
    s = make(sockets, paths=["mgmt=192.0.2.11", "storage=198.51.100.11"],
             engines=["192.0.2.1:7411", "192.0.2.2:7411"])
    assert s.send_once() == 4
    mgmt, storage = sockets.made
    assert mgmt.bound == ("192.0.2.11", 0)
    assert storage.bound == ("198.51.100.11", 0)
    assert not mgmt.blocking
    got = beats(mgmt)
    assert [a for _, a in got] == [("192.0.2.1", 7411), ("192.0.2.2", 7411)]
    beat = got[0][0]
    assert beat == protocol.Beat(host="compute-1", boot_id="boot-1",
                                 seq=101, sent_at=5000.0, path="mgmt",
                                 facts=FACTS)
    assert got[1][0] == beat          # the same datagram to each engine
    assert beats(storage)[0][0].path == "storage"


def test_each_path_counts_its_own_sequence():
    sockets = helpers.Sockets()
    s = make(sockets, paths=["a=192.0.2.11", "b=192.0.2.12"])
    for _ in range(3):
        s.send_once()
    a, b = sockets.made
    assert [m.seq for m, _ in beats(a)] == [101, 102, 103]
    assert [m.seq for m, _ in beats(b)] == [101, 102, 103]


def test_a_restarted_agent_is_accepted_at_once():
    """The sequence starts at the milliseconds since boot: a new agent in
    the same boot continues above the old one's numbers."""
    guard = replay.ReplayGuard()
    first = helpers.Sockets()
    s = make(first, seq_start=5000)
    for _ in range(20):
        s.send_once()
    # Restarted 3 s later (in boot time) after 20 beats.
    second = helpers.Sockets()
    s2 = make(second, seq_start=5000 + 20 * 1000 + 3000)
    s2.send_once()
    for sock in first.made + second.made:
        for beat, _ in beats(sock):
            assert guard.check(beat.host, beat.path, beat.boot_id, beat.seq,
                               beat.sent_at, beat.sent_at) is None


def test_the_send_time_does_not_step_with_the_wall_clock():
    wall = helpers.Clock(5000.0)
    mono = helpers.Clock(10.0)
    sockets = helpers.Sockets()
    s = make(sockets, clock=wall, mono=mono)
    wall.advance(-90.0)               # NTP steps the clock back
    mono.advance(1.0)
    s.send_once()
    assert beats(sockets.made[0])[0][0].sent_at == 5001.0


def test_the_schedule_waits_one_interval_without_drift():
    mono = helpers.Clock(10.0)
    sockets = helpers.Sockets()
    s = make(sockets, mono=mono, interval=1.0)
    stop = helpers.StopAfter(mono, waits=5)
    s.run(stop)
    assert len(sockets.made[0].sent) == 5
    assert stop.waited == [1.0] * 5


def test_a_slow_beat_shortens_the_wait_and_a_late_one_does_not_burst():
    mono = helpers.Clock(10.0)
    sockets = helpers.Sockets()
    calls = []

    def slow_facts():
        calls.append(1)
        mono.advance(0.25 if len(calls) == 1 else 3.0)
        return FACTS

    conf = helpers.make_conf(interval=1.0)
    s = sender.Sender(conf, hb.KEYRING, helpers.Clock(), slow_facts,
                      sockets, host="h", boot_id="b", monotonic=mono,
                      seq_start=0, resolver=helpers.resolver)
    stop = helpers.StopAfter(mono, waits=3)
    s.run(stop)
    assert stop.waited[0] == pytest.approx(0.75)
    assert stop.waited[1:] == [0.0, 0.0]


def test_run_stops_at_once_when_stopped():
    sockets = helpers.Sockets()
    s = make(sockets)
    stop = helpers.StopAfter(helpers.Clock(), waits=0)
    s.run(stop)
    assert sockets.made[0].sent == []


def test_a_failing_beat_does_not_end_the_loop():
    mono = helpers.Clock(10.0)
    conf = helpers.make_conf()
    s = sender.Sender(conf, hb.KEYRING, helpers.Clock(),
                      lambda: 1 / 0, helpers.Sockets(), host="h",
                      boot_id="b", monotonic=mono, seq_start=0,
                      resolver=helpers.resolver)
    stop = helpers.StopAfter(mono, waits=3)
    s.run(stop)
    assert len(stop.waited) == 3


def test_send_failures_are_counted_per_path():
    sockets = helpers.Sockets()
    s = make(sockets, paths=["a=192.0.2.11", "b=192.0.2.12"])
    sockets.made[0].fail = OSError(errno.ENETUNREACH, "unreachable")
    assert s.send_once() == 1
    assert s.send_once() == 1
    a, b = s.paths
    assert (a.errors, a.sent, a.failing) == (2, 0, True)
    assert (b.errors, b.sent, b.failing) == (0, 2, False)
    sockets.made[0].fail = None
    assert s.send_once() == 2
    assert not a.failing


def test_engines_of_both_families_on_an_unbound_path():
    sockets = helpers.Sockets()
    s = make(sockets, engines=["192.0.2.1:7411", "[2001:db8::1]:7411"])
    assert s.send_once() == 2
    assert {sock.family for sock in sockets.made} == {socket.AF_INET,
                                                      socket.AF_INET6}


def test_a_path_with_no_engine_of_its_family_is_refused():
    with pytest.raises(ConfigError, match="v6=2001:db8::5: no engine"):
        make(paths=["v6=2001:db8::5"])


def test_a_bind_failure_names_the_path():
    class NoBind(helpers.FakeSocket):
        def bind(self, address):
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign")

    with pytest.raises(ConfigError, match="mgmt=192.0.2.99: cannot bind"):
        make(lambda f, k: NoBind(f, k), paths=["mgmt=192.0.2.99"])


def test_an_unresolvable_engine_names_it():
    def resolver(host, port, type=0):
        raise socket.gaierror(socket.EAI_NONAME, "Name not known")

    conf = helpers.make_conf(engines=["nowhere.invalid:7411"])
    with pytest.raises(ConfigError, match="nowhere.invalid:7411"):
        sender.Sender(conf, hb.KEYRING, host="h", boot_id="b",
                      socket_factory=helpers.Sockets(), resolver=resolver)


def test_a_host_name_no_beat_can_carry_is_refused():
    with pytest.raises(ConfigError, match="host"):
        sender.Sender(helpers.make_conf(), hb.KEYRING, host="h" * 300,
                      boot_id="b", socket_factory=helpers.Sockets(),
                      resolver=helpers.resolver)


def test_host_name_sources(tmp_path):
    nova = tmp_path / "nova.conf"
    nova.write_text("[DEFAULT]\nhost = compute-7.nova\n[libvirt]\nx=1\n")
    conf = helpers.make_conf(nova_conf=str(nova))
    assert sender.resolve_host(conf, lambda: "sys") == "compute-7.nova"
    conf = helpers.make_conf(nova_conf=str(nova), host="override")
    assert sender.resolve_host(conf, lambda: "sys") == "override"
    nova.write_text("[DEFAULT]\ndebug = true\n")
    assert sender.resolve_host(helpers.make_conf(nova_conf=str(nova)),
                               lambda: "sys") == "sys"
    missing = helpers.make_conf(nova_conf=str(tmp_path / "none.conf"))
    assert sender.resolve_host(missing, lambda: "sys") == "sys"


def test_boot_id(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text("5469bb77-17c8-48c9-9e11-7de6ed6864fa\n")
    assert sender.read_boot_id(path) == \
        "5469bb77-17c8-48c9-9e11-7de6ed6864fa"
    with pytest.raises(ConfigError, match="cannot read"):
        sender.read_boot_id(tmp_path / "missing")
    path.write_text("")
    with pytest.raises(ConfigError, match="holds no boot id"):
        sender.read_boot_id(path)


def test_boot_millis_grows():
    assert sender.boot_millis() > 0


def test_close_closes_the_sockets():
    sockets = helpers.Sockets()
    s = make(sockets, paths=["a=192.0.2.11", "b=192.0.2.12"])
    s.close()
    assert all(sock.closed for sock in sockets.made)


# -- the engines' challenges ---------------------------------------------------

def _challenge(host="compute-1", nonce=b"N" * 16, issuer=b"E" * 8,
               key=hb.KEY):
    return challenge.encode(challenge.Challenge(issuer, nonce, host), key)


def test_a_challenge_for_this_host_is_echoed_in_the_next_beats():
    sockets = helpers.Sockets()
    mono = helpers.Clock(10.0)
    s = make(sockets, mono=mono)
    s.send_once()
    assert s.handle_reply(_challenge()) == sender.ECHOED
    mono.advance(0.5)
    s.handle_reply(_challenge(issuer=b"F" * 8, nonce=b"M" * 16))
    mono.advance(1.0)
    s.send_once()
    first, second = [b for b, _ in beats(sockets.made[0])]
    assert first.echoes == ()
    assert second.echoes == (b"M" * 16, b"N" * 16)   # newest engine first
    assert s.replies == {sender.ECHOED: 2}


def test_what_is_not_a_challenge_for_this_host_is_dropped_and_counted():
    s = make()
    beat = protocol.encode_beat(hb.beat(), hb.KEY)
    with capture_logs() as logs:
        assert s.handle_reply(_challenge(key=hb.OTHER_KEY)) == "unknown_key"
        assert s.handle_reply(_challenge(host="compute-2")) == \
            sender.WRONG_HOST
        assert s.handle_reply(_challenge(host="compute-2")) == \
            sender.WRONG_HOST
        assert s.handle_reply(beat) == sender.NOT_A_CHALLENGE
        assert s.handle_reply(b"junk") == "bad_magic"
    assert s.echoes.current(10.0) == ()
    assert s.replies == {"unknown_key": 1, sender.WRONG_HOST: 2,
                         sender.NOT_A_CHALLENGE: 1, "bad_magic": 1}
    # One line per reason, not per datagram.
    assert sorted(e["reason"] for e in logs
                  if e["event"] == "agent.challenge_dropped") == [
        "bad_magic", "not_a_challenge", "unknown_key", "wrong_host"]


def test_challenges_come_back_to_the_socket_the_beats_leave_from():
    """Real loopback sockets: the engine answers the beat's source
    address; the agent's receiver thread keeps the challenge; the next
    beat echoes it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as engine:
        engine.bind(("127.0.0.1", 0))
        engine.settimeout(10)
        conf = helpers.make_conf(
            engines=["127.0.0.1:%d" % engine.getsockname()[1]],
            paths=["mgmt=127.0.0.1"])
        s = sender.Sender(conf, hb.KEYRING, host="compute-1",
                          boot_id="boot-1", seq_start=0)
        try:
            s.start_replies()
            s.send_once()
            data, source = engine.recvfrom(protocol.MAX_SIZE)
            assert protocol.decode(data, hb.KEYRING).echoes == ()
            engine.sendto(_challenge(nonce=b"R" * 16), source)
            assert waiting.wait_until(
                lambda: s.echoes.current(time.monotonic()), 10)
            s.send_once()
            data, _ = engine.recvfrom(protocol.MAX_SIZE)
            assert protocol.decode(data, hb.KEYRING).echoes == (
                b"R" * 16,)
        finally:
            s.close()
    assert s.replies == {sender.ECHOED: 1}
