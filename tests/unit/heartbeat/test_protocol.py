"""The datagram format (version 2, binary): round trips, the layout as
documented, every drop reason, rejects that cost no MAC, and no
exception other than Dropped on any bytes (hypothesis)."""

import hashlib
import hmac
import json
import math
import struct
import uuid

from hypothesis import given, settings, strategies as st
import pytest

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers

RING = keys.Keyring(helpers.KEY, helpers.OTHER_KEY)
HEADER = struct.Struct(">4sBB8sH")


# -- datagrams built by hand, as doc/agent.md describes them ------------------

def beat_body(seq=1, sent_at=1000.0, compute=1, libvirt=2, guests=2,
              host=b"compute-1", boot_id=b"b1", path=b"mgmt", lengths=None,
              extra=b"", echoes=(), system_uuid=b"\x00"):
    """A beat's body, not by the encoder: any field may hold what the
    encoder refuses; ``lengths`` replaces the three text lengths;
    ``system_uuid``: the appended UUID field's bytes (its length byte
    first); ``echoes`` None leaves both appended fields out (an older
    agent's beat); ``extra`` goes after everything."""
    host_len, boot_len, path_len = lengths or (len(host), len(boot_id),
                                               len(path))
    appended = b"" if echoes is None else (
        system_uuid + bytes((len(echoes),)) + b"".join(echoes))
    return struct.pack(">QdBBIBBB", seq, sent_at, compute, libvirt, guests,
                       host_len, boot_len, path_len) + host + boot_id + \
        path + appended + extra


def request_body(seq=1, sent_at=1000.0, kind=b"restart_compute",
                 host=b"compute-1", reason=b"why", extra=b""):
    return struct.pack(">QdBBH", seq, sent_at, len(kind), len(host),
                       len(reason)) + kind + host + reason + extra


def sign(body, kind=protocol.BEAT, version=2, kid=helpers.KEY.kid,
         secret=helpers.SECRET, magic=protocol.MAGIC, length=None):
    """A datagram of any body and header, signed with the standard
    library's HMAC (not Key.mac)."""
    head = HEADER.pack(magic, version, kind, kid.encode(),
                       len(body) if length is None else length) + body
    return head + hmac.new(secret, head, hashlib.sha256).digest()


def version_1(body):
    """A datagram of version 1: a 2-byte length, a JSON object."""
    payload = json.dumps(body, sort_keys=True,
                         separators=(",", ":")).encode()
    head = struct.pack(">4sH", protocol.MAGIC, len(payload)) + payload
    return head + hmac.new(helpers.SECRET, head, hashlib.sha256).digest()


def dropped(data, ring=RING):
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(data, ring)
    assert e.value.reason in protocol.DECODE_REASONS
    return e.value


def reason(data, ring=RING):
    return dropped(data, ring).reason


GOOD = protocol.encode_beat(helpers.beat(), helpers.KEY)


# -- round trips and the layout -----------------------------------------------

def test_a_beat_round_trips():
    beat = helpers.beat(facts=protocol.Facts(None, False, 0))
    data = protocol.encode_beat(beat, helpers.KEY)
    assert protocol.decode(data, RING) == beat
    assert data.startswith(protocol.MAGIC + b"\x02\x01")
    assert len(data) <= protocol.MAX_SIZE


def test_a_request_round_trips_and_names_its_key():
    req = helpers.request()
    data = protocol.encode_request(req, helpers.OTHER_KEY)
    assert protocol.decode_signed(data, RING) == (req, helpers.OTHER_KEY.kid)


def test_a_beat_is_laid_out_as_documented():
    beat = helpers.beat(seq=7, sent_at=1234.5, path="storage",
                        facts=protocol.Facts(True, None, None))
    assert protocol.encode_beat(beat, helpers.KEY) == sign(beat_body(
        seq=7, sent_at=1234.5, compute=1, libvirt=2, guests=0xFFFFFFFF,
        path=b"storage"))


UUID = "4c4c4544-0042-3510-8052-b4c04f4e3232"


def test_a_system_uuid_is_appended_as_documented():
    beat = helpers.beat(facts=protocol.Facts(True, None, 2, UUID))
    data = protocol.encode_beat(beat, helpers.KEY)
    assert data == sign(beat_body(
        system_uuid=b"\x10" + uuid.UUID(UUID).bytes))
    assert protocol.decode(data, RING).facts.system_uuid == UUID


