"""Which servers of a lost host are evacuable, pure: data in, decision out.

This module also holds the plain records every policy module reads
(:class:`ServerFacts`, :class:`ImageFacts`, :class:`FlavorFacts`,
:class:`AggregateFacts`) and the :class:`Problem` they report. The caller
fills them from Nova and Glance (server metadata and tags, the image's
properties and tags, the flavor's extra specs, the metadata of the host
aggregates the server's host belongs to); nothing here does I/O.

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
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

from instanceha.util import timeparse

SERVER = "server"
IMAGE = "image"
FLAVOR = "flavor"
AGGREGATE = "aggregate"
GLOBAL = "global"
#: evacuable scopes, nearest first
SCOPES = (SERVER, IMAGE, FLAVOR, AGGREGATE)

ERROR = "error"
WARNING = "warning"

DEFAULT_KEY = "evacuable"

_EMPTY: Mapping[str, Any] = {}


# -- the records the caller fills ---------------------------------------------

@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """A Glance image: its custom properties and its tags. For a
    volume-backed server, the boot volume's ``volume_image_metadata``."""
    id: str = ""
    name: str = ""
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tags: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FlavorFacts:
    """A flavor and its extra specs (embedded in the server from compute
    microversion 2.47, where only ``original_name`` is given: id may be
    empty)."""
    id: str = ""
    name: str = ""
    extra_specs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AggregateFacts:
    """A host aggregate and its metadata."""
    name: str
    id: str = ""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    hosts: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ServerFacts:
    """One server as the policies see it. ``aggregates``: those of the
    server's host (see :func:`aggregates_of`). ``created_at``: seconds
    since the epoch, None if unknown."""
    id: str
    name: str = ""
    host: Optional[str] = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tags: Tuple[str, ...] = ()
    created_at: Optional[float] = None
    image: Optional[ImageFacts] = None
    flavor: Optional[FlavorFacts] = None
    aggregates: Tuple[AggregateFacts, ...] = ()


@dataclasses.dataclass(frozen=True)
class Problem:
    """A malformed or doubtful value on one object. Hashable: a caller
    keeps a set of those already reported to report each once."""
    level: str              # ERROR | WARNING
    scope: str              # server, image, flavor, aggregate, global
    object_id: str
    object_name: str
    key: str
    value: Optional[str]
    message: str

    def __str__(self):
        return self.message


def _kind(scope):
    return "global aggregate" if scope == GLOBAL else scope


def describe(scope, name, obj_id=""):
    """'flavor m1.pinned (42)', 'server web-1 (5f0c...)', 'image 8d3e...'."""
    if name and obj_id and name != obj_id:
        return "%s %s (%s)" % (_kind(scope), name, obj_id)
    return "%s %s" % (_kind(scope), name or obj_id or "?")


def short(scope, name, obj_id=""):
    """'flavor m1.pinned': the name only, for reasons."""
    return "%s %s" % (_kind(scope), name or obj_id or "?")


def unique(problems: Iterable[Problem]) -> List[Problem]:
    """``problems`` without repeats, first-seen order kept."""
    seen, out = set(), []
    for p in problems:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


# -- filling the records from Nova's and Glance's answers (pure) --------------

#: Nova's '2026-01-31T04:31:45Z' / naive-UTC timestamps to epoch seconds;
#: None for empty or unreadable. Kept for api/history.py, which reads
#: operator input through it.
parse_nova_time = timeparse.epoch_or_none


def aggregates_of(host, aggregates: Iterable[AggregateFacts]):
    """The aggregates that list ``host``, sorted by name."""
    return tuple(sorted((a for a in aggregates if host in a.hosts),
                        key=lambda a: (a.name, a.id)))


def image_from_glance(body: Mapping[str, Any]) -> ImageFacts:
    """Glance v2 lists custom properties as top-level fields of the
    image: every field except ``tags`` is kept as a property."""
    props = {k: v for k, v in body.items() if k != "tags"}
    return ImageFacts(id=str(body.get("id") or ""),
                      name=str(body.get("name") or ""), properties=props,
                      tags=tuple(body.get("tags") or ()))


def aggregate_from_nova(body: Mapping[str, Any]) -> AggregateFacts:
    """One entry of os-aggregates."""
    return AggregateFacts(name=str(body.get("name") or ""),
                          id=str(body.get("uuid") or body.get("id") or ""),
                          metadata=dict(body.get("metadata") or {}),
                          hosts=tuple(body.get("hosts") or ()))


def server_from_nova(body: Mapping[str, Any],
                     image: Optional[ImageFacts] = None,
                     aggregates: Iterable[AggregateFacts] = ()
                     ) -> ServerFacts:
    """A server of GET /servers/detail (microversion >= 2.47 for the
    embedded flavor with extra specs, >= 2.26 for tags). ``image``: the
    Glance image (or the boot volume's image metadata) if the caller read
    it; ``aggregates``: every aggregate, filtered here to the host's."""
    host = body.get("OS-EXT-SRV-ATTR:host")
    flavor = body.get("flavor")
    flavor_facts = None
    if isinstance(flavor, Mapping):
        flavor_facts = FlavorFacts(
            id=str(flavor.get("id") or ""),
            name=str(flavor.get("original_name") or flavor.get("name") or ""),
            extra_specs=dict(flavor.get("extra_specs") or {}))
    if image is None:
        ref = body.get("image")
        if isinstance(ref, Mapping) and ref.get("id"):
            image = ImageFacts(id=str(ref["id"]))
    return ServerFacts(
        id=str(body["id"]), name=str(body.get("name") or ""), host=host,
        metadata=dict(body.get("metadata") or {}),
        tags=tuple(body.get("tags") or ()),
        created_at=parse_nova_time(body.get("created")),
        image=image, flavor=flavor_facts,
        aggregates=aggregates_of(host, aggregates) if host else ())


# -- values -------------------------------------------------------------------

def parse_bool(value):
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


def near_misses(key, names: Iterable[str]):
    """Names that are not ``key`` but look meant as it: another case, or
    ``key`` with a prefix or value after ':' or '=' (``foo:evacuable``,
    ``evacuable=false``). Sorted."""
    low = key.lower()
    out = []
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

    def __post_init__(self):
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
    def from_conf(cls, conf):
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


def _read(scope, obj_id, obj_name, mapping, tags, key, what, tag_what):
    """(Said, [Problem]) for one object's mapping and tags."""
    problems = []
    label = describe(scope, obj_name, obj_id)
    name = short(scope, obj_name, obj_id)

    def problem(level, value, message):
        problems.append(Problem(level, scope, obj_id, obj_name, key,
                                None if value is None else str(value),
                                message))

    answers = []                        # (verdict, how)
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


def _aggregates(aggregates, key):
    """Said for the aggregates of one host together, and problems."""
    saids, problems = [], []
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


def _objects(server: ServerFacts, s: Settings):
    """[(scope, Said or None, [Problem])] nearest first, for the scopes in
    s.sources."""
    out = []
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
    problems, trail, winner = [], [], None
    for scope, said, probs in _objects(server, s):
        problems.extend(probs)
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
    problems = tuple(unique(problems))
    if winner is not None:
        reason = "%s says %s" % (winner.name, winner.how)
        if winner.how.startswith("tag "):
            reason = "%s has the tag %s" % (winner.name, s.key)
        return Decision(server.id, winner.verdict, winner.scope, reason,
                        problems, tuple(trail))
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
    decisions, problems = {}, []
    for server in servers:
        d = decide(server, s)
        decisions[server.id] = d
        problems.extend(d.problems)
    return Verdicts(decisions, tuple(unique(problems)))
