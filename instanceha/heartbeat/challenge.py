"""Freshness the engines prove: signed, unpredictable challenges that a
beat must echo before it may keep a host from being fenced (issue 34,
part 7).

A signature proves who sent a beat, not when. The replay guard
(:mod:`instanceha.heartbeat.replay`) refuses repeats and beats that look
old by the clock offset it learned, but an offset is learned, not
proven: beats held back during a silence and released at their pace
once the host died pass once the offset is learned anew, and after an
engine restart the guard trusts whatever it sees first. So a beat
counts for the veto only when it proves it was sent after a moment the
engine chose:

* every ``[agent] challenge_interval`` seconds an engine draws a nonce
  (16 random bytes, :func:`os.urandom`) and sends each host it heard
  from a :class:`Challenge` (signed like every datagram, naming the
  host) to the address and port the host's beats came from, on every
  path (:class:`Issuer`);
* the agent keeps the newest nonce of each engine it heard (engines are
  told apart by their ``issuer``, 8 random bytes drawn at each engine
  start) and appends them to each beat (:class:`Echoes`, the beat's
  ``echoes``);
* the engine takes a beat as proven fresh when it echoes one of its own
  last ``[agent] challenge_window`` nonces. A nonce is unknown before it
  is drawn, so a proven beat was sent after that nonce was drawn: at
  most ``challenge_interval * challenge_window`` seconds (the *window*)
  before the engine drew the nonce that replaced it. Beats held back for
  longer, recordings replayed after an engine restart (its nonces are
  new) and beats of an agent that echoes nothing (an older version) are
  *unproven*: shown, never a veto.

Each engine replica checks against its own nonces only; the agent echoes
one per engine (at most :data:`MAX_ECHOES`, newest first), so replicas
share nothing. A forged challenge does not verify; a recorded one sent
again makes the agent echo an old nonce, which only makes its beats
unproven (as dropping the challenges would: anyone on the path can do
that).

The challenge's body (a datagram of type
:data:`~instanceha.heartbeat.protocol.CHALLENGE`, with the header, key
ids, signature and limits of :mod:`instanceha.heartbeat.protocol`)::

     8  issuer      the engine's random id (drawn at its start)
    16  nonce       random
     1  host length
        host (UTF-8)
    appended (optional; an older engine ends the body before it):
    16  answer      the newest nonce the agent put in its beats (the
                    watchdog report's ``nonce``), zeros when none: it proves the challenge fresh to
                    the agent that drew it
     1  flags       bit 0: the sender is the acting (elected) engine;
                    bit 1: the poison pill: the engine condemned the host
                    (its agent stops feeding its watchdog:
                    :mod:`instanceha.agent.selffence`)
"""

import collections
import os
import struct
import threading
from typing import Deque, Dict, NamedTuple, Optional, Tuple

from instanceha.heartbeat import protocol

ISSUER_SIZE = 8
NONCE_SIZE = protocol.NONCE_SIZE
#: The most nonces a beat echoes (one per engine heard).
MAX_ECHOES = protocol.MAX_ECHOES
#: Seconds an agent keeps echoing an engine's newest nonce after it
#: arrived (an engine that stopped challenging: stopped, or restarted
#: with a new issuer). Longer than any window an engine accepts.
ECHO_FOR = 120.0
_BODY = struct.Struct(">%ds%dsB" % (ISSUER_SIZE, NONCE_SIZE))
_ANSWER = struct.Struct(">%dsB" % NONCE_SIZE)
_NO_ANSWER = bytes(NONCE_SIZE)
ACTING = 1
CONDEMNED = 2


class Challenge(NamedTuple):
    """Engine ``issuer``'s challenge ``nonce`` to the agent of
    ``host``."""
    issuer: bytes
    nonce: bytes
    host: str
    #: the agent's nonce it answers (None: none known, or an older
    #: engine)
    answer: Optional[bytes] = None
    #: sent by the acting (elected) engine
    acting: bool = False
    #: the poison pill: this engine condemned the host
    condemned: bool = False


def encode(ch: Challenge, key) -> bytes:
    """The signed datagram of ``ch``; ValueError for one
    :func:`read_body` would refuse."""
    if type(ch.issuer) is not bytes or len(ch.issuer) != ISSUER_SIZE \
            or type(ch.nonce) is not bytes or len(ch.nonce) != NONCE_SIZE:
        raise ValueError("cannot encode challenge: issuer and nonce: %d "
                         "and %d bytes expected" % (ISSUER_SIZE,
                                                    NONCE_SIZE))
    host, = protocol._encoded_texts(
        "challenge", (("host", ch.host, protocol.MAX_HOST, None),))
    answer = ch.answer if ch.answer is not None else _NO_ANSWER
    if type(answer) is not bytes or len(answer) != NONCE_SIZE:
        raise ValueError("cannot encode challenge: answer: %d bytes "
                         "expected" % NONCE_SIZE)
    flags = (ACTING if ch.acting else 0) | (CONDEMNED if ch.condemned
                                            else 0)
    return protocol._frame(protocol.CHALLENGE,
                           _BODY.pack(ch.issuer, ch.nonce, len(host))
                           + host + _ANSWER.pack(answer, flags), key)