def test_a_beat_without_the_appended_uuid_decodes_as_unknown():
    # an agent older than the field: its beats end after the path
    beat = protocol.decode(sign(beat_body(echoes=None)), RING)
    assert beat.facts == protocol.Facts(True, None, 2, None)


@pytest.mark.parametrize("text", [
    UUID.upper(), "{%s}" % UUID, "urn:uuid:" + UUID, UUID.replace("-", "")])
def test_a_system_uuid_is_sent_in_canonical_form(text):
    beat = helpers.beat(facts=protocol.Facts(True, True, 1, text))
    assert protocol.decode(protocol.encode_beat(beat, helpers.KEY),
                           RING).facts.system_uuid == UUID


@pytest.mark.parametrize("text", [
    "not-a-uuid", "", "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff"])
def test_the_encoder_refuses_a_bad_system_uuid(text):
    with pytest.raises(ValueError, match="system_uuid"):
        protocol.encode_beat(helpers.beat(facts=protocol.Facts(
            True, True, 1, text)), helpers.KEY)


@pytest.mark.parametrize("extra", [b"\x01\x02", b"\x10" + b"u" * 15,
                                   b"\x11" + b"u" * 17])
def test_a_bad_appended_system_uuid_is_malformed(extra):
    # the UUID field last in the body, as an agent without echoes sends it
    assert reason(sign(beat_body(extra=extra, echoes=None))) == "malformed"


def test_an_all_zero_appended_system_uuid_is_unknown():
    beat = protocol.decode(sign(beat_body(system_uuid=b"\x10" + bytes(16))),
                           RING)
    assert beat.facts.system_uuid is None


def test_a_request_is_laid_out_as_documented():
    req = helpers.request(seq=9, sent_at=99.25, reason="nova-compute down")
    assert protocol.encode_request(req, helpers.KEY) == sign(
        request_body(seq=9, sent_at=99.25, reason=b"nova-compute down"),
        kind=protocol.REQUEST)


def test_a_typical_beat_is_small():
    beat = helpers.beat(host="compute-00001.example.org",
                        boot_id="a2b7c6d1-94e5-4f52-8b1e-1c3f0e6b9d2a")
    assert len(protocol.encode_beat(beat, helpers.KEY)) < 150


def test_the_longest_texts_fit():
    beat = helpers.beat(host="h" * 255, boot_id="b" * 64, path="p" * 32,
                        seq=2 ** 63 - 1, sent_at=1e12)
    data = protocol.encode_beat(beat, helpers.KEY)
    assert protocol.decode(data, RING) == beat
    req = helpers.request(host="h" * 255, reason="r" * 200)
    assert protocol.decode(protocol.encode_request(req, helpers.KEY),
                           RING) == req


def test_names_in_utf8_round_trip():
    beat = helpers.beat(host="calcul-é-1", boot_id="b1")
    assert protocol.decode(protocol.encode_beat(beat, helpers.KEY),
                           RING) == beat


def test_unknown_guests_and_facts_round_trip():
    beat = helpers.beat(facts=protocol.UNKNOWN_FACTS)
    assert protocol.decode(protocol.encode_beat(beat, helpers.KEY),
                           RING).facts == protocol.UNKNOWN_FACTS


@pytest.mark.parametrize("beat", [
    helpers.beat(host=""), helpers.beat(host="h" * 256),
    helpers.beat(host="é" * 128),           # 256 bytes of UTF-8
    helpers.beat(seq=-1), helpers.beat(seq=2 ** 63),
    helpers.beat(seq=1.0), helpers.beat(sent_at=-1.0),
    helpers.beat(sent_at=math.nan), helpers.beat(sent_at="now"),
    helpers.beat(path="has space"), helpers.beat(path="p" * 33),
    helpers.beat(boot_id="b" * 65), helpers.beat(host="a\nb"),
    helpers.beat(facts=protocol.Facts(1, True, 0)),
    helpers.beat(facts=protocol.Facts(True, "yes", 0)),
    helpers.beat(facts=protocol.Facts(True, True, -1)),
    helpers.beat(facts=protocol.Facts(True, True, 10 ** 6 + 1)),
    helpers.beat(facts=protocol.Facts(True, True, 2.0)),
])
def test_the_encoder_refuses_what_the_decoder_would(beat):
    with pytest.raises(ValueError):
        protocol.encode_beat(beat, helpers.KEY)


