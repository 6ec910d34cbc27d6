"""Which servers of a lost host are evacuable, pure: data in, decision out.

The records it reads (:class:`ServerFacts` and the others) and the
:class:`Problem` it reports are in :mod:`instanceha.policy.facts`, filled
by :mod:`instanceha.policy.facts_nova`; their names stay importable from
here. Nothing here does I/O.

Evacuable tagging (compatible with upstream InstanceHA's ``evacuable``
tag, but with exact matching):

* Tagging off (the default): every server is evacuable.
* Tagging on: the key (default ``evacuable``) is looked up, exactly (no
  substring match, case-sensitive), on

  ====== ========= ==================================================
  rank   scope     where
  ====== ========= ==================================================
  1      server    server metadata ``key=true|false``; server tag ``key``
  2      image     image property ``key=true|false``; image tag ``key``
  3      flavor    flavor extra spec ``key=true|false``
  4      aggregate metadata of the aggregates of the server's host
  ====== ========= ==================================================

  and the nearest scope that says something wins. When none does, the
  server is not evacuable (``untagged`` setting, upstream's behaviour).
* Values: ``true`` or ``false``, case-insensitive, surrounding blanks
  ignored. Nothing else (not ``yes``, ``1``, ``on``): upstream treats every
  value but ``true`` as not evacuable, so accepting ``yes`` would evacuate
  servers upstream leaves alone. Any other value is an error naming the
  object and the value, and that object then says nothing (the next scope
  decides).
* A tag equal to the key means ``true``; there is no tag form of
  ``false`` (use metadata or a property). Tags such as ``evacuable=false``
  or ``Evacuable`` are reported (warning) and ignored, as are keys that
  only resemble the key (``Evacuable``, ``foo:evacuable``).
* Within one object, or among the aggregates of one host, disagreeing
  answers resolve to ``false`` (the least drastic), with a warning.
"""

import dataclasses
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, \
    Tuple

from instanceha.policy.facts import (AGGREGATE, ERROR, FLAVOR, IMAGE, SERVER,
                                     WARNING, Problem, ServerFacts, describe,
                                     short, unique)
# Re-exported: the engine and tests use them as evacuable.<name>.
from instanceha.policy.facts import (  # noqa: F401
    GLOBAL, AggregateFacts, FlavorFacts, ImageFacts)
from instanceha.policy.facts_nova import (  # noqa: F401
    aggregate_from_nova, aggregates_of, image_from_glance, parse_nova_time,
    server_from_nova)

#: evacuable scopes, nearest first
SCOPES = (SERVER, IMAGE, FLAVOR, AGGREGATE)

DEFAULT_KEY = "evacuable"

_EMPTY: Mapping[str, Any] = {}


# -- values -------------------------------------------------------------------

