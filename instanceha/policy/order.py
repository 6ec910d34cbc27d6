"""In what order servers are evacuated, and which may be sent now; pure.

Priority: an integer from a metadata key (default ``instanceha:priority``)
on the server, or optionally on its flavor's extra specs (the server's own
value wins when both are consulted); higher first, 0 when unset. A value
that is not an integer (``high``, ``1.5``, empty) counts as 0, with an
error naming the object and the value. Equal priorities go by creation
time (oldest first; unknown last), then by server id: the order is total
and stable from one pass to the next.

Admission: given the servers in that order, a per-host limit and a cap
across hosts, with the evacuations already in flight, :func:`admit` says
which may be sent now and why each other one waits. Servers are taken in
order; one whose host is at its limit waits, and later servers on other
hosts may still go (work-conserving) unless ``strict`` is set, where no
server goes ahead of a waiting server of higher priority.
"""

import dataclasses
import re
from typing import (Any, Dict, List, Mapping, Optional, Protocol, Sequence,
                    Tuple)

from instanceha.policy.facts import (ERROR, FLAVOR, SERVER, Problem,
                                     ServerFacts, describe, short, unique)

DEFAULT_PRIORITY_KEY = "instanceha:priority"
#: where a priority may come from, nearest first
SOURCES = (SERVER, FLAVOR)
_INT = re.compile(r"^[+-]?\d{1,18}$")


def parse_priority(value: object) -> Optional[int]:
    """The integer in ``value`` ('10', ' -3 ', '+2'), or None. Python
    ints are taken as they are (not bools)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not _INT.match(text):
        return None
    return int(text)


@dataclasses.dataclass(frozen=True)
class Settings:
    key: str = DEFAULT_PRIORITY_KEY
    #: consulted in this order; the first that sets the key wins
    sources: Tuple[str, ...] = (SERVER,)
    default: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip() \
                or self.key != self.key.strip():
            raise ValueError("priority key must be a non-empty name without "
                             "blanks around it, not %r" % (self.key,))
        unknown = [x for x in self.sources if x not in SOURCES]
        if unknown:
            raise ValueError("unknown priority source(s) %s; known: %s" % (
                ", ".join(map(repr, unknown)), ", ".join(SOURCES)))
        object.__setattr__(self, "sources", tuple(
            x for x in SOURCES if x in self.sources))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        r = conf.recovery
        return cls(key=r.priority_key, sources=tuple(r.priority_sources))


@dataclasses.dataclass(frozen=True)
class Priority:
    value: int
    #: 'server web-1 says instanceha:priority=10', 'default 0'
    source: str
    problems: Tuple[Problem, ...] = ()


def priority_of(server: ServerFacts, s: Settings = Settings()) -> Priority:
    """The server's priority and where it comes from."""
    problems: List[Problem] = []
    for scope in s.sources:
        if scope == SERVER:
            obj_id, name, mapping = server.id, server.name, server.metadata
            what = "metadata"
        else:
            if server.flavor is None:
                continue
            fl = server.flavor
            obj_id, name, mapping = fl.id, fl.name, fl.extra_specs
            what = "extra spec"
        if not mapping or s.key not in mapping:
            continue
        raw = mapping[s.key]
        value = parse_priority(raw)
        if value is None:
            problems.append(Problem(
                ERROR, scope, obj_id, name, s.key, str(raw),
                "%s: %s %s=%r is not an integer; priority %d used" % (
                    describe(scope, name, obj_id), what, s.key, raw,
                    s.default)))
            return Priority(s.default, "%s has a malformed %s=%r, counted "
                            "as %d" % (short(scope, name, obj_id), s.key,
                                       raw, s.default), tuple(problems))
        return Priority(value, "%s says %s=%s" % (
            short(scope, name, obj_id), s.key, str(raw).strip()))
    return Priority(s.default, "default %d" % s.default)


@dataclasses.dataclass(frozen=True)
class Ranked:
    server: ServerFacts
    priority: int
    source: str
    position: int                       # 1-based

    @property
    def id(self) -> str:
        return self.server.id

    @property
    def host(self) -> Optional[str]:
        return self.server.host


@dataclasses.dataclass(frozen=True)
class Ranking:
    servers: Tuple[Ranked, ...]
    problems: Tuple[Problem, ...]       # each once

    @property
    def ids(self) -> List[str]:
        return [r.id for r in self.servers]


#: higher priority, created (unknown last), created at, id
SortKey = Tuple[int, bool, float, str]


