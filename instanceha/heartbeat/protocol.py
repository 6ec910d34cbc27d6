"""The heartbeat datagrams: a host's :class:`Beat` and an engine's
:class:`Request` to an agent, signed with HMAC-SHA256.

Layout of one datagram (at most :data:`MAX_SIZE` bytes, integers
big-endian)::

    offset  size
     0       4   magic, b"IHAB"
     4       1   protocol version: 2
     5       1   type: 1 beat, 2 request, 3 guest event (read by
                 :mod:`instanceha.heartbeat.guest` only), 4 challenge
                 (read by :mod:`instanceha.heartbeat.challenge` only),
                 5 probe, 6 answer, 7 relay (read by
                 :mod:`instanceha.heartbeat.peer` only)
     6       8   id of the key that signed it: a shared key's 8 hex
                 digits (ASCII), or a host key's 8 bytes, the first
                 >= 0x80 (see :mod:`instanceha.heartbeat.keys`)
    14       2   body length
    16       n   body (below)
    16 + n  32   HMAC-SHA256 over bytes 0 to 16 + n (all before it)

The body of a beat::

     8  seq         unsigned
     8  sent_at     IEEE 754 double, seconds since the epoch
     1  compute     0 stopped, 1 running, 2 unknown
     1  libvirt     0 stopped, 1 running, 2 unknown
     4  guests      unsigned; 0xFFFFFFFF unknown
     1  host length, 1 boot_id length, 1 path length
        host (UTF-8), boot_id (UTF-8), path (ASCII)
    appended (optional, in this order: a beat may end before either,
    an older agent's):
     1  system UUID length, 0 (unknown) or 16
        system UUID, 16 bytes in RFC 4122 order (uuid.UUID.bytes of the
        text the host's /sys/class/dmi/id/product_uuid shows)
     1  echoes      count, 0 to MAX_ECHOES
        that many nonces of 16 bytes: the newest challenge of each
        engine the agent heard (:mod:`instanceha.heartbeat.challenge`)
    appended after the echoes (optional: an agent without a watchdog,
    or an older one, ends the beat before it):
     1  watchdog state: 0 none (not armed yet), 1 armed, 2 disarmed
        (an orderly stop)
     2  watchdog timeout, seconds, unsigned
     4  isolation timeout, milliseconds, unsigned
    16  the agent's nonce: an engine's answer echoes it, which proves
        the answer fresh to the agent (:mod:`instanceha.agent.selffence`)
     1  peers, 0 to MAX_PEER_DIGESTS, then that many name digests
        (:func:`name_digest`) of the agent's configured peers
     1  pills, 0 to MAX_PILL_DIGESTS, then that many digests
        (:func:`pill_digest`) of the poison pills this agent holds to
        relay
        (both optional: a report may end before them)
     2  hearing window, milliseconds, unsigned (optional, after the
        pills: an older agent, or one not probing peers yet, ends the
        report before it), then ceil(peers / 8) bytes: bit i (the
        low-order bit of byte i // 8 first) set when the agent heard
        peer i (of the peers' digests, in order) within that window: a
        fresh signed answer to a probe it sent no longer ago than the
        window (:mod:`instanceha.agent.peers`). The engines count these
        as the peers' word on a silent host
        (:mod:`instanceha.sources.heartbeat_table`).

The body of a request::

     8  seq, 8 sent_at (as a beat's)
     1  kind length, 1 host length, 2 reason length
        kind (ASCII), host (UTF-8), reason (UTF-8)

A request goes from an engine to an agent (``restart_compute``), or
from an agent to the engines before an orderly shutdown of its host
(``drain_host``, answered by the acting engine with ``drain_status``:
see :data:`DRAIN_HOST`).

Within version 2 a receiver ignores body bytes after the fields it
knows, so a field can be appended without making older engines drop
every beat; any other change is a new version. Version 1 (a JSON body
after a 2-byte length) is not read: its datagrams are dropped as
``unknown_version``, with a detail naming them.

:func:`decode` checks, in this order: size, magic, version, length,
type, key id, signature (constant-time), then the fields, then that a
host key signed for the host the message names. Nothing of the body is
read before the signature is verified: the key is found from the
header's key id alone (the engine holds each host's derived key by its
id, see :class:`instanceha.heartbeat.keys.HostKeyring`), so a forged or
damaged datagram costs a few comparisons, one dict lookup and at most one
HMAC. An authentic datagram signed with host A's key that names host B
is dropped as ``wrong_host``: root on A speaks for A alone. (A message
type without a ``host`` field is bound to its signer by its receiver.)
A datagram naming the shared key's id while the engine refuses it
(``[agent] accept_shared_key = false``) is dropped as ``shared_key``,
with no HMAC. On any failure it
raises :class:`Dropped` with one of :data:`DECODE_REASONS`, and never
anything else, whatever the bytes. The replay guard
(:mod:`instanceha.heartbeat.replay`) adds :data:`REPLAY_REASONS`;
:data:`DROP_REASONS` is both, the codes a receiver counts drops by.
"""

