"""The agent's guest event: a libvirt lifecycle event of one guest that
broke by itself (issue 25), sent as a signed datagram of type
:data:`~instanceha.heartbeat.protocol.GUEST_EVENT` with the header, key
ids, signature and limits of :mod:`instanceha.heartbeat.protocol`.

The body::

     8  seq         unsigned: one more per guest event of the agent,
                    starting at the milliseconds since boot
     8  sent_at     IEEE 754 double, the sender's clock
     1  host length, 1 boot_id length, 1 server length,
     1  event length, 1 detail length
        host (UTF-8), boot_id (UTF-8), server, event, detail (ASCII)

``server`` is the libvirt domain's UUID, which is the Nova instance's;
``event`` and ``detail`` are names (:data:`EVENTS`), not libvirt's
numbers, so that the engine needs no libvirt. The receiver checks
``seq`` and ``sent_at`` with the replay guard of the host's beats, on a
sequence of its own (:data:`REPLAY_PATH`).
"""

import re
import struct
from typing import NamedTuple

from instanceha.heartbeat import protocol

#: The events an agent sends, as (event, detail) names: the guest broke
#: by itself. A normal shutdown, a destroy (a user's stop through Nova
#: ends in one), a start or a resume are not sent.
STOPPED, CRASHED, SUSPENDED = "stopped", "crashed", "suspended"
EVENTS = {STOPPED: ("failed", "crashed"),
          CRASHED: ("panicked", "crashloaded", "unknown"),
          SUSPENDED: ("watchdog", "ioerror")}
#: The replay guard's sequence of a host's guest events (not a network
#: path name: those never start with "~").
REPLAY_PATH = "~guest"
MAX_SERVER = 64
MAX_NAME = 32
_BODY = struct.Struct(">QdBBBBB")
_NAME = re.compile(r"[a-z0-9_-]+\Z")
_SERVER = re.compile(r"[A-Za-z0-9_.-]+\Z")
_NAME_BYTES = re.compile(rb"[a-z0-9_-]+\Z")
_SERVER_BYTES = re.compile(rb"[A-Za-z0-9_.-]+\Z")


class GuestEvent(NamedTuple):
    """A guest of ``host`` (booted as ``boot_id``) broke by itself:
    ``event`` and ``detail`` as in :data:`EVENTS`."""
    host: str
    boot_id: str
    server: str
    event: str
    detail: str
    seq: int
    sent_at: float


def encode(ev: GuestEvent, key) -> bytes:
    """The signed datagram of ``ev``; ValueError for an event
    :func:`read_body` would refuse."""
    host, boot_id, server, event, detail = protocol._encoded_texts(
        "guest event", (("host", ev.host, protocol.MAX_HOST, None),
                        ("boot_id", ev.boot_id, protocol.MAX_BOOT_ID, None),
                        ("server", ev.server, MAX_SERVER, _SERVER),
                        ("event", ev.event, MAX_NAME, _NAME),
                        ("detail", ev.detail, MAX_NAME, _NAME)))
    body = _BODY.pack(protocol._checked_seq("guest event", ev.seq),
                      protocol._checked_time("guest event", ev.sent_at),
                      len(host), len(boot_id), len(server), len(event),
                      len(detail))
    return protocol._frame(protocol.GUEST_EVENT,
                           body + host + boot_id + server + event + detail,
                           key)


def decode_signed(data: bytes, keyring):
    """:func:`instanceha.heartbeat.protocol.decode_signed` that also reads
    guest events (the engine's receiver)."""
    return protocol.decode_signed(data, keyring, _BODIES)


def decode(data: bytes, keyring):
    return decode_signed(data, keyring)[0]


def read_body(data, end) -> GuestEvent:
    """The guest event of a verified datagram whose body ends at ``end``;
    raises :class:`~instanceha.heartbeat.protocol.Dropped`."""
    start = protocol._HEADER.size
    if end - start < _BODY.size:
        raise protocol.Dropped("malformed", "a guest event's body is at "
                               "least %d bytes" % _BODY.size)
    seq, sent_at = protocol._seq_and_time(data)
    lengths = _BODY.unpack_from(data, start)[2:]
    offsets = protocol._offsets(start + _BODY.size, lengths, end)
    host = protocol._text(data, offsets[0], offsets[1], "host",
                          protocol.MAX_HOST)
    boot_id = protocol._text(data, offsets[1], offsets[2], "boot_id",
                             protocol.MAX_BOOT_ID)
    names = []
    for i, (name, limit, pattern) in enumerate((
            ("server", MAX_SERVER, _SERVER_BYTES),
            ("event", MAX_NAME, _NAME_BYTES),
            ("detail", MAX_NAME, _NAME_BYTES))):
        raw = data[offsets[2 + i]:offsets[3 + i]]
        if len(raw) > limit or not pattern.match(raw):
            raise protocol.Dropped("malformed", "%s: 1 to %d of %s "
                                   "expected" % (name, limit,
                                                 pattern.pattern[1:-3]
                                                 .decode("ascii")))
        names.append(raw.decode("ascii"))
    return GuestEvent(host, boot_id, names[0], names[1], names[2], seq,
                      sent_at)


_BODIES = {protocol.GUEST_EVENT: read_body}