def sort_key(server: ServerFacts, priority: int) -> SortKey:
    """Higher priority first, then oldest, unknown creation time last,
    then id."""
    created = server.created_at
    return (-priority, created is None, created or 0.0, server.id)


def rank(servers: Sequence[ServerFacts], s: Settings = Settings()) -> Ranking:
    """``servers`` in evacuation order."""
    found: List[Tuple[SortKey, ServerFacts, Priority]] = []
    problems: List[Problem] = []
    for server in servers:
        p = priority_of(server, s)
        problems.extend(p.problems)
        found.append((sort_key(server, p.value), server, p))
    found.sort(key=lambda x: x[0])
    ranked = tuple(Ranked(server, p.value, p.source, i + 1)
                   for i, (_, server, p) in enumerate(found))
    return Ranking(ranked, tuple(unique(problems)))


# -- admission ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Limits:
    #: evacuations in flight per source host; None: no limit
    per_host: Optional[int] = None
    #: evacuations in flight across every host; None: no cap
    total: Optional[int] = None
    #: never send a server ahead of a waiting one of higher priority
    strict: bool = False

    def __post_init__(self) -> None:
        for name in ("per_host", "total"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int)
                                      or value < 1):
                raise ValueError("%s must be a positive integer or None, "
                                 "not %r" % (name, value))

    @classmethod
    def from_conf(cls, conf: Any) -> "Limits":  # conf: oslo.config
        return cls(per_host=conf.evacuation.concurrency,
                   total=conf.recovery.max_inflight or None,
                   strict=conf.recovery.strict_priority)


@dataclasses.dataclass(frozen=True)
class Admission:
    send: Tuple[str, ...]               # server ids to send now, in order
    held: Dict[str, str]                # server id -> why it waits
    #: in flight once ``send`` has gone: per host, and in all
    inflight: Dict[Optional[str], int]
    inflight_total: int


class Admissible(Protocol):
    """What :func:`admit` reads of a server waiting to be sent: a
    Ranked, a ServerFacts, or the engine's own item (admission.Item);
    its priority, when it has one, is read by getattr."""
    @property
    def id(self) -> str: ...

    @property
    def host(self) -> Optional[str]: ...


def _fields(item: Admissible
            ) -> Tuple[str, Optional[str], Optional[int]]:
    server = getattr(item, "server", item)
    return server.id, server.host, getattr(item, "priority", None)


def admit(ordered: Sequence[Admissible], limits: Limits,
          inflight: Optional[Mapping[Optional[str], int]] = None,
          inflight_total: Optional[int] = None) -> Admission:
    """Which of ``ordered`` (Ranked, or ServerFacts already in order; not
    those in flight) may be sent now. ``inflight``: {host: evacuations in
    flight}; ``inflight_total`` defaults to their sum (pass it when some
    in-flight evacuations are of hosts not in the mapping). A server
    listed twice counts once."""
    counts = {h: int(n) for h, n in (inflight or {}).items()}
    for host, n in counts.items():
        if n < 0:
            raise ValueError("in-flight count of host %r is negative" % host)
    total = sum(counts.values()) if inflight_total is None \
        else int(inflight_total)
    if total < 0:
        raise ValueError("in-flight total is negative")
    send, held, seen = [], {}, set()
    blocker = None                      # (priority, id) of the first held
    for item in ordered:
        sid, host, priority = _fields(item)
        if sid in seen:
            continue
        seen.add(sid)
        if (limits.strict and blocker is not None and priority is not None
                and priority < blocker[0]):
            held[sid] = "waits for server %s (priority %d) to be sent first" \
                % (blocker[1], blocker[0])
            continue
        reason = None
        here = counts.get(host, 0)
        if limits.per_host is not None and here >= limits.per_host:
            reason = ("host %s has %d evacuation(s) in flight (limit %d per "
                      "host)" % (host, here, limits.per_host))
        elif limits.total is not None and total >= limits.total:
            reason = ("%d evacuation(s) in flight across hosts (limit %d)"
                      % (total, limits.total))
        if reason is not None:
            held[sid] = reason
            if blocker is None and priority is not None:
                blocker = (priority, sid)
            continue
        send.append(sid)
        counts[host] = here + 1
        total += 1
    return Admission(tuple(send), held, counts, total)


def plan(servers: Sequence[ServerFacts], s: Settings, limits: Limits,
         inflight: Optional[Mapping[Optional[str], int]] = None,
         inflight_total: Optional[int] = None) -> Tuple[Ranking, Admission]:
    """rank() then admit(): (Ranking, Admission)."""
    ranking = rank(servers, s)
    return ranking, admit(ranking.servers, limits, inflight, inflight_total)