import functools
import hashlib
import hmac
import math
import re
import struct
import uuid
from typing import Dict, NamedTuple, Optional, Tuple, Union

from instanceha.util import system_uuid as uuid_text

VERSION = 2
MAGIC = b"IHAB"
MAC_SIZE = 32
BEAT = 1
REQUEST = 2
GUEST_EVENT = 3
CHALLENGE = 4
_NO_BODIES: Dict[int, object] = {}
_HEADER = struct.Struct(">4sBB8sH")
_BEAT = struct.Struct(">QdBBIBBB")
#: A beat's echoes: the count, then that many nonces.
NONCE_SIZE = 16
MAX_ECHOES = 8
_NO_ECHOES: tuple = ()
_REQUEST = struct.Struct(">QdBBH")
_WATCHDOG = struct.Struct(">BHI%ds" % NONCE_SIZE)
#: :attr:`WatchdogReport.state` values.
WATCHDOG_NONE = 0
WATCHDOG_ARMED = 1
WATCHDOG_DISARMED = 2
_WATCHDOG_STATES = (WATCHDOG_NONE, WATCHDOG_ARMED, WATCHDOG_DISARMED)
MAX_WATCHDOG_TIMEOUT = 0xFFFF
DIGEST_SIZE = 8
MAX_PEER_DIGESTS = 16
MAX_PILL_DIGESTS = 8
MAX_ISOLATION_MS = 0xFFFFFFFF
_HEARING_WINDOW = struct.Struct(">H")
MAX_HEARING_WINDOW_MS = 0xFFFF
_SEQ_TIME = struct.Struct(">Qd")
#: The largest datagram sent or accepted. A receiver should read
#: MAX_SIZE + 1 bytes so that a longer datagram shows as oversized.
MAX_SIZE = 1024
#: The smallest possible datagram: header, no body, MAC.
MIN_SIZE = _HEADER.size + MAC_SIZE

#: Why :func:`decode` dropped a datagram.
DECODE_REASONS = ("oversized", "truncated", "bad_magic", "unknown_version",
                  "unknown_key", "shared_key", "bad_signature", "malformed",
                  "wrong_host")
#: Why :class:`instanceha.heartbeat.replay.ReplayGuard` refused an
#: authentic datagram.
REPLAY_REASONS = ("replayed", "stale")
#: Every reason a received datagram is dropped, for counting.
DROP_REASONS = DECODE_REASONS + REPLAY_REASONS

