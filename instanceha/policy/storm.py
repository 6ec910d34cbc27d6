"""Storm decisions, pure: which hosts count as lost, when the threshold
holds new fencing (globally, per availability zone and per host aggregate), and how many hosts
may be fenced per interval. No I/O, no clock: ``now`` is an argument.

A host counts as *lost* while it looks dead or is being recovered
(suspect with its heartbeat lost, fencing, fenced, evacuating, pending),
and for ``window`` seconds after its recovery ended (evacuated) or failed:
when hosts die a few seconds apart, those already recovered still count, so
a rack going down host by host is seen as one storm. Hosts in their
operator's hands (maintenance, suspended, disabled and not recovered) are
left out of both the count and the total.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping,
                    Optional, Tuple)

from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State

_RECOVERING = {State.FENCING, State.FENCED, State.EVACUATING, State.PENDING}
_ENDED = {State.EVACUATED, State.FAILED}
_OPERATORS = {State.MAINTENANCE, State.SUSPENDED, State.DRAINING,
              State.UNDRAINING, State.DECOMMISSIONED}
GLOBAL = "global"
#: scope names of host aggregates: "aggregate:<name>" (zones: the bare name)
AGGREGATE = "aggregate:"


def scopes_of(rec: HostRecord, s: "Settings") -> List[str]:
    """The scope names ``rec`` counts in: global, its zone, its aggregates."""
    keys = [GLOBAL]
    if s.per_zone and rec.zone:
        keys.append(rec.zone)
    if s.per_aggregate:
        keys.extend(AGGREGATE + name for name in rec.aggregates)
    return keys


@dataclasses.dataclass(frozen=True)
class Settings:
    threshold: int = 50              # percent; 100 disables
    min_hosts: int = 2
    window: float = 600.0
    per_zone: bool = False
    per_aggregate: bool = False
    recover_disabled: bool = False

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        p = conf.policy
        return cls(threshold=p.threshold, min_hosts=p.min_hosts_for_threshold,
                   window=p.storm_window, per_zone=p.threshold_per_zone,
                   per_aggregate=p.threshold_per_aggregate,
                   recover_disabled=p.recover_disabled_hosts)


def counted(rec: HostRecord, s: Settings) -> bool:
    """The host is in the total (not in its operator's hands)."""
    if rec.state in _OPERATORS:
        return False
    return s.recover_disabled or rec.operator_disabled is None


def lost(rec: HostRecord, now: float, s: Settings) -> bool:
    """The host counts as lost at ``now``."""
    if rec.state in _RECOVERING:
        return True
    if rec.state in _ENDED:
        return now - rec.since <= s.window
    if rec.state is State.SUSPECT and rec.agent == "silent":
        # Suspect on its agent's silence while Nova still says up: lost
        # for the threshold too, or a storm seen first by the agents
        # would fence its first hosts before any hold.
        return True
    if rec.state in (State.SUSPECT, State.ACTIVE):
        return not rec.heartbeat_ok
    return False


@dataclasses.dataclass(frozen=True)
class Scope:
    name: str                        # "global", a zone, "aggregate:<name>"
    lost: Tuple[str, ...]            # host names, sorted
    total: int
    threshold: int

    @property
    def pct(self) -> float:
        return 100.0 * len(self.lost) / self.total if self.total else 0.0

    def over(self, s: Settings) -> bool:
        return (self.total >= s.min_hosts and s.threshold < 100
                and self.pct > s.threshold)

    def describe(self) -> str:
        if self.name == GLOBAL:
            where = ""
        elif self.name.startswith(AGGREGATE):
            where = " in aggregate %s" % self.name[len(AGGREGATE):]
        else:
            where = " in zone %s" % self.name
        names = ", ".join(self.lost[:10])
        if len(self.lost) > 10:
            names += ", ... (%d more)" % (len(self.lost) - 10)
        return ("storm hold: %d of %d compute hosts%s (%.0f%%) lost or "
                "recovering within the storm window, above the %d%% "
                "threshold: suspected partition, power or control-plane "
                "fault (%s)" % (len(self.lost), self.total, where, self.pct,
                                self.threshold, names))


def assess(records: Iterable[HostRecord], now: float, s: Settings
           ) -> Dict[str, Scope]:
    """{scope name: Scope} for the global scope and, with per_zone, every
    zone; with per_aggregate, every host aggregate."""
    #: scope -> (names of the lost hosts, hosts counted)
    groups: Dict[str, Tuple[List[str], int]] = {GLOBAL: ([], 0)}
    for rec in records:
        if not counted(rec, s):
            continue
        is_lost = lost(rec, now, s)
        for key in scopes_of(rec, s):
            names, total = groups.get(key, ([], 0))
            if is_lost:
                names = names + [rec.name or rec.id]
            groups[key] = (names, total + 1)
    return {key: Scope(key, tuple(sorted(names)), total, s.threshold)
            for key, (names, total) in groups.items()}


def _maybe_lost(rec: HostRecord) -> bool:
    """Whether ``rec`` (counted) can count as lost at some moment: all
    but a quietly active host, most of a cloud."""
    return not (rec.state is State.ACTIVE and rec.heartbeat_ok
                and rec.agent != "silent")


class Tally:
    """:func:`assess` kept up to date record by record, for an engine
    whose records change a few at a time: the total of every scope, and
    the records that may count as lost. An assessment then reads those
    few records, not the whole cloud (at 20,000 hosts, assess took tens
    of milliseconds at every fencing decision, and 20 deaths were
    decided one after another). Pure; not thread-safe (its owner locks).
    """

    def __init__(self, s: Settings, records: Iterable[HostRecord] = ()
                 ) -> None:
        self.s = s
        #: id -> scopes it is counted in
        self._scopes: Dict[str, Tuple[str, ...]] = {}
        self._totals: Dict[str, int] = {GLOBAL: 0}  # scope -> hosts counted
        #: id -> record that may be lost
        self._maybe: Dict[str, HostRecord] = {}
        for rec in records:
            self.put(rec)

    def put(self, rec: HostRecord) -> None:
        """``rec`` is now its host's record."""
        self._drop(rec.id, self._totals, self._maybe)
        if counted(rec, self.s):
            keys = tuple(scopes_of(rec, self.s))
            self._scopes[rec.id] = keys
            _add(self._totals, keys, 1)
            if _maybe_lost(rec):
                self._maybe[rec.id] = rec

    def _drop(self, host_id: str, totals: Dict[str, int],
              maybe: Dict[str, HostRecord], forget: bool = True) -> None:
        keys = (self._scopes.pop(host_id, None) if forget
                else self._scopes.get(host_id))
        if keys:
            _add(totals, keys, -1)
        maybe.pop(host_id, None)

    def assess(self, now: float, pending: Optional[HostRecord] = None
               ) -> Dict[str, Scope]:
        """What :func:`assess` says of the records put, at ``now``
        (``pending``: a record as it will be, in place of its host's)."""
        totals, maybe = self._totals, self._maybe
        if pending is not None:
            totals, maybe = dict(totals), dict(maybe)
            self._drop(pending.id, totals, maybe, forget=False)
            if counted(pending, self.s):
                _add(totals, scopes_of(pending, self.s), 1)
                if _maybe_lost(pending):
                    maybe[pending.id] = pending
        names: Dict[str, List[str]] = {key: [] for key in totals}
        for rec in maybe.values():
            if lost(rec, now, self.s):
                for key in scopes_of(rec, self.s):
                    names[key].append(rec.name or rec.id)
        return {key: Scope(key, tuple(sorted(names[key])), total,
                           self.s.threshold)
                for key, total in totals.items()
                if total or key == GLOBAL}


def _add(totals: Dict[str, int], keys: Iterable[str], n: int) -> None:
    for key in keys:
        total = totals.get(key, 0) + n
        if total or key == GLOBAL:
            totals[key] = total
        else:
            del totals[key]


def holding(scopes: Mapping[str, Scope], rec: HostRecord, s: Settings,
            acknowledged: Optional[Mapping[str, int]] = None
            ) -> Optional[Scope]:
    """The Scope whose storm holds new fencing of ``rec``, or None.

    ``acknowledged`` ({scope: lost count}) is what an operator accepted
    with ``resume --storm``: the hold stays lifted while no more hosts are
    lost in that scope than when they did."""
    acknowledged = acknowledged or {}
    for key in scopes_of(rec, s):
        scope = scopes.get(key)
        if scope is None or not scope.over(s):
            continue
        if len(scope.lost) <= acknowledged.get(key, -1):
            continue
        return scope
    return None


class TokenBucket:
    """At most ``capacity`` fencings at once, refilled at ``capacity`` per
    ``interval`` seconds. Pure: the caller passes ``now``."""

    def __init__(self, capacity: float, interval: float, now: float
                 ) -> None:
        self.capacity = float(capacity)
        self.rate = float(capacity) / float(interval)
        self.tokens = float(capacity)
        self.at = now

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.capacity,
                              self.tokens + (now - self.at) * self.rate)
            self.at = now

    def available(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def next_at(self, now: float) -> float:
        """When the next token is there."""
        self._refill(now)
        if self.tokens >= 1.0:
            return now
        return now + (1.0 - self.tokens) / self.rate


def queue_position(waiting: Mapping[str, float], host_id: str, key: float
                   ) -> int:
    """1-based position of ``host_id`` among ``waiting`` ({host_id: key},
    earliest detection first), counting itself with ``key``."""
    ahead = sum(1 for other, k in waiting.items()
                if other != host_id and (k, other) < (key, host_id))
    return ahead + 1


def summary(scopes: Mapping[str, Scope], s: Settings,
            acknowledged: Optional[Mapping[str, int]] = None
            ) -> Dict[str, Optional[Dict[str, object]]]:
    """What status shows: every scope over the threshold."""
    acknowledged = acknowledged or {}
    out: Dict[str, Optional[Dict[str, object]]] = {}
    for key, scope in sorted(scopes.items()):
        out[key] = {"lost": len(scope.lost), "total": scope.total,
                    "pct": round(scope.pct, 1), "hosts": list(scope.lost),
                    "over": scope.over(s),
                    "acknowledged": acknowledged.get(key)}
    return out
