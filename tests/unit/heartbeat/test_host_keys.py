"""Each host's own key (issue 34, part 2): derived from the engines'
master key and the host's name, its file, its 8-byte id, the engine's
HostKeyring (derived once per host, looked up by id, the shared key
accepted or refused), and the protocol's wrong_host and shared_key
drops."""

import hashlib
import hmac
import struct

import pytest

from instanceha.heartbeat import guest
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers

MASTER = keys.Key.from_secret(b"M" * 40)
OLD_MASTER = keys.Key.from_secret(b"N" * 40)
SHARED = keys.Keyring(helpers.KEY)
HOSTS = ["compute-%d" % i for i in range(1, 6)]


def ring(accept_shared=True, previous=None, shared=SHARED, hosts=HOSTS):
    r = keys.HostKeyring(MASTER, previous, shared, accept_shared)
    r.learn(hosts)
    return r


def key_of(host, master=MASTER):
    return keys.derive_host_key(master, host)


def beat_of(host, key):
    return protocol.encode_beat(helpers.beat(host=host), key)


# -- derivation and files -----------------------------------------------------

def test_a_host_key_is_hmac_of_the_master_over_a_label_and_the_name():
    expected = hmac.new(MASTER.secret, b"instanceha agent host key v1\0"
                        + "compute-1".encode(), hashlib.sha256).digest()
    key = key_of("compute-1")
    assert key.secret == expected and key.host == "compute-1"
    assert key_of("compute-2").secret != expected
    assert key_of("compute-1", OLD_MASTER).secret != expected
    # Its id: 16 hex digits, 8 bytes on the wire whose first is not ASCII
    # (never a shared key's 8 hex digits).
    assert len(key.kid) == 16 and key.wire_id == bytes.fromhex(key.kid)
    assert key.wire_id[0] >= 0x80 and keys.is_host_key_id(key.wire_id)
    assert not keys.is_host_key_id(helpers.KEY.wire_id)
    assert key.secret.hex() not in repr(key)


def test_a_host_key_file_round_trips_and_names_its_host(tmp_path):
    key = key_of("compute-1")
    path = tmp_path / "agent.key"
    path.write_text(keys.host_key_line(key))
    path.chmod(0o600)
    loaded = keys.load_key(path)
    assert (loaded.kid, loaded.secret, loaded.host) == (
        key.kid, key.secret, "compute-1")
    ring_ = keys.load_keyring(path, helpers.write_key(tmp_path / "s.key"))
    assert ring_.current.host == "compute-1" and ring_.previous.host is None


@pytest.mark.parametrize("line,problem", [
    (b"ihk1:abc:compute-1", "ihk1:<64 hex digits>:<host name>"),
    (b"ihk1:" + b"0" * 64 + b":", "ihk1:<64 hex digits>:<host name>"),
    (b"ihk1:" + b"0" * 64 + b":\xff", "ihk1:<64 hex digits>:<host name>"),
])
def test_a_bad_host_key_file_is_named(tmp_path, line, problem):
    path = helpers.write_key(tmp_path / "agent.key", line)
    with pytest.raises(keys.KeyFileError) as e:
        keys.load_key(path)
    assert str(path) in str(e.value) and problem in str(e.value)


def test_a_master_or_shared_key_option_refuses_a_host_key(tmp_path):
    path = tmp_path / "k"
    path.write_text(keys.host_key_line(key_of("compute-1")))
    path.chmod(0o600)
    with pytest.raises(keys.KeyFileError, match="speaks for one host"):
        keys.load_host_keyring(master_path=path)
    with pytest.raises(keys.KeyFileError, match="agent-key"):
        keys.load_key(helpers.write_key(tmp_path / "s"), host_key=True)


# -- the engine's keyring -----------------------------------------------------

def test_keys_are_derived_once_per_host_not_per_datagram(monkeypatch):
    names = ["compute-%d" % i for i in range(2000)]
    beats = [beat_of(name, key_of(name)) for name in names[:50]]
    calls = []
    real = keys.derive_host_key
    monkeypatch.setattr(keys, "derive_host_key",
                        lambda m, h: calls.append(h) or real(m, h))
    r = keys.HostKeyring(MASTER, OLD_MASTER, SHARED)
    assert r.learn(names) == 2000 and len(calls) == 4000   # two masters
    for data in beats * 20:
        protocol.decode(data, r)
    assert r.learn(list(names)) == 0 and len(calls) == 4000
    assert r.learn(names + ["compute-new"]) == 1 and len(calls) == 4002
    # A host Nova no longer lists is forgotten: its beats name no key.
    r.learn(names[1:])
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(beats[0], r)
    assert e.value.reason == "unknown_key" and "host key id" in \
        e.value.detail
    assert r.collisions == 0