def read_body(data, end) -> Challenge:
    """The challenge of a verified datagram whose body ends at ``end``;
    raises :class:`~instanceha.heartbeat.protocol.Dropped`."""
    start = protocol._HEADER.size
    if end - start < _BODY.size:
        raise protocol.Dropped("malformed", "a challenge's body is at "
                               "least %d bytes" % _BODY.size)
    issuer, nonce, host_len = _BODY.unpack_from(data, start)
    offsets = protocol._offsets(start + _BODY.size, (host_len,), end)
    host = protocol._text(data, offsets[0], offsets[1], "host",
                          protocol.MAX_HOST)
    at = offsets[1]
    if at >= end:
        return Challenge(issuer, nonce, host)
    if at + _ANSWER.size > end:
        raise protocol.Dropped("malformed", "a challenge's answer is %d "
                               "bytes" % _ANSWER.size)
    answer, flags = _ANSWER.unpack_from(data, at)
    return Challenge(issuer, nonce, host,
                     None if answer == _NO_ANSWER else answer,
                     bool(flags & ACTING), bool(flags & CONDEMNED))


_BODIES = {protocol.CHALLENGE: read_body}


def decode_signed(data: bytes, keyring):
    """:func:`instanceha.heartbeat.protocol.decode_signed` that also reads
    challenges (the agent's receiver)."""
    return protocol.decode_signed(data, keyring, _BODIES)


# -- the engine's side --------------------------------------------------------

class Issuer:
    """One engine's nonces: :meth:`draw` a new one each interval,
    :meth:`proves` whether a beat's echoes hold one of the last
    ``window``, drawn at most ``max_age`` seconds before (None: no age
    bound), so a nonce outlives its window by count only while the
    rounds go on: should they stall, the beats echoing the old ones are
    unproven (no veto: the host is judged by Nova alone), never proven
    for ever. ``random(n)`` gives n unpredictable bytes (os.urandom;
    tests give their own). Safe across threads: the valid nonces are
    replaced whole, never changed in place."""

    def __init__(self, window: int = 3, random=os.urandom,
                 max_age: Optional[float] = None):
        if window < 1:
            raise ValueError("window must be at least 1")
        self._random = random
        self._max_age = max_age
        self.issuer = random(ISSUER_SIZE)
        self._nonces: Deque[Tuple[bytes, Optional[float]]] = \
            collections.deque(maxlen=window)
        self._valid: Dict[bytes, Optional[float]] = {}
        self._lock = threading.Lock()
        self.drawn = 0

    def draw(self, now: Optional[float] = None) -> bytes:
        """A new nonce (drawn at ``now``), valid until ``window`` more
        are drawn or it is older than ``max_age``."""
        nonce = self._random(NONCE_SIZE)
        with self._lock:
            self._nonces.append((nonce, now))
            self._valid = dict(self._nonces)
            self.drawn += 1
        return nonce

    @property
    def newest(self):
        """The last nonce drawn, or None before the first."""
        nonces = self._nonces
        return nonces[-1][0] if nonces else None

    def proves(self, echoes: Tuple[bytes, ...],
               now: Optional[float] = None) -> bool:
        """True when one of ``echoes`` is a nonce of this engine's last
        ``window``, drawn at most ``max_age`` before ``now`` (when both
        are known)."""
        valid = self._valid
        max_age = self._max_age
        for nonce in echoes:
            if nonce in valid:
                drawn_at = valid[nonce]
                if max_age is None or now is None or drawn_at is None \
                        or now - drawn_at <= max_age:
                    return True
        return False


# -- the agent's side ---------------------------------------------------------

class Echoes:
    """The agent's newest nonce of each engine it heard; ``now`` is the
    agent's monotonic clock. Safe across threads (the challenges arrive
    on the receiver thread, beats read them on the beat loop)."""

    def __init__(self, keep_for: float = ECHO_FOR,
                 limit: int = MAX_ECHOES):
        self.keep_for = float(keep_for)
        self.limit = limit
        self._by_issuer = {}             # issuer -> (nonce, arrived at)
        self._lock = threading.Lock()
        self._echoes: Tuple[bytes, ...] = ()
        self._oldest = None

    def heard(self, ch: Challenge, now) -> None:
        """Challenge ``ch`` (verified, for this host) arrived at ``now``."""
        with self._lock:
            self._by_issuer[ch.issuer] = (ch.nonce, now)
            self._update(now)

    def current(self, now) -> Tuple[bytes, ...]:
        """The nonces to echo in a beat sent at ``now``, newest first."""
        oldest = self._oldest
        if oldest is not None and now - oldest > self.keep_for:
            with self._lock:
                self._update(now)
        return self._echoes

    def _update(self, now):
        by = self._by_issuer
        for issuer in [i for i, (_, at) in by.items()
                       if now - at > self.keep_for]:
            del by[issuer]
        ordered = sorted(by.items(), key=lambda kv: kv[1][1],
                         reverse=True)
        for issuer, _ in ordered[self.limit:]:
            del by[issuer]
        self._echoes = tuple(nonce for _, (nonce, _)
                             in ordered[:self.limit])
        self._oldest = min((at for _, at in by.values()), default=None)
