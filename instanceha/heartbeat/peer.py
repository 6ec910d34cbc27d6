"""The agents' peer datagrams (issue 37, section 2): a probe, its answer,
and the engine's relay of a poison pill, with the header, key ids,
signature and limits of :mod:`instanceha.heartbeat.protocol`.

A host cut off from the engines asks its peers whether they hear one
(:mod:`instanceha.agent.peers`). Probes and answers are signed with the
peers' key (``[agent] peer_key_file``, shared by the agents of one peer
set; an engine never needs it). A probe carries a fresh nonce; an answer
echoes it, so the prober knows the answer was made after it asked. An
answer may carry a *pill*: the bytes of an engine's condemning challenge
for the prober, signed with the prober's own key, which the peer holds
but cannot read or make; the prober verifies it itself
(:mod:`instanceha.heartbeat.challenge`). A peer lying about the engines
can therefore keep a pill from its prober, never forge one.

Bodies::

    probe (type 5)
    16  nonce
     1  host length, host (UTF-8): the prober

    answer (type 6)
    16  the probe's nonce
     1  flags: bit 0, the answerer hears an acting engine
     1  host length, 1 target length, 2 pill length
        host (UTF-8, the answerer), target (UTF-8, the prober), pill

    relay (type 7), an engine to an agent, signed with that agent's key
     1  target length, 2 pill length
        target (UTF-8, the condemned host), pill
"""

import struct
from typing import NamedTuple

from instanceha.heartbeat import protocol

PROBE = 5
ANSWER = 6
RELAY = 7
NONCE_SIZE = protocol.NONCE_SIZE
HEARS_ENGINE = 1
_PROBE = struct.Struct(">%dsB" % NONCE_SIZE)
_ANSWER = struct.Struct(">%dsBBBH" % NONCE_SIZE)
_RELAY = struct.Struct(">BH")


class Probe(NamedTuple):
    nonce: bytes
    host: str


class Answer(NamedTuple):
    nonce: bytes
    host: str
    target: str
    hears_engine: bool
    pill: bytes = b""


class Relay(NamedTuple):
    target: str
    pill: bytes


def _texts(what, *fields):
    return protocol._encoded_texts(what, [(name, text, protocol.MAX_HOST,
                                           None) for name, text in fields])


def _nonce(what, nonce):
    if type(nonce) is not bytes or len(nonce) != NONCE_SIZE:
        raise ValueError("cannot encode %s: nonce: %d bytes expected"
                         % (what, NONCE_SIZE))
    return nonce


def encode_probe(probe: Probe, key) -> bytes:
    host, = _texts("probe", ("host", probe.host))
    return protocol._frame(PROBE, _PROBE.pack(
        _nonce("probe", probe.nonce), len(host)) + host, key)


def encode_answer(answer: Answer, key) -> bytes:
    host, target = _texts("answer", ("host", answer.host),
                          ("target", answer.target))
    pill = bytes(answer.pill)
    return protocol._frame(ANSWER, _ANSWER.pack(
        _nonce("answer", answer.nonce),
        HEARS_ENGINE if answer.hears_engine else 0, len(host), len(target),
        len(pill)) + host + target + pill, key)


def encode_relay(relay: Relay, key) -> bytes:
    target, = _texts("relay", ("target", relay.target))
    pill = bytes(relay.pill)
    return protocol._frame(RELAY, _RELAY.pack(len(target), len(pill))
                           + target + pill, key)


def _fixed(data, end, struct_, what):
    start = protocol._HEADER.size
    if end - start < struct_.size:
        raise protocol.Dropped("malformed", "a %s's body is at least %d "
                               "bytes" % (what, struct_.size))
    return struct_.unpack_from(data, start), start + struct_.size


def _read_probe(data, end):
    (nonce, host_len), at = _fixed(data, end, _PROBE, "probe")
    offsets = protocol._offsets(at, (host_len,), end)
    return Probe(nonce, protocol._text(data, offsets[0], offsets[1],
                                       "host", protocol.MAX_HOST))


def _read_answer(data, end):
    (nonce, flags, host_len, target_len, pill_len), at = _fixed(
        data, end, _ANSWER, "answer")
    o = protocol._offsets(at, (host_len, target_len, pill_len), end)
    return Answer(nonce,
                  protocol._text(data, o[0], o[1], "host",
                                 protocol.MAX_HOST),
                  protocol._text(data, o[1], o[2], "target",
                                 protocol.MAX_HOST),
                  bool(flags & HEARS_ENGINE), bytes(data[o[2]:o[3]]))


def _read_relay(data, end):
    (target_len, pill_len), at = _fixed(data, end, _RELAY, "relay")
    o = protocol._offsets(at, (target_len, pill_len), end)
    return Relay(protocol._text(data, o[0], o[1], "target",
                                protocol.MAX_HOST), bytes(data[o[1]:o[2]]))


#: The reader of a relay's body (the agent's path sockets receive them
#: with the engines' challenges).
read_relay = _read_relay
_BODIES = {PROBE: _read_probe, ANSWER: _read_answer, RELAY: _read_relay}


def decode_signed(data: bytes, keyring):
    """(message, kid) of a peer datagram (or a beat or request, which the
    caller refuses), verified with ``keyring``; raises
    :class:`~instanceha.heartbeat.protocol.Dropped`."""
    return protocol.decode_signed(data, keyring, _BODIES)
