"""The heartbeat datagrams: a host's :class:`Beat` and an engine's
:class:`Request` to an agent, signed with HMAC-SHA256.

Layout of one datagram (at most :data:`MAX_SIZE` bytes)::

    MAGIC (4 bytes, b"IHAB") | body length (2 bytes, big-endian)
    | body (compact JSON object, sorted keys, ASCII)
    | HMAC-SHA256 (32 bytes) over everything before it

The length field tells a datagram cut short ("truncated") from one with
a damaged body ("malformed"). The body carries the protocol version
(``v``), the id of the key that signed it (``kid``, see
:mod:`instanceha.heartbeat.keys`) and ``type`` (``beat`` or
``request``), then the message's fields::

    beat:    host, boot_id, seq, sent_at, path, compute, libvirt, guests
    request: kind, host, seq, sent_at, reason

Within version 1 a receiver ignores body fields it does not know, so a
field can be added without making older engines drop every beat; a
change of meaning is a new version.

:func:`decode` checks, in this order: size, magic, length, JSON, version,
key id, signature (constant-time), then the fields. On any failure it
raises :class:`Dropped` with one of :data:`DECODE_REASONS`, and never
anything else, whatever the bytes. The replay guard
(:mod:`instanceha.heartbeat.replay`) adds :data:`REPLAY_REASONS`;
:data:`DROP_REASONS` is both, the codes a receiver counts drops by.
"""

import dataclasses
import hashlib
import hmac
import json
import math
import re
import struct
from typing import Optional, Union

VERSION = 1
MAGIC = b"IHAB"
MAC_SIZE = 32
_HEADER = struct.Struct(">4sH")
#: The largest datagram sent or accepted. A receiver should read
#: MAX_SIZE + 1 bytes so that a longer datagram shows as oversized.
MAX_SIZE = 1024
#: The smallest possible datagram: header, "{}", MAC.
MIN_SIZE = _HEADER.size + 2 + MAC_SIZE

#: Why :func:`decode` dropped a datagram.
DECODE_REASONS = ("oversized", "truncated", "bad_magic", "unknown_version",
                  "unknown_key", "bad_signature", "malformed")
#: Why :class:`instanceha.heartbeat.replay.ReplayGuard` refused an
#: authentic datagram.
REPLAY_REASONS = ("replayed", "stale")
#: Every reason a received datagram is dropped, for counting.
DROP_REASONS = DECODE_REASONS + REPLAY_REASONS

#: The requests an agent knows (:attr:`Request.kind`).
RESTART_COMPUTE = "restart_compute"
REQUEST_KINDS = (RESTART_COMPUTE,)

MAX_HOST = 255
MAX_BOOT_ID = 64
MAX_PATH = 32
MAX_KIND = 32
MAX_REASON = 200
MAX_SEQ = 2 ** 63 - 1
MAX_GUESTS = 10 ** 6
_PATH_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


class Dropped(Exception):
    """A datagram that is not accepted: ``reason`` is one of
    :data:`DROP_REASONS`, ``detail`` a short text for a log line (it
    never quotes the datagram's bytes)."""

    def __init__(self, reason, detail=""):
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self):
        return "%s: %s" % (self.reason, self.detail) if self.detail \
            else self.reason


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the agent saw on its host; None where it could not tell."""
    compute: Optional[bool]     # nova-compute running
    libvirt: Optional[bool]     # libvirtd (or virtqemud) running
    guests: Optional[int]       # running domains, from libvirt


UNKNOWN_FACTS = Facts(compute=None, libvirt=None, guests=None)


@dataclasses.dataclass(frozen=True)
class Beat:
    """One heartbeat of ``host`` over network ``path``.

    ``boot_id`` is the kernel's boot id (a new one at every boot);
    ``seq`` increases strictly with each beat of a path within a boot,
    also across restarts of the agent (it starts at the milliseconds
    since boot); ``sent_at`` is the sender's clock in seconds since the
    epoch (it may be off: receivers learn each host's offset, see
    :mod:`instanceha.heartbeat.replay`)."""
    host: str
    boot_id: str
    seq: int
    sent_at: float
    path: str
    facts: Facts
    version: int = VERSION


@dataclasses.dataclass(frozen=True)
class Request:
    """An engine's signed request to the agent of ``host`` (soft fencing):
    ``kind`` is one of :data:`REQUEST_KINDS`. ``seq`` must increase
    across every engine that may send to the host (the engines' replicas
    share no counter: use the send time in milliseconds,
    :func:`request_seq`); ``sent_at`` is the engine's clock, which the
    agent compares with its own (requests are not accepted from an
    engine whose clock is off by more than the agent's replay window)."""
    kind: str
    host: str
    seq: int
    sent_at: float
    reason: str


Message = Union[Beat, Request]


def request_seq(now):
    """A request sequence number from the sender's clock ``now`` (ms)."""
    return int(now * 1000)


def encode_beat(beat: Beat, key) -> bytes:
    """The datagram of ``beat`` signed with ``key``
    (:class:`instanceha.heartbeat.keys.Key`). Raises ValueError for a
    beat that :func:`decode` would refuse (an empty host, ...)."""
    return _encode("beat", {
        "host": beat.host, "boot_id": beat.boot_id, "seq": beat.seq,
        "sent_at": beat.sent_at, "path": beat.path,
        "compute": beat.facts.compute, "libvirt": beat.facts.libvirt,
        "guests": beat.facts.guests}, _beat, key)


def encode_request(req: Request, key) -> bytes:
    """The datagram of ``req`` signed with ``key``. Raises ValueError for
    a request that :func:`decode` would refuse."""
    return _encode("request", {
        "kind": req.kind, "host": req.host, "seq": req.seq,
        "sent_at": req.sent_at, "reason": req.reason}, _request, key)


def _encode(kind, fields, check, key):
    """The signed datagram of a ``kind`` message of ``fields``, checked
    first by ``check`` (the decoder's own field checks)."""
    body = dict(fields, type=kind, v=VERSION, kid=key.kid)
    try:
        check(body)
    except Dropped as e:
        raise ValueError("cannot encode %s: %s" % (kind, e.detail))
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"),
                         allow_nan=False).encode("ascii")
    head = _HEADER.pack(MAGIC, len(payload)) + payload
    data = head + hmac.new(key.secret, head, hashlib.sha256).digest()
    if len(data) > MAX_SIZE:
        raise ValueError("datagram of %d bytes exceeds %d"
                         % (len(data), MAX_SIZE))
    return data