@pytest.mark.parametrize("req", [
    helpers.request(reason="r" * 201), helpers.request(reason="a\x00b"),
    helpers.request(kind="has space"), helpers.request(host=""),
])
def test_the_encoder_refuses_bad_requests(req):
    with pytest.raises(ValueError):
        protocol.encode_request(req, helpers.KEY)


# -- drops --------------------------------------------------------------------

def test_oversized():
    assert reason(GOOD + b"x" * protocol.MAX_SIZE) == "oversized"
    assert reason(b"\0" * (protocol.MAX_SIZE + 1)) == "oversized"


def test_every_prefix_of_a_datagram_is_truncated():
    for n in range(len(GOOD)):
        assert reason(GOOD[:n]) == "truncated", n


def test_bad_magic():
    assert reason(b"XY") == "bad_magic"
    assert reason(b"NOPE" + GOOD[4:]) == "bad_magic"


def test_bytes_after_the_signature_are_malformed():
    assert reason(GOOD + b"\0") == "malformed"


def test_a_wrong_version_is_named():
    e = dropped(sign(beat_body(), version=3))
    assert e.reason == "unknown_version"
    assert "version 3" in e.detail and "version 2" in e.detail
    assert dropped(GOOD[:6].replace(b"\x02", b"\x07", 1)).reason == \
        "unknown_version"


@pytest.mark.parametrize("size", [100, 300, 600])
def test_a_version_1_datagram_is_named(size):
    """Version 1 (JSON) from an agent not yet upgraded: whatever its
    length (the byte where version 2 has its version is the high byte of
    version 1's length), it is named as such."""
    data = version_1({"type": "beat", "v": 1, "kid": helpers.KEY.kid,
                      "host": "compute-1", "pad": "x" * size})
    e = dropped(data)
    assert e.reason == "unknown_version"
    assert "version 1" in e.detail and "older" in e.detail


def test_unknown_key_and_bad_signatures():
    assert reason(sign(beat_body(), kid="deadbeef")) == "unknown_key"
    assert reason(protocol.encode_beat(helpers.beat(), helpers.OTHER_KEY),
                  keys.Keyring(helpers.KEY)) == "unknown_key"
    # The right key id, another secret: a forgery.
    assert reason(sign(beat_body(), secret=b"x" * 40)) == "bad_signature"
    flipped = bytearray(GOOD)
    flipped[-1] ^= 1
    assert reason(bytes(flipped)) == "bad_signature"
    # A signed body changed on the way (the sequence number here).
    data = protocol.encode_beat(helpers.beat(seq=1), helpers.KEY)
    changed = data[:23] + b"\x09" + data[24:]
    assert protocol.decode(data, RING).seq == 1 and changed != data
    assert reason(changed) == "bad_signature"


def test_the_mac_covers_the_header():
    """Every header byte is signed: a datagram re-labelled as a request,
    or with a length that still fits, does not verify."""
    as_request = GOOD[:5] + bytes([protocol.REQUEST]) + GOOD[6:]
    assert reason(as_request) == "bad_signature"


class CountingRing:
    """A keyring that counts the MACs computed with its keys."""

    def __init__(self):
        self.macs = 0
        outer = self

        class Counting(keys.Key):
            def mac(self, data):
                outer.macs += 1
                return super().mac(data)
        self.key = Counting(helpers.KEY.kid, helpers.KEY.secret)

    def by_wire_id(self, wire_id):
        return self.key if wire_id == self.key.kid.encode() else None

    def why_unknown(self, wire_id):
        return keys.Keyring(self.key).why_unknown(wire_id)


@pytest.mark.parametrize("data", [
    GOOD + b"x" * protocol.MAX_SIZE,                 # oversized
    GOOD[:30],                                       # truncated
    b"NOPE" + GOOD[4:],                              # bad magic
    sign(beat_body(), version=9),                    # unknown version
    sign(beat_body(), kind=7),                       # unknown type
    sign(beat_body(), kid="deadbeef"),               # unknown key
    GOOD + b"\0",                                    # trailing bytes
])
def test_cheap_rejects_compute_no_mac(data):
    ring = CountingRing()
    with pytest.raises(protocol.Dropped):
        protocol.decode(data, ring)
    assert ring.macs == 0