def test_each_host_has_two_keys_during_a_master_rotation():
    r = ring(previous=OLD_MASTER)
    for master, kind in ((MASTER, keys.CURRENT), (OLD_MASTER,
                                                 keys.PREVIOUS)):
        k = key_of("compute-2", master)
        message, kid = protocol.decode_signed(beat_of("compute-2", k), r)
        assert message.host == "compute-2" and kid == k.kid
        assert r.kind("compute-2", kid) == kind
        assert r.signing_key("compute-2", kid) is r.by_wire_id(k.wire_id)
    assert r.signing_key("compute-2").kid == key_of("compute-2").kid
    assert r.kind("compute-2", helpers.KEY.kid) == keys.SHARED


class CountingKey(keys.Key):
    __slots__ = ()
    macs = 0

    def mac(self, data):
        CountingKey.macs += 1
        return keys.Key.mac(self, data)


def test_a_forged_datagram_costs_one_lookup_and_at_most_one_mac():
    r = keys.HostKeyring(MASTER, shared=SHARED)
    r.learn(HOSTS)
    # The held keys count their MACs.
    r._by_wire_id = {w: CountingKey(k.kid, k.secret, k.host)
                     for w, k in r._by_wire_id.items()}
    CountingKey.macs = 0
    forged = beat_of("compute-1", keys.Key.for_host(b"x" * 32,
                                                   "compute-1"))
    with pytest.raises(protocol.Dropped, match="unknown_key"):
        protocol.decode(forged, r)
    assert CountingKey.macs == 0
    # Right id, wrong secret: one MAC, then bad_signature.
    good = key_of("compute-1")
    bad = beat_of("compute-1", keys.Key(good.kid, b"y" * 32, "compute-1"))
    with pytest.raises(protocol.Dropped, match="bad_signature"):
        protocol.decode(bad, r)
    assert CountingKey.macs == 1


# -- wrong_host and the shared key --------------------------------------------

def test_host_a_key_naming_host_b_is_dropped_as_wrong_host():
    r = ring()
    a = key_of("compute-1")
    for data in (
            beat_of("compute-2", a),
            guest.encode(guest.GuestEvent("compute-2", "b1", "srv-1",
                                          "crashed", "panicked", 1, 1000.0),
                         a),
            protocol.encode_request(helpers.request(host="compute-2"), a)):
        with pytest.raises(protocol.Dropped) as e:
            guest.decode(data, r)
        assert e.value.reason == "wrong_host"
        assert "compute-1" in e.value.detail and "compute-2" in \
            e.value.detail
    # Its own name: accepted.
    assert guest.decode(beat_of("compute-1", a), r).host == "compute-1"


def test_the_shared_key_is_accepted_while_the_window_is_open():
    r = ring(accept_shared=True)
    message, kid = protocol.decode_signed(beat_of("compute-3",
                                                  helpers.KEY), r)
    assert message.host == "compute-3" and kid == helpers.KEY.kid
    assert r.kind("compute-3", kid) == keys.SHARED
    # A request to a host still on the shared key is signed with it.
    assert r.signing_key("compute-3", kid) is helpers.KEY


def test_the_shared_key_is_dropped_with_a_clear_reason_once_closed():
    r = ring(accept_shared=False)
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(beat_of("compute-3", helpers.KEY), r)
    assert e.value.reason == "shared_key"
    assert "accept_shared_key is false" in e.value.detail
    assert "agent-key" in e.value.detail
    assert r.kids == () and r.signing_key("compute-3", helpers.KEY.kid) \
        .host == "compute-3"


def test_without_a_master_the_shared_key_speaks_for_every_host():
    r = keys.HostKeyring(shared=SHARED)
    assert not r.per_host and r.learn(HOSTS) == 0
    assert protocol.decode(beat_of("compute-2", helpers.KEY),
                           r).host == "compute-2"
    assert r.kind("compute-2", helpers.KEY.kid) == keys.CURRENT
    with pytest.raises(ValueError):
        keys.HostKeyring(shared=SHARED, accept_shared=False)


def test_a_host_key_datagram_has_the_documented_header():
    key = key_of("compute-1")
    data = beat_of("compute-1", key)
    magic, version, kind, wire, length = struct.unpack_from(">4sBB8sH",
                                                            data)
    assert (magic, version, kind, wire) == (b"IHAB", 2, protocol.BEAT,
                                            key.wire_id)
    assert data[-32:] == hmac.new(key.secret, data[:-32],
                                  hashlib.sha256).digest()