#: The requests an agent knows (:attr:`Request.kind`).
RESTART_COMPUTE = "restart_compute"
REQUEST_KINDS = (RESTART_COMPUTE,)
#: An agent's request to the engines before an orderly shutdown of its
#: host (issue 38): drain me. Sent over a beat path, signed with the
#: host's key; its ``seq`` is the agent's clock in milliseconds
#: (:func:`request_seq`), its ``reason`` says what shuts down.
DRAIN_HOST = "drain_host"
#: An acting engine's answer to :data:`DRAIN_HOST`, sent back to the
#: address the request came from, signed with the key that signed it:
#: its ``seq`` is the request's (an answer the agent did not ask for is
#: dropped), its ``reason`` starts with one of :data:`DRAIN_STATUSES`.
DRAIN_STATUS = "drain_status"
DRAINED = "drained"
DRAINING = "draining"
DRAIN_REFUSED = "refused"
DRAIN_STATUSES = (DRAINED, DRAINING, DRAIN_REFUSED)

#: Limits, in bytes of UTF-8 (host, boot id) or ASCII (path, kind), and
#: in characters (reason).
MAX_HOST = 255
MAX_BOOT_ID = 64
MAX_PATH = 32
MAX_KIND = 32
MAX_REASON = 200
MAX_SEQ = 2 ** 63 - 1
MAX_GUESTS = 10 ** 6
_NO_GUESTS = 0xFFFFFFFF
_PATH_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")
_PATH_BYTES = re.compile(rb"[A-Za-z0-9_.-]+\Z")
#: Wire value -> fact, and back.
_FLAGS = (False, True, None)
_FLAG_BYTE = {False: 0, True: 1, None: 2}


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


class Facts(NamedTuple):
    """What the agent saw on its host; None where it could not tell."""
    compute: Optional[bool]     # nova-compute running
    libvirt: Optional[bool]     # libvirtd (or virtqemud) running
    guests: Optional[int]       # running domains, from libvirt
    #: the machine's system UUID (DMI product_uuid), canonical text
    #: (:func:`canonical_uuid`); binds the host to its BMC's machine
    system_uuid: Optional[str] = None


UNKNOWN_FACTS = Facts(compute=None, libvirt=None, guests=None)
_UUID_SIZE = 16


#: ``text`` as a canonical UUID, or None (placeholders too).
canonical_uuid = uuid_text.canonical


class WatchdogReport(NamedTuple):
    """What a beat says of its agent's watchdog: ``state`` (armed,
    disarmed), its ``timeout`` and the agent's ``isolation_timeout``
    (seconds), and ``nonce``, the agent's current nonce (16 bytes)."""
    state: int
    timeout: int
    isolation_timeout: float
    nonce: bytes
    #: :func:`name_digest` of each configured peer
    peers: Tuple[bytes, ...] = ()
    #: :func:`pill_digest` of each pill the agent holds to relay
    pills: Tuple[bytes, ...] = ()
    #: whether the agent heard each of ``peers`` (same order) within
    #: ``hearing_window`` seconds; None: no hearing report (an older
    #: agent, or none probing yet)
    hearing: Optional[Tuple[bool, ...]] = None
    hearing_window: float = 0.0


def name_digest(host: str) -> bytes:
    """A host name's 8-byte digest, as watchdog reports carry it."""
    return hashlib.sha256(host.encode("utf-8")).digest()[:DIGEST_SIZE]


def pill_digest(pill: bytes) -> bytes:
    """A poison pill's 8-byte digest (its datagram's bytes), as watchdog
    reports carry it: the engine knows which pill a peer holds."""
    return hashlib.sha256(b"pill:" + bytes(pill)).digest()[:DIGEST_SIZE]


class Beat(NamedTuple):
    """One heartbeat of ``host`` over network ``path``.

    ``boot_id`` is the kernel's boot id (a new one at every boot);
    ``seq`` increases strictly with each beat of a path within a boot,
    also across restarts of the agent (it starts at the milliseconds
    since boot); ``sent_at`` is the sender's clock in seconds since the
    epoch (it may be off: receivers learn each host's offset, see
    :mod:`instanceha.heartbeat.replay`).

    A named tuple, not a dataclass: the engine makes thousands a
    second, and a tuple is made several times faster."""
    host: str
    boot_id: str
    seq: int
    sent_at: float
    path: str
    facts: Facts
    version: int = VERSION
    #: The challenge nonces this beat echoes (newest first; none from an
    #: agent that predates challenges): see
    #: :mod:`instanceha.heartbeat.challenge`.
    echoes: Tuple[bytes, ...] = ()
    #: The agent's watchdog, None from an agent without one.
    watchdog: Optional[WatchdogReport] = None


