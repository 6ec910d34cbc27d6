"""The agent with its host's own key (issue 34, part 2): its beats are
accepted by an engine deriving that key from the master; it refuses to
start with another host's key; it verifies an engine's request with its
own key, so a request signed with another host's key, or naming another
host, is refused; the shared key as its previous key during the move."""

import pytest
import structlog.testing

from instanceha.agent import control
from instanceha.agent import main
from instanceha.agent import sender
from instanceha.errors import ConfigError
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.agent import helpers
from tests.unit.agent.test_control import ON, Inline
from tests.unit.agent.test_main import write_conf
from tests.unit.heartbeat import helpers as hb

MASTER = keys.Key.from_secret(b"M" * 40)
OWN = keys.derive_host_key(MASTER, "compute-1")
OTHER = keys.derive_host_key(MASTER, "compute-2")


def engine_ring(accept_shared=True):
    ring = keys.HostKeyring(MASTER, shared=hb.KEYRING,
                            accept_shared=accept_shared)
    ring.learn(["compute-1", "compute-2"])
    return ring


def test_the_agents_beats_with_its_own_key_reach_the_engine():
    sockets = helpers.Sockets()
    s = sender.Sender(helpers.make_conf(), keys.Keyring(OWN),
                      helpers.Clock(5000.0), None, sockets,
                      host="compute-1", boot_id="b", monotonic=helpers.Clock(),
                      seq_start=1, resolver=helpers.resolver)
    s.send_once()
    (data, _), = sockets.made[0].sent
    beat, kid = protocol.decode_signed(data, engine_ring(False))
    assert beat.host == "compute-1" and kid == OWN.kid


def test_another_hosts_key_stops_the_agent_at_start(tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.setattr("instanceha.log.setup", lambda *a, **k: None)
    key = tmp_path / "agent.key"
    key.write_text(keys.host_key_line(OTHER))
    key.chmod(0o600)
    assert main.main(["--config-file", str(write_conf(tmp_path, key))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the key of host 'compute-2'" in err and "'compute-1'" in err
    assert "instanceha agent-key compute-1" in err
    with pytest.raises(ConfigError, match="previous_key_file"):
        main.check_key_host(keys.Keyring(OWN, OTHER), "compute-1")
    main.check_key_host(keys.Keyring(OWN, hb.KEY), "compute-1")


def make_control(ring):
    return control.Control(helpers.make_conf(**ON), ring, "compute-1",
                           clock=helpers.Clock(1000.0),
                           monotonic=helpers.Clock(50.0),
                           runner=helpers.Runner(), unit_fn=lambda: "n",
                           spawn=Inline())


def request(key, seq=1, **fields):
    return protocol.encode_request(hb.request(seq=seq, **fields), key)


def test_the_agent_verifies_an_engines_request_with_its_own_key():
    c = make_control(keys.Keyring(OWN))
    ring = engine_ring()
    # The engine signs a request to compute-1 with compute-1's key.
    assert c.handle(request(ring.signing_key("compute-1"))) == "accepted"
    with structlog.testing.capture_logs() as logs:
        # Signed with another host's key (root on compute-2 replaying its
        # own requests, or forging one): no key to verify it with.
        assert c.handle(request(OTHER, seq=2)) == "unknown_key"
        # Signed with this host's key but naming another host.
        assert c.handle(request(OWN, seq=3, host="compute-2")) == \
            "wrong_host"
        # The shared key is not this agent's.
        assert c.handle(request(hb.KEY, seq=4)) == "unknown_key"
    assert c.counts["accepted"] == 1
    assert [e["reason"] for e in logs
            if e["event"] == "agent.request_dropped"] == [
        "unknown_key", "wrong_host"]


def test_the_shared_key_as_previous_key_during_the_move():
    c = make_control(keys.Keyring(OWN, hb.KEY))
    assert c.handle(request(hb.KEY)) == "accepted"
    # ... and what the engine signs with while the host beats on it.
    ring = engine_ring()
    assert ring.signing_key("compute-1", hb.KEY.kid) is hb.KEY