def decode(data: bytes, keyring) -> Message:
    """The :class:`Beat` or :class:`Request` in ``data``, verified with
    ``keyring`` (:class:`instanceha.heartbeat.keys.Keyring`). Raises
    :class:`Dropped` (and nothing else) for anything else."""
    return decode_signed(data, keyring)[0]


def decode_signed(data: bytes, keyring):
    """(message, kid): :func:`decode` plus the id of the key that signed
    it, for a receiver that reports who still signs with the previous
    key during a rotation."""
    try:
        data = bytes(data)
    except (TypeError, ValueError):
        raise Dropped("malformed", "not bytes")
    if len(data) > MAX_SIZE:
        raise Dropped("oversized", "%d bytes" % len(data))
    if data[:len(MAGIC)] != MAGIC[:len(data)]:
        raise Dropped("bad_magic")
    if len(data) < MIN_SIZE:
        raise Dropped("truncated", "%d bytes" % len(data))
    _, length = _HEADER.unpack_from(data)
    end = _HEADER.size + length
    if len(data) < end + MAC_SIZE:
        raise Dropped("truncated", "%d bytes, %d expected"
                      % (len(data), end + MAC_SIZE))
    if len(data) > end + MAC_SIZE:
        raise Dropped("malformed", "%d bytes after the signature"
                      % (len(data) - end - MAC_SIZE))
    body = _parse(data[_HEADER.size:end])
    version = body.get("v")
    if not _is_int(version):
        raise Dropped("malformed", "no version")
    if version != VERSION:
        raise Dropped("unknown_version", "version %d" % version)
    kid = body.get("kid")
    if not isinstance(kid, str):
        raise Dropped("malformed", "no key id")
    key = keyring.get(kid)
    if key is None:
        raise Dropped("unknown_key", "key id %.16r" % kid)
    mac = hmac.new(key.secret, data[:end], hashlib.sha256).digest()
    if not hmac.compare_digest(mac, data[end:]):
        raise Dropped("bad_signature", "key id %s" % kid)
    kind = body.get("type")
    if kind == "beat":
        return _beat(body), kid
    if kind == "request":
        return _request(body), kid
    raise Dropped("malformed", "unknown type")


def _reject_constant(name):
    raise ValueError("not a number: %s" % name)


#: One decoder for every datagram (json.loads with an option builds a new
#: one per call: a few microseconds of each of thousands of beats a second).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse(payload):
    try:
        body = _DECODER.decode(payload.decode("ascii"))
    except (ValueError, RecursionError) as e:
        # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        raise Dropped("malformed", "body is not JSON (%s)"
                      % type(e).__name__)
    if not isinstance(body, dict):
        raise Dropped("malformed", "body is not an object")
    return body


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _text(body, name, limit, pattern=None):
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise Dropped("malformed", "%s: a text of 1 to %d characters "
                      "expected" % (name, limit))
    if not value.isprintable() or (pattern and not pattern.match(value)):
        raise Dropped("malformed", "%s: characters not allowed" % name)
    return value


def _seq(body):
    value = body.get("seq")
    if not _is_int(value) or not 0 <= value <= MAX_SEQ:
        raise Dropped("malformed", "seq: an integer 0..2**63-1 expected")
    return value


def _time(body):
    value = body.get("sent_at")
    try:
        value = float(value) if _is_int(value) or isinstance(
            value, float) else None
    except OverflowError:
        value = None
    if value is None or not math.isfinite(value) or value < 0:
        raise Dropped("malformed", "sent_at: a time expected")
    return value


def _flag(body, name):
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise Dropped("malformed", "%s: true, false or null expected"
                      % name)
    return value


def _beat(body):
    guests = body.get("guests")
    if guests is not None and (not _is_int(guests)
                               or not 0 <= guests <= MAX_GUESTS):
        raise Dropped("malformed", "guests: a count or null expected")
    return Beat(host=_text(body, "host", MAX_HOST),
                boot_id=_text(body, "boot_id", MAX_BOOT_ID),
                seq=_seq(body), sent_at=_time(body),
                path=_text(body, "path", MAX_PATH, _PATH_NAME),
                facts=Facts(compute=_flag(body, "compute"),
                            libvirt=_flag(body, "libvirt"),
                            guests=guests),
                version=VERSION)


def _request(body):
    reason = body.get("reason")
    if not isinstance(reason, str) or len(reason) > MAX_REASON or \
            not reason.isprintable():
        raise Dropped("malformed", "reason: a text of up to %d printable "
                      "characters expected" % MAX_REASON)
    return Request(kind=_text(body, "kind", MAX_KIND, _PATH_NAME),
                   host=_text(body, "host", MAX_HOST),
                   seq=_seq(body), sent_at=_time(body),
                   reason=reason)
