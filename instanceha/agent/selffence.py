"""Whether this host may live: the agent's self-fencing decision (issue 37,
sections 2 and 3).

The agent feeds its watchdog (:mod:`instanceha.agent.watchdog`) only while
:func:`decide` says so, checked every ``[agent] watchdog_check_interval``
seconds. Every input is *proven fresh*: an engine's answer counts from
the moment the agent drew the nonce it echoes, a peer's answer from the
moment the agent sent the probe it answers; an input older than the
isolation timeout counts for nothing. In this order:

1. ``condemned``: an engine's signed poison pill reached the agent
   (directly, or relayed by a peer, which forwards the engine's signed
   bytes: a peer cannot make one). Stop feeding at once, for good: the
   host resets within its watchdog timeout.
2. A fresh peer answer saying the peer holds a pill for this host: the
   same.
3. A fresh answer of an acting engine (the elected member; a standby's
   answers are not counted) that does not condemn this host: feed.
4. Not hearing an acting engine: fresh answers from a majority of the
   configured peers, none condemning this host, each saying either that
   it hears an engine (which has not condemned this host: a peer holding
   the pill says so, rule 2) or that it hears no engine either. Feed:
   the engines are gone or cut off from this host only, and the peers
   have not been told to kill it (section 3: never a cloud-wide reset).
5. Otherwise stop feeding: the host is cut off. It starts feeding again
   if the engine or a majority of peers answer before the watchdog
   fires (the engine counts the host fenced only after the isolation
   timeout and the watchdog timeout, measured from the last beat it
   heard, have passed: doc/safety.md).

Why rule 4 is safe: the engine counts a condemned host fenced only once
a majority of the host's peers acknowledged the pill, and two majorities
of one peer set share a member: any majority of answers the host can
gather after that holds one that condemns it (rule 2).

:func:`decide` is pure: the time is given; :class:`SelfFence` holds the
inputs the receiving threads deliver and runs it.
"""

import threading
from typing import NamedTuple, Optional, Sequence, Tuple

import structlog

LOG = structlog.get_logger("instanceha.agent.selffence")

#: Decisions' reasons.
CONDEMNED = "condemned"
CONDEMNED_BY_PEER = "condemned_relayed_by_peer"
ENGINE = "engine_heard"
PEERS_HEAR_ENGINE = "peers_hear_engine"
ENGINES_GONE = "engines_gone"
PEERS_MIXED = "peers_majority"
ISOLATED = "isolated"
NOT_ARMED = "not_armed"


class PeerAnswer(NamedTuple):
    """A peer's answer to this agent's probe: ``at`` is when the agent
    sent the probe it answers (the agent's monotonic clock)."""
    peer: str
    at: float
    hears_engine: bool
    condemns: bool = False


class Inputs(NamedTuple):
    """What the decision reads. ``engine_at``: the freshness time of the
    newest answer of an acting engine that did not condemn this host
    (None: none); ``peers``: the newest answer of each peer;
    ``peer_count``: the peers configured."""
    engine_at: Optional[float]
    condemned: bool
    peers: Tuple[PeerAnswer, ...]
    peer_count: int


class Decision(NamedTuple):
    feed: bool
    reason: str
    detail: str = ""


def majority(count: int) -> int:
    """The smallest majority of ``count`` peers (none: unreachable)."""
    return count // 2 + 1 if count > 0 else 1


def decide(now: float, inputs: Inputs,
           isolation_timeout: float) -> Decision:
    """May the host live at ``now`` (see the module's text)?"""
    if inputs.condemned:
        return Decision(False, CONDEMNED, "an engine's poison pill")
    fresh = [a for a in inputs.peers
             if 0 <= now - a.at <= isolation_timeout]
    for answer in fresh:
        if answer.condemns:
            return Decision(False, CONDEMNED_BY_PEER,
                            "peer %s relays the poison pill" % answer.peer)
    if inputs.engine_at is not None and \
            now - inputs.engine_at <= isolation_timeout:
        return Decision(True, ENGINE, "engine answered %.1f s ago"
                        % (now - inputs.engine_at))
    need = majority(inputs.peer_count)
    hearing = sum(1 for a in fresh if a.hears_engine)
    deaf = len(fresh) - hearing
    if inputs.peer_count and len(fresh) >= need:
        reason = (PEERS_HEAR_ENGINE if hearing >= need
                  else ENGINES_GONE if deaf >= need else PEERS_MIXED)
        return Decision(True, reason,
                        "%d of %d peers answer (%d hear an engine, %d "
                        "none), none condemns" % (
                            len(fresh), inputs.peer_count, hearing, deaf))
    return Decision(False, ISOLATED,
                    "no engine for %s, %d of %d peers answer (%d needed)" % (
                        "ever" if inputs.engine_at is None
                        else "%.1f s" % (now - inputs.engine_at),
                        len(fresh), inputs.peer_count, need))


class SelfFence:
    """The live inputs and the feeding loop: receivers call
    :meth:`engine_answered`, :meth:`condemn`, :meth:`peer_answered`;
    :meth:`tick` (every check interval) decides and feeds ``device``.
    A condemnation is never lifted within one run of the agent.
    Thread-safe."""

    def __init__(self, device, isolation_timeout: float,
                 peers: Sequence[str] = ()):
        self.device = device
        self.isolation_timeout = float(isolation_timeout)
        self.peers = tuple(peers)
        self._lock = threading.Lock()
        self._engine_at: Optional[float] = None
        self._condemned = False
        self._answers: dict = {}
        self.last: Optional[Decision] = None
        self.stopped_at: Optional[float] = None

    def engine_answered(self, at: float) -> None:
        with self._lock:
            if self._engine_at is None or at > self._engine_at:
                self._engine_at = at

    def condemn(self, by: str) -> None:
        with self._lock:
            first = not self._condemned
            self._condemned = True
        if first:
            LOG.critical("agent.condemned", by=by,
                         effect="the watchdog is no longer fed: this host "
                                "resets within its timeout")

    def peer_answered(self, answer: PeerAnswer) -> None:
        with self._lock:
            old = self._answers.get(answer.peer)
            if old is None or answer.at >= old.at:
                self._answers[answer.peer] = answer

    def inputs(self) -> Inputs:
        with self._lock:
            return Inputs(self._engine_at, self._condemned,
                          tuple(self._answers.values()), len(self.peers))

    def tick(self, now: float) -> Decision:
        """Decide at ``now``; feed the device when the host may live.
        Logs a change of decision, one line saying why."""
        if not self.device.armed:
            decision = Decision(False, NOT_ARMED)
        else:
            decision = decide(now, self.inputs(), self.isolation_timeout)
        last = self.last
        if last is None or (last.feed, last.reason) != (decision.feed,
                                                        decision.reason):
            log = LOG.info if decision.feed else LOG.critical
            log("agent.self_fence_decision", feed=decision.feed,
                reason=decision.reason, detail=decision.detail,
                effect=("watchdog fed" if decision.feed else
                        "watchdog not fed: this host resets within %d s "
                        "unless fed again" % self.device.timeout))
        self.last = decision
        if decision.feed:
            self.device.feed()
            self.stopped_at = None
        elif self.stopped_at is None:
            self.stopped_at = now
        return decision