def test_nothing_of_the_body_is_read_before_the_signature():
    """A body that would be malformed, badly signed: bad_signature (one
    MAC, no parsing of unauthenticated bytes)."""
    ring = CountingRing()
    data = sign(beat_body(host=b"", compute=9), secret=b"x" * 40)
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(data, ring)
    assert (e.value.reason, ring.macs) == ("bad_signature", 1)


@pytest.mark.parametrize("body", [
    b"", beat_body()[:24], beat_body(seq=2 ** 63), beat_body(sent_at=-1.0),
    beat_body(sent_at=math.nan), beat_body(sent_at=math.inf),
    beat_body(compute=3), beat_body(libvirt=255),
    beat_body(guests=10 ** 6 + 1), beat_body(host=b""),
    beat_body(host=b"a\x00b"), beat_body(host=b"\xff\xfe"),
    beat_body(boot_id=b""), beat_body(boot_id=b"b" * 65),
    beat_body(path=b""), beat_body(path=b"a b"), beat_body(path=b"p" * 33),
    beat_body(path=b"\xc3\xa9"),
    beat_body(lengths=(9, 2, 10)),          # past the end of the body
    beat_body(lengths=(200, 2, 4)),
])
def test_malformed_beats(body):
    assert reason(sign(body)) == "malformed"


@pytest.mark.parametrize("body", [
    b"", request_body()[:19], request_body(seq=2 ** 63),
    request_body(sent_at=math.nan), request_body(kind=b"rm -rf"),
    request_body(kind=b""), request_body(host=b""),
    request_body(reason=b"r" * 201), request_body(reason=b"a\nb"),
    request_body(reason=b"\xff"),
])
def test_malformed_requests(body):
    assert reason(sign(body, kind=protocol.REQUEST)) == "malformed"


def test_an_unknown_type_is_malformed():
    assert reason(sign(beat_body(), kind=7)) == "malformed"


def test_body_bytes_after_the_known_fields_are_ignored_within_the_version():
    # after the echoes: a watchdog report saying none, then the future
    beat = protocol.decode(sign(beat_body(
        extra=bytes(23) + bytes(2) + b"\x01future")), RING)
    assert beat.watchdog.state == protocol.WATCHDOG_NONE
    assert (beat.host, beat.path, beat.facts) == (
        "compute-1", "mgmt", protocol.Facts(True, None, 2))
    req = protocol.decode(sign(request_body(extra=b"more"),
                               kind=protocol.REQUEST), RING)
    assert (req.kind, req.host, req.reason) == (
        "restart_compute", "compute-1", "why")


def test_not_bytes():
    assert reason(None) == "malformed"
    assert reason(5) == "malformed"
    assert protocol.decode(bytearray(GOOD), RING) == helpers.beat()
    assert protocol.decode(memoryview(GOOD), RING) == helpers.beat()


def test_a_beats_texts_are_checked_once_and_kept_bounded(monkeypatch):
    """The host, boot id, path and facts of a beat are made once per
    distinct bytes and kept; a malformed one is never kept; the store is
    emptied when full."""
    monkeypatch.setattr(protocol, "_IDENTITIES", {})
    monkeypatch.setattr(protocol, "MAX_IDENTITIES", 3)
    first = protocol.decode(sign(beat_body(seq=1)), RING)
    second = protocol.decode(sign(beat_body(seq=2, sent_at=1001.0)), RING)
    assert (second.seq, second.sent_at) == (2, 1001.0)
    assert second.host is first.host and len(protocol._IDENTITIES) == 1
    bad = sign(beat_body(host=b"a\x00b"))
    for _ in range(2):
        assert reason(bad) == "malformed"
    assert len(protocol._IDENTITIES) == 1
    for n in range(5):
        beat = protocol.decode(sign(beat_body(guests=n + 10)), RING)
        assert beat.facts.guests == n + 10
        assert len(protocol._IDENTITIES) <= 3


def test_drop_reasons_cover_decode_and_replay():
    assert set(protocol.DROP_REASONS) == set(protocol.DECODE_REASONS) | {
        "replayed", "stale"}
    assert len(set(protocol.DROP_REASONS)) == len(protocol.DROP_REASONS)


def test_dropped_says_its_reason():
    e = protocol.Dropped("bad_magic", "")
    assert str(e) == "bad_magic"
    assert str(protocol.Dropped("oversized", "2000 bytes")) == \
        "oversized: 2000 bytes"


