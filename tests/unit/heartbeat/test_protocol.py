"""The datagram format: round trips, every drop reason, and no exception
other than Dropped on any bytes (hypothesis)."""

import hashlib
import hmac
import json
import struct

from hypothesis import given, settings, strategies as st
import pytest

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers

RING = keys.Keyring(helpers.KEY, helpers.OTHER_KEY)


def sign(body, secret=helpers.SECRET, magic=protocol.MAGIC, length=None):
    """A datagram of any body, built by hand (not by the encoder)."""
    payload = body if isinstance(body, bytes) else json.dumps(
        body, sort_keys=True, separators=(",", ":")).encode()
    head = struct.pack(">4sH", magic,
                       len(payload) if length is None else length) + payload
    return head + hmac.new(secret, head, hashlib.sha256).digest()


def beat_body(**overrides):
    body = {"type": "beat", "v": 1, "kid": helpers.KEY.kid,
            "host": "compute-1", "boot_id": "b1", "seq": 1,
            "sent_at": 1000.0, "path": "mgmt", "compute": True,
            "libvirt": None, "guests": 2}
    body.update(overrides)
    return body


def reason(data, ring=RING):
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(data, ring)
    assert e.value.reason in protocol.DECODE_REASONS
    return e.value.reason


def test_a_beat_round_trips():
    beat = helpers.beat(facts=protocol.Facts(None, False, 0))
    data = protocol.encode_beat(beat, helpers.KEY)
    assert protocol.decode(data, RING) == beat
    assert data.startswith(protocol.MAGIC)
    assert len(data) <= protocol.MAX_SIZE


def test_a_request_round_trips_and_names_its_key():
    req = helpers.request()
    data = protocol.encode_request(req, helpers.OTHER_KEY)
    assert protocol.decode_signed(data, RING) == (req, helpers.OTHER_KEY.kid)


def test_the_body_is_compact_sorted_json():
    data = protocol.encode_beat(helpers.beat(), helpers.KEY)
    body = data[6:-32]
    parsed = json.loads(body)
    assert body == json.dumps(parsed, sort_keys=True,
                              separators=(",", ":")).encode()
    assert parsed["kid"] == helpers.KEY.kid and parsed["v"] == 1


def test_the_longest_host_name_fits():
    beat = helpers.beat(host="h" * 255, boot_id="b" * 64, path="p" * 32,
                        seq=2 ** 63 - 1, sent_at=1e12)
    data = protocol.encode_beat(beat, helpers.KEY)
    assert protocol.decode(data, RING) == beat


@pytest.mark.parametrize("beat", [
    helpers.beat(host=""), helpers.beat(host="h" * 256),
    helpers.beat(seq=-1), helpers.beat(path="has space"),
    helpers.beat(host="a\nb"),
])
def test_the_encoder_refuses_what_the_decoder_would(beat):
    with pytest.raises(ValueError):
        protocol.encode_beat(beat, helpers.KEY)


def test_drops_by_size_magic_and_length():
    good = protocol.encode_beat(helpers.beat(), helpers.KEY)
    assert reason(good + b"x" * protocol.MAX_SIZE) == "oversized"
    assert reason(b"") == "truncated"
    assert reason(b"IH") == "truncated"
    assert reason(b"XY") == "bad_magic"
    assert reason(b"NOPE" + good[4:]) == "bad_magic"
    assert reason(good[:-1]) == "truncated"
    assert reason(good[:20]) == "truncated"
    assert reason(good + b"\0") == "malformed"


def test_drops_by_version_key_and_signature():
    assert reason(sign(beat_body(v=2))) == "unknown_version"
    assert reason(sign(beat_body(kid="deadbeef"))) == "unknown_key"
    assert reason(sign(beat_body(), secret=b"x" * 40)) == "bad_signature"
    good = bytearray(protocol.encode_beat(helpers.beat(), helpers.KEY))
    good[-1] ^= 1
    assert reason(bytes(good)) == "bad_signature"
    # A signed body changed on the way: the signature no longer matches.
    data = protocol.encode_beat(helpers.beat(seq=1), helpers.KEY)
    assert reason(data.replace(b'"seq":1', b'"seq":9')) == "bad_signature"