def parse_bool(value: object) -> Optional[bool]:
    """True/False for 'true'/'false' (any case, blanks around), or a
    Python bool; None for anything else."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    return None


def near_misses(key: str, names: Iterable[object]) -> List[str]:
    """Names that are not ``key`` but look meant as it: another case, or
    ``key`` with a prefix or value after ':' or '=' (``foo:evacuable``,
    ``evacuable=false``). Sorted."""
    low = key.lower()
    out: List[str] = []
    for name in names:
        if not isinstance(name, str) or name == key:
            continue
        n = name.strip().lower()
        if (n == low or re.split(r"[:=]", n)[0] == low
                or re.split(r"[:=]", n)[-1] == low):
            out.append(name)
    return sorted(out)


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool = False
    key: str = DEFAULT_KEY
    #: scopes consulted, a subset of SCOPES (upstream's TAGGED_IMAGES,
    #: TAGGED_FLAVORS, TAGGED_AGGREGATES switches)
    sources: Tuple[str, ...] = SCOPES
    #: tagging on and no scope says anything: evacuable? (upstream: no)
    untagged: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key.strip() \
                or self.key != self.key.strip():
            raise ValueError("evacuable key must be a non-empty name without "
                             "blanks around it, not %r" % (self.key,))
        unknown = [s for s in self.sources if s not in SCOPES]
        if unknown:
            raise ValueError("unknown evacuable source(s) %s; known: %s" % (
                ", ".join(map(repr, unknown)), ", ".join(SCOPES)))
        if self.enabled and not self.sources:
            raise ValueError("evacuable tagging is on but no source is "
                             "consulted")
        object.__setattr__(self, "sources", tuple(
            s for s in SCOPES if s in self.sources))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        r = conf.recovery
        return cls(enabled=r.evacuable_tagging, key=r.evacuable_key,
                   sources=tuple(r.evacuable_sources),
                   untagged=r.evacuable_when_untagged)


# -- one object ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Said:
    """What one object says: its verdict (None: nothing) and how."""
    scope: str
    name: str               # 'flavor m1.pinned'
    verdict: Optional[bool]
    how: str                # 'evacuable=false', 'tag evacuable'


def _read(scope: str, obj_id: str, obj_name: str,
          mapping: Optional[Mapping[str, Any]],
          tags: Optional[Iterable[object]], key: str, what: str,
          tag_what: Optional[str]) -> Tuple[Said, List[Problem]]:
    """(Said, [Problem]) for one object's mapping and tags."""
    problems: List[Problem] = []
    label = describe(scope, obj_name, obj_id)
    name = short(scope, obj_name, obj_id)

    def problem(level: str, value: object, message: str) -> None:
        problems.append(Problem(level, scope, obj_id, obj_name, key,
                                None if value is None else str(value),
                                message))

    answers: List[Tuple[bool, str]] = []    # (verdict, how)
    mapping = mapping or _EMPTY
    if key in mapping:
        raw = mapping[key]
        verdict = parse_bool(raw)
        if verdict is None:
            problem(ERROR, raw, "%s: %s %s=%r is neither true nor false; "
                    "ignored" % (label, what, key, raw))
        else:
            answers.append((verdict, "%s=%s" % (key, str(raw).strip())))
    for other in near_misses(key, mapping):
        problem(WARNING, mapping[other],
                "%s: %s %r is not %r (exact match only); ignored"
                % (label, what, other, key))
    if tag_what:
        tags = tuple(t for t in (tags or ()) if isinstance(t, str))
        if key in tags:
            answers.append((True, "tag %s" % key))
        for other in near_misses(key, tags):
            problem(WARNING, other,
                    "%s: tag %r is not understood: only the tag %r (true) "
                    "is; say false with the %s %s=false; ignored"
                    % (label, other, key, what, key))
    if not answers:
        return Said(scope, name, None, ""), problems
    verdicts = {v for v, _ in answers}
    if len(verdicts) > 1:
        problem(WARNING, None, "%s says both %s: false wins" % (
            label, " and ".join(h for _, h in answers)))
        how = next(h for v, h in answers if v is False)
        return Said(scope, name, False, how), problems
    return Said(scope, name, answers[0][0], answers[0][1]), problems


def _aggregates(aggregates: Iterable[AggregateFacts], key: str
                ) -> Tuple[Optional[Said], List[Problem]]:
    """Said for the aggregates of one host together, and problems."""
    saids: List[Said] = []
    problems: List[Problem] = []
    for agg in sorted(aggregates, key=lambda a: (a.name, a.id)):
        said, probs = _read(AGGREGATE, agg.id, agg.name, agg.metadata, (),
                            key, "metadata", None)
        problems.extend(probs)
        if said.verdict is not None:
            saids.append(said)
    if not saids:
        return None, problems
    falses = [s for s in saids if s.verdict is False]
    if falses and len(falses) < len(saids):
        trues = [s for s in saids if s.verdict is True]
        first = falses[0]
        problems.append(Problem(
            WARNING, AGGREGATE, "", ", ".join(s.name for s in saids), key,
            None, "host aggregates disagree on %s: %s say false, %s say "
            "true: false wins" % (key, ", ".join(s.name for s in falses),
                                  ", ".join(s.name for s in trues))))
        return first, problems
    return (falses or saids)[0], problems


