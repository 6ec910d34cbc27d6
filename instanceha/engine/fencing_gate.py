"""May a host be fenced now, as far as the whole cloud is concerned?

Two objects, both asked only after the state machine's step says FENCE
(step first, then admit):

* :class:`Readiness` -- no fencing decision at all before the world has
  been observed since start (the first poll of Nova) or while the control
  plane a recovery needs is not ready. The fence action asks it again
  right before each power-off.
* :class:`FencingGate` -- the storm threshold (``policy.storm``, pure), an
  operator's acknowledgement of a storm, and the fencing rate limit
  (a token bucket, earliest detection first). Only the bookkeeping is
  here; the decisions are ``policy.storm``'s.
"""

import threading
from typing import (Any, Callable, Dict, Mapping, Optional, Tuple)

from instanceha.fsm import agent
from instanceha.fsm.record import HostRecord
from instanceha.policy import storm


class Readiness:

    def __init__(self, world_seen: Optional[Callable[[], bool]] = None,
                 control_plane: Optional[
                     Callable[[], Tuple[bool, str]]] = None,
                 agent_cliff: Optional[Callable[[], Optional[str]]] = None
                 ) -> None:
        #: True once the world has been observed since start (the service
        #: passes the reconciler's first completed pass): until then no
        #: fencing decision is taken on remembered observations.
        self.world_seen: Callable[[], bool] = world_seen or (lambda: True)
        #: (ok, reason) of the control plane a recovery needs (scheduler,
        #: conductor, Placement, Nova API): no fencing while not ok, since
        #: a fenced host whose servers cannot be rebuilt is the worst
        #: outcome.
        self.control_plane: Callable[[], Tuple[bool, str]] = \
            control_plane or (lambda: (True, ""))
        #: Why this engine looks cut off from the hosts' agents (a large
        #: share fell silent within seconds), else None: a host suspect on
        #: its agent's silence alone is not fenced meanwhile.
        self.agent_cliff: Callable[[], Optional[str]] = \
            agent_cliff or (lambda: None)

    def closed(self) -> Optional[str]:
        """Why no fencing decision may be taken at all now, or None."""
        if not self.world_seen():
            return ("waiting for the first poll of Nova since start: no "
                    "fencing on what the journal remembers")
        ok, why = self.control_plane()
        if not ok:
            return "control plane not ready for a recovery: %s" % why
        return None


#: view(): (version, {host id: record}) of the engine's records
View = Callable[[], Tuple[int, Mapping[str, HostRecord]]]