# -- any bytes ----------------------------------------------------------------

def _decodes_or_drops(data):
    try:
        message = protocol.decode(data, RING)
    except protocol.Dropped as e:
        assert e.reason in protocol.DECODE_REASONS
    else:
        assert isinstance(message, (protocol.Beat, protocol.Request))


@settings(max_examples=800, deadline=None)
@given(st.one_of(
    st.binary(max_size=1100),
    st.binary(max_size=200).map(lambda b: protocol.MAGIC + b"\x02" + b),
    st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)).map(
        lambda t: GOOD[:t[0]] + bytes([t[1]]) + GOOD[t[0] + 1:]),
    st.integers(0, len(GOOD)).map(lambda n: GOOD[:n]),
))
def test_any_bytes_decode_or_drop_never_raise(data):
    _decodes_or_drops(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([protocol.BEAT,
                                                 protocol.REQUEST, 0, 3]))
def test_signed_bodies_of_any_bytes_decode_or_drop(body, kind):
    _decodes_or_drops(sign(body, kind=kind))


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 2 ** 64 - 1), st.floats(), st.integers(0, 255),
       st.integers(0, 255), st.integers(0, 2 ** 32 - 1),
       st.binary(max_size=70), st.binary(max_size=70),
       st.binary(max_size=40), st.binary(max_size=8))
def test_signed_beats_of_any_fields_decode_or_drop(
        seq, sent_at, compute, libvirt, guests, host, boot_id, path, extra):
    _decodes_or_drops(sign(beat_body(seq, sent_at, compute, libvirt, guests,
                                     host, boot_id, path, extra=extra)))


# -- the watchdog report (issue 37) -------------------------------------------

def test_watchdog_report_round_trip_and_older_beats():
    report = protocol.WatchdogReport(protocol.WATCHDOG_ARMED, 30, 12.5,
                                     b"n" * 16)
    beat = helpers.beat()._replace(echoes=(b"e" * 16,), watchdog=report)
    back = protocol.decode(protocol.encode_beat(beat, helpers.KEY), RING)
    assert back.watchdog == report and back.echoes == (b"e" * 16,)
    disarmed = report._replace(state=protocol.WATCHDOG_DISARMED)
    back = protocol.decode(protocol.encode_beat(
        beat._replace(watchdog=disarmed), helpers.KEY), RING)
    assert back.watchdog.state == protocol.WATCHDOG_DISARMED
    # a beat without one (an older agent, or no watchdog) says None
    assert protocol.decode(GOOD, RING).watchdog is None


def test_watchdog_report_carries_peers_and_pills():
    d = protocol.name_digest
    report = protocol.WatchdogReport(
        protocol.WATCHDOG_ARMED, 30, 12.5, b"n" * 16,
        peers=tuple(d("h%d" % i) for i in range(16)), pills=(d("x"),))
    beat = helpers.beat()._replace(watchdog=report)
    data = protocol.encode_beat(beat._replace(host="h" * 255), helpers.KEY)
    assert len(data) <= protocol.MAX_SIZE
    assert protocol.decode(data, RING).watchdog == report
    with pytest.raises(ValueError, match="peers"):
        protocol.encode_beat(beat._replace(watchdog=report._replace(
            peers=report.peers + (d("z"),))), helpers.KEY)


def test_watchdog_report_malformed():
    assert reason(sign(beat_body(extra=b"\x01\x00"))) == "malformed"
    assert reason(sign(beat_body(extra=b"\x07" + bytes(22)))) == \
        "malformed"
    armed = b"\x01" + bytes(22)
    assert reason(sign(beat_body(extra=armed + b"\x02" + bytes(8)))) == \
        "malformed"
    assert reason(sign(beat_body(extra=armed + b"\x11" + bytes(136)))) \
        == "malformed"


def test_watchdog_report_refused_by_the_encoder():
    for bad in (protocol.WatchdogReport(9, 30, 1.0, b"n" * 16),
                protocol.WatchdogReport(1, 70000, 1.0, b"n" * 16),
                protocol.WatchdogReport(1, 30, -1.0, b"n" * 16),
                protocol.WatchdogReport(1, 30, 1.0, b"short")):
        with pytest.raises(ValueError, match="watchdog"):
            protocol.encode_beat(helpers.beat()._replace(watchdog=bad),
                                 helpers.KEY)