class Request(NamedTuple):
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


# -- encoding -----------------------------------------------------------------

def encode_beat(beat: Beat, key) -> bytes:
    """The datagram of ``beat`` signed with ``key``
    (:class:`instanceha.heartbeat.keys.Key`). Raises ValueError for a
    beat that :func:`decode` would refuse (an empty host, ...)."""
    facts = beat.facts
    flags = [_FLAG_BYTE.get(value) if value is None or isinstance(
        value, bool) else None for value in (facts.compute, facts.libvirt)]
    if None in flags:
        raise ValueError("cannot encode beat: compute, libvirt: True, "
                         "False or None expected")
    guests = facts.guests
    if guests is not None and (not _is_int(guests)
                               or not 0 <= guests <= MAX_GUESTS):
        raise ValueError("cannot encode beat: guests: a count or None "
                         "expected")
    host, boot_id, path = _encoded_texts(
        "beat", (("host", beat.host, MAX_HOST, None),
                 ("boot_id", beat.boot_id, MAX_BOOT_ID, None),
                 ("path", beat.path, MAX_PATH, _PATH_NAME)))
    uuid_bytes = b""
    if facts.system_uuid is not None:
        found = canonical_uuid(facts.system_uuid)
        if found is None:
            raise ValueError("cannot encode beat: system_uuid: a UUID or "
                             "None expected")
        uuid_bytes = uuid.UUID(found).bytes
    echoes = beat.echoes
    if len(echoes) > MAX_ECHOES or any(
            type(e) is not bytes or len(e) != NONCE_SIZE for e in echoes):
        raise ValueError("cannot encode beat: echoes: up to %d nonces of "
                         "%d bytes expected" % (MAX_ECHOES, NONCE_SIZE))
    body = _BEAT.pack(_checked_seq("beat", beat.seq),
                      _checked_time("beat", beat.sent_at), flags[0],
                      flags[1], _NO_GUESTS if guests is None else guests,
                      len(host), len(boot_id), len(path))
    return _frame(BEAT, body + host + boot_id + path
                  + bytes((len(uuid_bytes),)) + uuid_bytes
                  + bytes((len(echoes),)) + b"".join(echoes)
                  + _watchdog_bytes(beat.watchdog), key)


def _watchdog_bytes(report):
    if report is None:
        return b""
    ms = report.isolation_timeout * 1000 if isinstance(
        report.isolation_timeout, (int, float)) else -1
    if report.state not in _WATCHDOG_STATES or not _is_int(report.timeout) \
            or not 0 <= report.timeout <= MAX_WATCHDOG_TIMEOUT \
            or not 0 <= ms <= MAX_ISOLATION_MS \
            or type(report.nonce) is not bytes \
            or len(report.nonce) != NONCE_SIZE:
        raise ValueError("cannot encode beat: watchdog: a state, timeouts "
                         "and a nonce of %d bytes expected" % NONCE_SIZE)
    digests = b""
    for name, items, limit in (("peers", report.peers, MAX_PEER_DIGESTS),
                               ("pills", report.pills, MAX_PILL_DIGESTS)):
        if len(items) > limit or any(type(d) is not bytes or len(d) !=
                                     DIGEST_SIZE for d in items):
            raise ValueError("cannot encode beat: watchdog %s: up to %d "
                             "digests of %d bytes expected"
                             % (name, limit, DIGEST_SIZE))
        digests += bytes((len(items),)) + b"".join(items)
    return _WATCHDOG.pack(report.state, report.timeout, int(round(ms)),
                          report.nonce) + digests + _hearing_bytes(report)


