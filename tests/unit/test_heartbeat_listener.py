"""The engine's heartbeat source with sockets: a beat through a real
loopback socket, start-up errors (addresses, key files, bind), the
[agent] options' checks, and signed requests to an agent."""

import socket

from oslo_config import cfg
import pytest

from instanceha import conf as ih_conf
from instanceha.conf import heartbeat as heartbeat_conf
from instanceha.errors import ConfigError, StartupError
from instanceha.events import EventKind
from instanceha.heartbeat import challenge
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import Sink
from tests.unit.test_startup import Started
from tests.unit.test_heartbeat_source import HOSTS, T0, Host, feed, make


def conf_with(**agent):
    return ih_conf.make({"agent": agent})


# -- the real socket ----------------------------------------------------------

def test_beat_through_a_loopback_socket():
    """An agent's first beat echoes nothing: authentic, unproven, no
    event. The engine's challenge comes back to the socket it beat from;
    the beat that echoes it makes the host beating."""
    sink = Sink()
    src = heartbeat.HeartbeatSource(
        conf_with(listen_addresses=["127.0.0.1:0"], challenge_interval=0.2),
        sink, known_hosts=lambda: list(HOSTS), keyring=helpers.KEYRING)
    src.start()
    host = Host()
    try:
        (address, port), = src.bound
        assert port != 0 and src.health()["addresses"] == [
            "127.0.0.1:%d" % port]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.settimeout(10)
            out.sendto(host.beat(src._clock()), (address, port))
            out.sendto(b"junk", (address, port))
            data, sender = out.recvfrom(protocol.MAX_SIZE)
            assert sender == (address, port)
            ch, _ = challenge.decode_signed(data, helpers.KEYRING)
            assert ch.host == "compute-1" and sink.events == []
            out.sendto(host.beat(src._clock(), echoes=(ch.nonce,)),
                       (address, port))
            events = sink.wait(1)
        assert [e.kind for e in events] == [EventKind.AGENT_BEATING]
        assert events[0].payload.paths == ("mgmt",)
        health = src.health()
        assert health["listening"] and health["accepted"] == 2
        assert health["beats_unproven"] == 1
        assert health["hosts_beating"] == 1 and health["challenges_sent"]
    finally:
        src.stop()
    assert not src.health()["listening"]


# -- start-up errors ----------------------------------------------------------

def test_a_bad_listen_address_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="not-an-address!"):
        heartbeat.HeartbeatSource(
            conf_with(listen_addresses=["not-an-address!:7411"]), Sink(),
            keyring=helpers.KEYRING)
    with pytest.raises(ConfigError, match="99999"):
        heartbeat.HeartbeatSource(
            conf_with(listen_addresses=["127.0.0.1:99999"]), Sink(),
            keyring=helpers.KEYRING)


def test_an_address_not_on_this_host_fails_the_start_naming_it():
    src = heartbeat.HeartbeatSource(
        conf_with(listen_addresses=["127.0.0.1:0", "192.0.2.254:7411"]),
        Sink(), keyring=helpers.KEYRING)
    with pytest.raises(StartupError, match=r"192\.0\.2\.254:7411"):
        src.start()
    assert src._socks == []     # what was bound is closed again


@pytest.mark.parametrize("problem,setup", [
    ("cannot be read", lambda p: None),
    ("mode 0644", lambda p: helpers.write_key(p, mode=0o644)),
    ("at least 32", lambda p: helpers.write_key(p, secret=b"short")),
])
def test_a_key_file_problem_stops_the_start_naming_the_file(
        tmp_path, problem, setup):
    path = tmp_path / "agent.key"
    setup(path)
    with pytest.raises(keys.KeyFileError) as e:
        heartbeat.HeartbeatSource(
            conf_with(listen_addresses=["127.0.0.1:0"], key_file=str(path)),
            Sink())
    assert str(path) in str(e.value) and problem in str(e.value)
    assert isinstance(e.value, ConfigError)


def test_key_files_are_read(tmp_path):
    current = helpers.write_key(tmp_path / "new.key", helpers.OTHER_SECRET)
    previous = helpers.write_key(tmp_path / "old.key")
    src = heartbeat.HeartbeatSource(
        conf_with(listen_addresses=["127.0.0.1:0"], key_file=str(current),
                  previous_key_file=str(previous)), Sink())
    assert src.keyring.kids == (helpers.OTHER_KEY.kid, helpers.KEY.kid)


# -- the options --------------------------------------------------------------

def test_listen_addresses_parse_with_the_default_port():
    assert heartbeat_conf.listen_addresses(conf_with(listen_addresses=[
        "192.0.2.1", "[2001:db8::1]:7000", "engine.example:0"]).agent) == [
        ("192.0.2.1", 7411), ("2001:db8::1", 7000), ("engine.example", 0)]