def _objects(server: ServerFacts, s: Settings
             ) -> List[Tuple[str, Optional[Said], List[Problem]]]:
    """[(scope, Said or None, [Problem])] nearest first, for the scopes in
    s.sources."""
    out: List[Tuple[str, Optional[Said], List[Problem]]] = []
    said: Optional[Said]
    for scope in s.sources:
        if scope == SERVER:
            said, probs = _read(SERVER, server.id, server.name,
                                server.metadata, server.tags, s.key,
                                "metadata", "tag")
        elif scope == IMAGE:
            img = server.image
            if img is None:
                out.append((scope, None, []))
                continue
            said, probs = _read(IMAGE, img.id, img.name, img.properties,
                                img.tags, s.key, "property", "tag")
        elif scope == FLAVOR:
            fl = server.flavor
            if fl is None:
                out.append((scope, None, []))
                continue
            said, probs = _read(FLAVOR, fl.id, fl.name, fl.extra_specs, (),
                                s.key, "extra spec", None)
        else:
            said, probs = _aggregates(server.aggregates, s.key)
        out.append((scope, said, probs))
    return out


# -- the decision -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Decision:
    server_id: str
    evacuable: bool
    #: the scope that decided: server|image|flavor|aggregate, or "off"
    #: (tagging off) or "untagged" (no scope said anything)
    source: str
    #: 'flavor m1.pinned says evacuable=false'
    reason: str
    problems: Tuple[Problem, ...] = ()
    #: every scope consulted and what it said, nearest first:
    #: (scope, 'flavor m1.pinned says evacuable=false' | 'not set' | ...)
    trail: Tuple[Tuple[str, str], ...] = ()


def decide(server: ServerFacts, s: Settings) -> Decision:
    """Is ``server`` evacuable, and why."""
    if not s.enabled:
        return Decision(server.id, True, "off",
                        "evacuable tagging is off: every server is evacuable")
    found: List[Problem] = []
    trail: List[Tuple[str, str]] = []
    winner: Optional[Said] = None
    for scope, said, probs in _objects(server, s):
        found.extend(probs)
        if said is None or said.verdict is None:
            if said is None and scope in (IMAGE, FLAVOR):
                trail.append((scope, "no %s known" % scope))
            elif said is None:
                trail.append((scope, "no host aggregate says %s" % s.key))
            else:
                trail.append((scope, "%s: %s not set" % (said.name, s.key)))
            continue
        text = "%s says %s" % (said.name, said.how)
        if winner is None:
            winner = said
            trail.append((scope, text))
        else:
            trail.append((scope, text + " (overridden by %s)" % winner.name))
    problems = tuple(unique(found))
    if winner is not None:
        reason = "%s says %s" % (winner.name, winner.how)
        if winner.how.startswith("tag "):
            reason = "%s has the tag %s" % (winner.name, s.key)
        # (Its verdict is not None: a scope that says none is passed by.)
        return Decision(server.id, bool(winner.verdict), winner.scope,
                        reason, problems, tuple(trail))
    where = ", ".join(s.sources)
    if s.untagged:
        reason = ("no %s on %s: evacuable (untagged servers are evacuated)"
                  % (s.key, where))
    else:
        reason = ("no %s on %s: not evacuable (evacuable tagging is on and "
                  "untagged servers are left alone)" % (s.key, where))
    return Decision(server.id, s.untagged, "untagged", reason, problems,
                    tuple(trail))


@dataclasses.dataclass(frozen=True)
class Verdicts:
    decisions: Dict[str, Decision]      # server id -> Decision, in order
    problems: Tuple[Problem, ...]       # each once, first-seen order

    @property
    def evacuable(self) -> List[str]:
        return [i for i, d in self.decisions.items() if d.evacuable]

    @property
    def skipped(self) -> Dict[str, str]:
        """server id -> why it is not evacuable."""
        return {i: d.reason for i, d in self.decisions.items()
                if not d.evacuable}


def decide_all(servers: Sequence[ServerFacts], s: Settings) -> Verdicts:
    """Decisions for many servers; a problem of an object shared by
    several servers (a flavor, an aggregate) is listed once."""
    decisions: Dict[str, Decision] = {}
    problems: List[Problem] = []
    for server in servers:
        d = decide(server, s)
        decisions[server.id] = d
        problems.extend(d.problems)
    return Verdicts(decisions, tuple(unique(problems)))