class FencingGate:

    def __init__(self, conf: Any, clock: Callable[[], float],
                 readiness: Readiness, view: View) -> None:
        """``view()``: (version, {host id: record}) of the engine's records,
        the version bumped on every change; the engine also tells every
        record it stores (:meth:`note`)."""
        self.conf = conf
        self.clock = clock
        self.readiness = readiness
        self._view = view
        self._lock = threading.Lock()
        self._settings = storm.Settings.from_conf(conf)
        self._tally = storm.Tally(self._settings)
        self._notes = 0              # bumped on every record noted
        #: scope -> lost count an operator took
        self._ack: Dict[str, int] = {}
        self._acks = 0               # bumped on every acknowledgement
        #: (notes, acks, second, scopes)
        self._cache: Optional[
            Tuple[int, int, int, Dict[str, storm.Scope]]] = None
        self._bucket = storm.TokenBucket(conf.policy.fence_rate_hosts,
                                         conf.policy.fence_rate_interval,
                                         clock())
        #: host_id -> (detected at, last asked)
        self._waiting: Dict[str, Tuple[float, float]] = {}

    @property
    def settings(self) -> storm.Settings:
        return self._settings

    @settings.setter
    def settings(self, settings: storm.Settings) -> None:
        """New storm settings (SIGHUP): the tally is counted again."""
        _, records = self._view()
        with self._lock:
            self._settings = settings
            self._tally = storm.Tally(settings, records.values())
            self._notes += 1

    def note(self, rec: HostRecord) -> None:
        """``rec`` is now its host's record (called by the engine as it
        stores one, under its lock)."""
        with self._lock:
            self._tally.put(rec)
            self._notes += 1

    def scopes(self, at: float, pending: Optional[HostRecord] = None
               ) -> Dict[str, storm.Scope]:
        """storm.assess of every record (``pending`` as it will be)."""
        with self._lock:
            key = (self._notes, self._acks, int(at))
            if pending is None and self._cache is not None \
                    and self._cache[:3] == key:
                return self._cache[3]
            scopes = self._tally.assess(at, pending)
            # An acknowledged storm that has passed is forgotten.
            for name in list(self._ack):
                scope = scopes.get(name)
                if scope is None or not scope.over(self.settings):
                    del self._ack[name]
            if pending is None:
                self._cache = key + (scopes,)
        return scopes

    def hold_for(self, rec: HostRecord, at: float,
                 pending: Optional[HostRecord] = None) -> Tuple[bool, str]:
        """(ok, reason): may ``rec`` be fenced now, as far as the cloud is
        concerned (start-up, control plane, storm threshold)?"""
        closed = self.readiness.closed()
        if closed:
            return False, closed
        if agent.silent_suspect(rec):
            cliff = self.readiness.agent_cliff()
            if cliff:
                return False, cliff
        scopes = self.scopes(at, pending)
        with self._lock:
            ack = dict(self._ack)
        scope = storm.holding(scopes, rec, self.settings, ack)
        if scope is not None:
            return False, scope.describe()
        return True, ""

    def take_token(self, rec: HostRecord, at: float) -> Tuple[bool, str]:
        """(ok, reason): a fencing token for ``rec``, earliest detection
        first; hosts beyond the rate wait."""
        key = rec.lost_at if rec.lost_at is not None else rec.since
        with self._lock:
            # Waiters not seen for a while (back, held otherwise) step out.
            stale = at - 2 * self.conf.detection.tick_interval - 1.0
            self._waiting = {h: w for h, w in self._waiting.items()
                             if w[1] >= stale and h != rec.id}
            order = {h: w[0] for h, w in self._waiting.items()}
            first = storm.queue_position(order, rec.id, key) == 1
            if first and self._bucket.take(at):
                return True, ""
            self._waiting[rec.id] = (key, at)
            order[rec.id] = key
            position = storm.queue_position(order, rec.id, key)
            waiting = len(order)
            next_at = self._bucket.next_at(at)
        p = self.conf.policy
        return False, ("rate limit: at most %d hosts fenced per %.0fs "
                       "([policy] fence_rate_hosts); waiting, %d of %d in "
                       "order of detection, next slot in %.0fs"
                       % (p.fence_rate_hosts, p.fence_rate_interval,
                          position, waiting, max(0.0, next_at - at)))

    def acknowledge(self) -> Dict[str, int]:
        """Operator ``resume --storm``: the storm hold is lifted for the
        hosts lost now; more losses in a scope bring it back. Returns
        {scope: hosts lost}."""
        scopes = self.scopes(self.clock())
        held = {key: len(scope.lost) for key, scope in scopes.items()
                if scope.over(self.settings)}
        with self._lock:
            self._ack.update(held)
            self._acks += 1
        return held

    def cluster_status(self) -> Tuple[bool, str]:
        """(ok, reason) of the whole cloud for status and metrics: False
        while readiness or the global storm hold stops new fencing."""
        closed = self.readiness.closed()
        if closed:
            return False, closed
        scopes = self.scopes(self.clock())
        with self._lock:
            ack = dict(self._ack)
        over = [scope for key, scope in sorted(scopes.items())
                if scope.over(self.settings)
                and len(scope.lost) > ack.get(key, -1)]
        if over:
            return False, "; ".join(scope.describe() for scope in over)
        return True, ""

    def summary(self, names: Mapping[str, str]) -> Dict[str, object]:
        """The storm and rate-limit parts of status (``names``: host id ->
        name)."""
        scopes = self.scopes(self.clock())
        with self._lock:
            ack = dict(self._ack)
            waiting = sorted(self._waiting.items(),
                             key=lambda kv: (kv[1][0], kv[0]))
            tokens = self._bucket.tokens
        return {
            "storm": storm.summary(scopes, self.settings, ack),
            "rate_limit": {
                "tokens": round(tokens, 2),
                "waiting": [names.get(h, h) for h, _ in waiting]},
        }