@pytest.mark.parametrize("agent,message", [
    ({"listen_addresses": ["192.0.2.1"]}, "key_file: must be set"),
    ({"listen_addresses": ["192.0.2.1:x"], "key_file": "/k"},
     "listen_addresses"),
    ({"listen_addresses": ["192.0.2.1", "192.0.2.1:7411"],
      "key_file": "/k"}, "listed twice"),
])
def test_validate_names_the_option(agent, message):
    with pytest.raises(cfg.Error, match=message):
        heartbeat_conf.validate(conf_with(**agent))


def test_validate_passes_when_off_or_complete():
    heartbeat_conf.validate(conf_with())
    heartbeat_conf.validate(conf_with(listen_addresses=["192.0.2.1"],
                                      key_file="/etc/instanceha/agent.key"))


def test_silence_timeout_must_be_positive():
    conf = ih_conf.new_conf()
    conf([], default_config_files=[])
    with pytest.raises(ValueError):
        conf.set_override("silence_timeout", 0, "agent")


# -- requests to agents -------------------------------------------------------

@pytest.fixture
def agent_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def test_send_request_signs_a_request_the_agent_accepts(agent_socket):
    port = agent_socket.getsockname()[1]
    src, _, clock, _ = make(restart_compute=True, request_port=port)
    feed(src, Host(), T0, sender=("127.0.0.1", 50000))
    text = src.send_request("compute-1", "nova-compute down, host alive",
                            now=T0 + 1)
    assert text == "sent restart_compute to 127.0.0.1:%d (path mgmt)" % port
    data, _ = agent_socket.recvfrom(protocol.MAX_SIZE + 1)
    request, kid = protocol.decode_signed(data, helpers.KEYRING)
    assert isinstance(request, protocol.Request)
    assert (request.kind, request.host, request.reason, request.sent_at,
            request.seq) == (protocol.RESTART_COMPUTE, "compute-1",
                             "nova-compute down, host alive", T0 + 1,
                             protocol.request_seq(T0 + 1))
    assert kid == helpers.KEY.kid


def test_requests_are_signed_with_the_key_the_host_signs_with(
        agent_socket):
    """During a rotation an agent not yet rotated holds the previous key
    only: its requests are signed with that key (it is still accepted),
    so soft fencing goes on; a rotated agent's with the current one."""
    port = agent_socket.getsockname()[1]
    ring = keys.Keyring(helpers.OTHER_KEY, helpers.KEY)
    src, _, _, _ = make(keyring=ring, restart_compute=True,
                        request_port=port)
    feed(src, Host(key=helpers.KEY), T0, sender=("127.0.0.1", 50000))
    feed(src, Host("compute-2", key=helpers.OTHER_KEY), T0,
         sender=("127.0.0.1", 50001))
    src.send_request("compute-1", "why", now=T0 + 1)
    data, _ = agent_socket.recvfrom(protocol.MAX_SIZE + 1)
    assert protocol.decode_signed(data, ring)[1] == helpers.KEY.kid
    src.send_request("compute-2", "why", now=T0 + 1)
    data, _ = agent_socket.recvfrom(protocol.MAX_SIZE + 1)
    assert protocol.decode_signed(data, ring)[1] == helpers.OTHER_KEY.kid


def test_send_request_says_why_not():
    src, _, _, _ = make()
    assert src.send_request("compute-1", "x", now=T0) == \
        "not sent: [agent] restart_compute is off"
    src, _, _, _ = make(restart_compute=True)
    assert src.send_request("compute-1", "x", now=T0) == (
        "not sent: no beat heard from compute-1: no address known")


def test_send_request_is_rate_limited_per_host(agent_socket):
    port = agent_socket.getsockname()[1]
    src, _, _, _ = make(restart_compute=True, request_port=port,
                        restart_max=2, restart_window=600)
    feed(src, Host(), T0, sender=("127.0.0.1", 50000))
    sent = [src.send_request("compute-1", "x", now=T0 + i)
            for i in (1, 2, 3)]
    assert [t.startswith("sent") for t in sent] == [True, True, False]
    assert "restart_max" in sent[2]
    assert src.send_request("compute-1", "x", now=T0 + 601.5).startswith(
        "sent")


# -- the service's wiring -----------------------------------------------------

def test_the_service_builds_the_source_only_when_listening(tmp_path):
    for sub in ("off", "on"):
        (tmp_path / sub).mkdir()
    off = Started(tmp_path / "off")
    assert off.svc.heartbeat is None
    assert not any(isinstance(s, heartbeat.HeartbeatSource)
                   for s in off.svc.sources)
    key = helpers.write_key(tmp_path / "agent.key")
    on = Started(tmp_path / "on", {"agent": {
        "listen_addresses": "127.0.0.1:0", "key_file": str(key)}})
    src = on.svc.heartbeat
    assert isinstance(src, heartbeat.HeartbeatSource)
    assert src in on.svc.sources
    assert src.keyring.kids == (helpers.KEY.kid,)
    # Nova's hosts as the engine knows them (the journalled one here;
    # reading the journal only queues work, nothing runs).
    on.svc.engine.resume_from_journal()
    src.refresh(T0)
    assert "compute-1" in src._ids