def _hearing_bytes(report):
    hearing = report.hearing
    if hearing is None:
        return b""
    window = report.hearing_window * 1000 if isinstance(
        report.hearing_window, (int, float)) else -1
    if len(hearing) != len(report.peers) or not 0 < window <= \
            MAX_HEARING_WINDOW_MS:
        raise ValueError("cannot encode beat: watchdog hearing: one flag "
                         "per peer and a window of up to %.3f s expected"
                         % (MAX_HEARING_WINDOW_MS / 1000.0))
    bits = bytearray((len(hearing) + 7) // 8)
    for i, heard in enumerate(hearing):
        if heard:
            bits[i // 8] |= 1 << (i % 8)
    return _HEARING_WINDOW.pack(int(round(window))) + bytes(bits)


def encode_request(req: Request, key) -> bytes:
    """The datagram of ``req`` signed with ``key``. Raises ValueError for
    a request that :func:`decode` would refuse."""
    if not isinstance(req.reason, str) or len(req.reason) > MAX_REASON \
            or not req.reason.isprintable():
        raise ValueError("cannot encode request: reason: up to %d "
                         "printable characters expected" % MAX_REASON)
    kind, host = _encoded_texts(
        "request", (("kind", req.kind, MAX_KIND, _PATH_NAME),
                    ("host", req.host, MAX_HOST, None)))
    reason = req.reason.encode("utf-8")
    body = _REQUEST.pack(_checked_seq("request", req.seq),
                         _checked_time("request", req.sent_at), len(kind),
                         len(host), len(reason))
    return _frame(REQUEST, body + kind + host + reason, key)


def _encoded_texts(what, fields):
    """The UTF-8 bytes of each (name, text, limit, pattern) of
    ``fields``, checked as the decoder checks them."""
    out = []
    for name, text, limit, pattern in fields:
        data = text.encode("utf-8") if isinstance(text, str) else b""
        if not data or len(data) > limit:
            raise ValueError("cannot encode %s: %s: a text of 1 to %d "
                             "bytes expected" % (what, name, limit))
        if not text.isprintable() or (pattern and not pattern.match(text)):
            raise ValueError("cannot encode %s: %s: characters not "
                             "allowed" % (what, name))
        out.append(data)
    return out


def _checked_seq(what, seq):
    if not _is_int(seq) or not 0 <= seq <= MAX_SEQ:
        raise ValueError("cannot encode %s: seq: an integer 0..2**63-1 "
                         "expected" % what)
    return seq


def _checked_time(what, sent_at):
    try:
        value = float(sent_at) if _is_int(sent_at) or isinstance(
            sent_at, float) else -1.0
    except OverflowError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValueError("cannot encode %s: sent_at: a time expected"
                         % what)
    return value


def _frame(kind, body, key):
    """Header, ``body``, and the signature of both with ``key``."""
    head = _HEADER.pack(MAGIC, VERSION, kind, key.wire_id,
                        len(body)) + body
    if len(head) + MAC_SIZE > MAX_SIZE:
        raise ValueError("datagram of %d bytes exceeds %d"
                         % (len(head) + MAC_SIZE, MAX_SIZE))
    return head + key.mac(head)


# -- decoding -----------------------------------------------------------------

def decode(data: bytes, keyring) -> Message:
    """The :class:`Beat` or :class:`Request` in ``data``, verified with
    ``keyring`` (:class:`instanceha.heartbeat.keys.Keyring`). Raises
    :class:`Dropped` (and nothing else) for anything else."""
    return decode_signed(data, keyring)[0]


def decode_signed(data: bytes, keyring, bodies=None):
    """(message, kid): :func:`decode` plus the id of the key that signed
    it, for a receiver that reports who still signs with the previous
    key during a rotation. ``bodies``: {type: reader(data, end)} of the
    further types the receiver reads (the guest event,
    :func:`instanceha.heartbeat.guest.decode_signed`); others are
    malformed."""
    if bodies is None:
        bodies = _NO_BODIES
    if type(data) is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise Dropped("malformed", "not bytes")
        data = bytes(data)
    size = len(data)
    if size > MAX_SIZE:
        raise Dropped("oversized", "%d bytes" % size)
    if size < MIN_SIZE:
        if data[:4] != MAGIC[:size]:
            raise Dropped("bad_magic")
        if size > 4 and (data[4] != VERSION or data[6:7] == b"{"):
            raise _unknown_version(data)
        raise Dropped("truncated", "%d bytes" % size)
    magic, version, kind, wire_kid, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise Dropped("bad_magic")
    if version != VERSION or data[6] == 0x7B:     # "{": version 1
        raise _unknown_version(data)
    end = _HEADER.size + length
    if size != end + MAC_SIZE:
        if size < end + MAC_SIZE:
            raise Dropped("truncated", "%d bytes, %d expected"
                          % (size, end + MAC_SIZE))
        raise Dropped("malformed", "%d bytes after the signature"
                      % (size - end - MAC_SIZE))
    if kind != BEAT and kind != REQUEST and kind not in bodies:
        raise Dropped("malformed", "unknown type %d" % kind)
    key = keyring.by_wire_id(wire_kid)
    if key is None:
        raise Dropped(*keyring.why_unknown(wire_kid))
    if not hmac.compare_digest(key.mac(data[:end]), data[end:]):
        raise Dropped("bad_signature", "key id %s" % key.kid)
    if kind == BEAT:
        message = _beat(data, end)
    elif kind == REQUEST:
        message = _request(data, end)
    else:
        message = bodies[kind](data, end)
    bound = key.host
    if bound is not None and getattr(message, "host", bound) != bound:
        raise Dropped("wrong_host", "signed with host %.64r's own key, "
                      "names host %.64r" % (bound, message.host))
    return message, key.kid


def _unknown_version(data):
    """The drop of a datagram of another version, saying which."""
    if data[6:7] == b"{":
        # Version 1: a 2-byte length, then a JSON object.
        return Dropped("unknown_version",
                       "version 1 (a JSON body): its sender runs an older "
                       "instanceha; this one reads version %d only"
                       % VERSION)
    return Dropped("unknown_version", "version %d: this instanceha reads "
                   "version %d only" % (data[4], VERSION))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


#: Where a beat's fields other than seq and sent_at start in the
#: datagram: the facts, the lengths and texts that follow them.
_IDENTITY_AT = _HEADER.size + _SEQ_TIME.size
#: Where a beat's texts start (after their three lengths).
_TEXTS_AT = _HEADER.size + _BEAT.size
#: Those fields (host, boot_id, path, Facts) by their bytes (up to the
#: system UUID's end: not the echoes, which change at every challenge). A host sends
#: the same ones every second, so they are checked and made once per
#: host and path, not at every beat. Filled with the bytes of verified
#: datagrams only; emptied when it holds MAX_IDENTITIES.
_IDENTITIES: Dict[bytes, tuple] = {}
MAX_IDENTITIES = 32768
_new_beat = functools.partial(tuple.__new__, Beat)


def _beat(data, end):
    """The beat of a verified datagram whose body ends at ``end``."""
    if end - _HEADER.size < _BEAT.size:
        raise Dropped("malformed", "a beat's body is at least %d bytes"
                      % _BEAT.size)
    seq, sent_at = _seq_and_time(data)
    texts_end = (_TEXTS_AT + data[_TEXTS_AT - 3] + data[_TEXTS_AT - 2]
                 + data[_TEXTS_AT - 1])
    if texts_end > end:
        raise Dropped("malformed", "texts longer than the body")
    # The system UUID (a length byte, then its bytes) is part of the
    # identity; the echoes after it change at every challenge.
    uuid_end = texts_end + 1 + data[texts_end] if texts_end < end \
        else texts_end
    if uuid_end > end:
        raise Dropped("malformed", "system_uuid: 0 or %d bytes expected"
                      % _UUID_SIZE)
    rest = data[_IDENTITY_AT:uuid_end]
    identity = _IDENTITIES.get(rest)
    if identity is None:
        identity = _identity(data, uuid_end)
        if len(_IDENTITIES) >= MAX_IDENTITIES:
            _IDENTITIES.clear()
        _IDENTITIES[rest] = identity
    host, boot_id, path, facts = identity
    if uuid_end >= end:
        return _new_beat((host, boot_id, seq, sent_at, path, facts,
                          VERSION, _NO_ECHOES, None))
    echoes = _echoes(data, uuid_end, end)
    watchdog_at = uuid_end + 1 + len(echoes) * NONCE_SIZE
    report = _watchdog(data, watchdog_at, end) if watchdog_at < end \
        else None
    return _new_beat((host, boot_id, seq, sent_at, path, facts, VERSION,
                      echoes, report))


def _watchdog(data, at, end):
    """The watchdog report of a beat from byte ``at``; bytes after it
    are left to later appended fields."""
    if at + _WATCHDOG.size > end:
        raise Dropped("malformed", "watchdog: %d bytes expected"
                      % _WATCHDOG.size)
    state, timeout, ms, nonce = _WATCHDOG.unpack_from(data, at)
    if state not in _WATCHDOG_STATES:
        raise Dropped("malformed", "watchdog: unknown state %d" % state)
    at += _WATCHDOG.size
    lists = []
    for limit in (MAX_PEER_DIGESTS, MAX_PILL_DIGESTS):
        if at >= end:
            lists.append(())
            continue
        count = data[at]
        stop = at + 1 + count * DIGEST_SIZE
        if count > limit or stop > end:
            raise Dropped("malformed", "watchdog: up to %d digests "
                          "expected" % limit)
        lists.append(tuple(bytes(data[i:i + DIGEST_SIZE])
                           for i in range(at + 1, stop, DIGEST_SIZE)))
        at = stop
    hearing, window = _hearing(data, at, end, len(lists[0]))
    return WatchdogReport(state, timeout, ms / 1000.0, nonce, *lists,
                          hearing=hearing, hearing_window=window)


def _hearing(data, at, end, peers):
    """(flags, window) of a report's hearing field at byte ``at`` (after
    the pills), (None, 0.0) when the report ends before it. Bytes after
    it are left to later appended fields."""
    if at >= end:
        return None, 0.0
    size = (peers + 7) // 8
    if at + _HEARING_WINDOW.size + size > end:
        raise Dropped("malformed", "watchdog hearing: %d bytes expected"
                      % (_HEARING_WINDOW.size + size))
    (ms,) = _HEARING_WINDOW.unpack_from(data, at)
    if ms == 0:
        raise Dropped("malformed", "watchdog hearing: a window expected")
    at += _HEARING_WINDOW.size
    flags = tuple(bool(data[at + i // 8] & (1 << (i % 8)))
                  for i in range(peers))
    return flags, ms / 1000.0


def _echoes(data, at, end):
    """The nonces a beat echoes, from its byte ``at`` (the count) on."""
    count = data[at]
    if count > MAX_ECHOES or at + 1 + count * NONCE_SIZE > end:
        raise Dropped("malformed", "echoes: up to %d nonces of %d bytes "
                      "expected" % (MAX_ECHOES, NONCE_SIZE))
    if count == 1:
        return (data[at + 1:at + 1 + NONCE_SIZE],)
    return tuple(data[i:i + NONCE_SIZE]
                 for i in range(at + 1, at + 1 + count * NONCE_SIZE,
                                NONCE_SIZE))


def _identity(data, end):
    """(host, boot_id, path, Facts) of a beat, checked."""
    (_, _, compute, libvirt, guests, host_len, boot_len,
     path_len) = _BEAT.unpack_from(data, _HEADER.size)
    start, host_end, boot_end, path_end = _offsets(
        _HEADER.size + _BEAT.size, (host_len, boot_len, path_len), end)
    if compute > 2 or libvirt > 2:
        raise Dropped("malformed", "compute, libvirt: 0, 1 or 2 expected")
    if guests == _NO_GUESTS:
        guests = None
    elif guests > MAX_GUESTS:
        raise Dropped("malformed", "guests: a count or unknown expected")
    host = _text(data, start, host_end, "host", MAX_HOST)
    boot_id = _text(data, host_end, boot_end, "boot_id", MAX_BOOT_ID)
    path = data[boot_end:path_end]
    if len(path) > MAX_PATH or not _PATH_BYTES.match(path):
        raise Dropped("malformed", "path: 1 to %d letters, digits, _.- "
                      "expected" % MAX_PATH)
    return (host, boot_id, path.decode("ascii"),
            Facts(_FLAGS[compute], _FLAGS[libvirt], guests,
                  _system_uuid(data, path_end, end)))


def _system_uuid(data, start, end):
    """The appended system UUID of a beat (at ``start``), None when the
    beat ends before it (an older agent) or says unknown. Bytes after it
    are left to later appended fields."""
    if start >= end:
        return None
    size = data[start]
    if size == 0:
        return None
    if size != _UUID_SIZE or start + 1 + size > end:
        raise Dropped("malformed", "system_uuid: 0 or %d bytes expected"
                      % _UUID_SIZE)
    return canonical_uuid(uuid.UUID(bytes=bytes(data[start + 1:
                                                     start + 1 + size])))


def _request(data, end):
    """The request of a verified datagram whose body ends at ``end``."""
    if end - _HEADER.size < _REQUEST.size:
        raise Dropped("malformed", "a request's body is at least %d bytes"
                      % _REQUEST.size)
    _, _, kind_len, host_len, reason_len = _REQUEST.unpack_from(
        data, _HEADER.size)
    start, kind_end, host_end, reason_end = _offsets(
        _HEADER.size + _REQUEST.size, (kind_len, host_len, reason_len), end)
    seq, sent_at = _seq_and_time(data)
    kind = data[start:kind_end]
    if len(kind) > MAX_KIND or not _PATH_BYTES.match(kind):
        raise Dropped("malformed", "kind: 1 to %d letters, digits, _.- "
                      "expected" % MAX_KIND)
    host = _text(data, kind_end, host_end, "host", MAX_HOST)
    try:
        reason = data[host_end:reason_end].decode("utf-8")
    except UnicodeDecodeError:
        reason = None
    if reason is None or len(reason) > MAX_REASON or \
            not reason.isprintable():
        raise Dropped("malformed", "reason: a text of up to %d printable "
                      "characters expected" % MAX_REASON)
    return Request(kind.decode("ascii"), host, seq, sent_at, reason)


def _seq_and_time(data):
    """(seq, sent_at) at the start of a body (a beat's or a request's),
    checked."""
    seq, sent_at = _SEQ_TIME.unpack_from(data, _HEADER.size)
    if seq > MAX_SEQ:
        raise Dropped("malformed", "seq: an integer 0..2**63-1 expected")
    if not (sent_at >= 0.0 and sent_at < math.inf):   # NaN too
        raise Dropped("malformed", "sent_at: a time expected")
    return seq, sent_at


def _offsets(start, lengths, end):
    """[start, then the end of each text]: texts of ``lengths`` laid one
    after the other from ``start``, within a body ending at ``end``."""
    out = [start]
    for length in lengths:
        start += length
        out.append(start)
    if start > end:
        raise Dropped("malformed", "texts longer than the body")
    return out


def _text(data, start, end, name, limit):
    """The printable UTF-8 text of 1 to ``limit`` bytes at
    ``data[start:end]``."""
    if not 0 < end - start <= limit:
        raise Dropped("malformed", "%s: a text of 1 to %d bytes expected"
                      % (name, limit))
    try:
        text = data[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise Dropped("malformed", "%s: not UTF-8" % name)
    if not text.isprintable():
        raise Dropped("malformed", "%s: characters not allowed" % name)
    return text