def test_a_key_not_in_the_keyring_is_unknown():
    data = protocol.encode_beat(helpers.beat(), helpers.OTHER_KEY)
    assert reason(data, keys.Keyring(helpers.KEY)) == "unknown_key"


@pytest.mark.parametrize("body", [
    b"not json", b"[1,2]", b"\xff\xfe{}", b"[" * 970 + b"]" * 10,
    beat_body(v="1"), beat_body(v=True), beat_body(kid=7),
    beat_body(type="other"), beat_body(host=""), beat_body(host="h" * 256),
    beat_body(host=None), beat_body(host="a\x00b"), beat_body(seq=-1),
    beat_body(seq=2 ** 63), beat_body(seq=1.5), beat_body(seq=True),
    beat_body(sent_at="now"), beat_body(sent_at=-1), beat_body(sent_at=None),
    beat_body(sent_at=10 ** 400), beat_body(compute="yes"),
    beat_body(guests=-1), beat_body(guests=1.0), beat_body(path="a b"),
    beat_body(boot_id="b" * 65), {k: v for k, v in beat_body().items()
                                  if k != "boot_id"},
    {"type": "request", "v": 1, "kid": helpers.KEY.kid, "kind": "x",
     "host": "h", "seq": 1, "sent_at": 1.0, "reason": 5},
])
def test_malformed_bodies(body):
    assert reason(sign(body)) == "malformed"


def test_nan_and_infinity_are_malformed():
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        body = json.dumps(beat_body(sent_at=0)).encode().replace(
            b'"sent_at": 0', b'"sent_at": ' + constant)
        assert constant in body
        assert reason(sign(body)) == "malformed"


def test_unknown_fields_are_ignored_within_the_version():
    data = sign(beat_body(uptime=5))
    assert protocol.decode(data, RING).host == "compute-1"


def test_drop_reasons_cover_decode_and_replay():
    assert set(protocol.DROP_REASONS) == set(protocol.DECODE_REASONS) | {
        "replayed", "stale"}
    assert len(set(protocol.DROP_REASONS)) == len(protocol.DROP_REASONS)


def test_dropped_says_its_reason():
    e = protocol.Dropped("bad_magic", "")
    assert str(e) == "bad_magic"
    assert str(protocol.Dropped("oversized", "2000 bytes")) == \
        "oversized: 2000 bytes"


GOOD = protocol.encode_beat(helpers.beat(), helpers.KEY)


@settings(max_examples=800, deadline=None)
@given(st.one_of(
    st.binary(max_size=1100),
    st.binary(max_size=200).map(lambda b: protocol.MAGIC + b),
    st.tuples(st.integers(0, len(GOOD)), st.integers(0, 255)).map(
        lambda t: GOOD[:t[0]] + bytes([t[1]]) + GOOD[t[0] + 1:]),
    st.integers(0, len(GOOD)).map(lambda n: GOOD[:n]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                 | st.text(max_size=20),
                 lambda c: st.lists(c, max_size=4)
                 | st.dictionaries(st.text(max_size=8), c, max_size=6),
                 max_leaves=12).map(
        lambda v: sign(json.dumps(v).encode())),
))
def test_any_bytes_decode_or_drop_never_raise(data):
    try:
        message = protocol.decode(data, RING)
    except protocol.Dropped as e:
        assert e.reason in protocol.DECODE_REASONS
    else:
        assert isinstance(message, (protocol.Beat, protocol.Request))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["type", "v", "kid", "host", "boot_id", "seq",
                     "sent_at", "path", "compute", "libvirt", "guests",
                     "kind", "reason"]),
    st.none() | st.booleans() | st.integers() | st.floats()
    | st.text(max_size=300)))
def test_signed_bodies_of_any_shape_decode_or_drop(body):
    body.setdefault("v", 1)
    body.setdefault("kid", helpers.KEY.kid)
    try:
        data = sign(body)
    except ValueError:
        return                   # NaN in json.dumps's output is allowed
    try:
        protocol.decode(data, RING)
    except protocol.Dropped as e:
        assert e.reason in protocol.DECODE_REASONS
