"""Repair levels, scopes and suspensions, pure: data in, decision out.

After Ganeti's auto-repair design: how far instanceha may go to repair a
server is a *level*, ordered by risk; each level allows every lower one.

============ ===== =======================================================
level        rank  allows
============ ===== =======================================================
``none``     0     nothing automatic
(reboot)     10    reserved: restart in place (not implemented yet)
``evacuate`` 20    rebuild the server on another host once its host is
                   fenced
(rebuild)    30    reserved: rebuild from the image, losing local data
============ ===== =======================================================

The level is set with a metadata key (default ``instanceha:repair``) at
three scopes, and the nearest scope that sets it wins:

1. server: the server's metadata;
2. aggregate: the metadata of the host aggregates of the server's host;
   when several set it, the lowest level wins (a warning names them);
3. global: the metadata of one aggregate named by configuration
   (``[recovery] global_aggregate``, its hosts do not matter);
4. otherwise the configured default (``[recovery] repair_level``).

With ``server_may_raise`` off, a server's own level may only lower the
level the farther scopes give (server metadata is writable by its owner).

A suspension (default key ``instanceha:suspended_until``, value an
ISO-8601 time, UTC unless an offset is given, or ``forever``) at *any*
scope stops automatic action for every server under it until it expires,
whatever the level. It cannot be lifted from a nearer scope: remove the
marker. An expired marker is reported so that it can be removed.

Malformed values fail towards doing nothing:

* a level that is not ``none`` or ``evacuate`` counts as ``none`` at that
  scope (it still wins over farther scopes), with an error;
* a suspension that is neither a time nor ``forever`` counts as
  suspended forever, with an error, until it is fixed or removed.

``now`` is an argument (seconds since the epoch); nothing reads a clock.
"""

import dataclasses
import datetime
import difflib
import enum
import re
from typing import Any, Mapping, Optional, Tuple

from instanceha.util import timeparse

from instanceha.policy.evacuable import (AGGREGATE, ERROR, GLOBAL, SERVER,
                                         WARNING, AggregateFacts, Problem,
                                         ServerFacts, describe, short, unique)

DEFAULT_REPAIR_KEY = "instanceha:repair"
DEFAULT_SUSPEND_KEY = "instanceha:suspended_until"
FOREVER = "forever"

#: scopes, nearest first
SCOPES = (SERVER, AGGREGATE, GLOBAL)
DEFAULT = "default"


class Level(enum.IntEnum):
    """Repair levels by rank; gaps keep room for reboot and rebuild."""
    NONE = 0
    EVACUATE = 20

    @property
    def label(self):
        return self.name.lower()


#: levels planned but not implemented: named in errors, never returned
RESERVED = {"reboot": 10, "rebuild": 30}


def parse_level(value) -> Tuple[Optional[Level], Optional[str]]:
    """(Level, None) or (None, why not) for a metadata value."""
    if not isinstance(value, str):
        return None, "is not a level name"
    text = value.strip().lower()
    for level in Level:
        if level.label == text:
            return level, None
    if text in RESERVED:
        return None, "is a level not supported yet"
    return None, "is not a level (%s)" % " or ".join(
        level.label for level in Level)


_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})"
    r"(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"\s*(Z|z|UTC|[+-]\d{2}:?\d{2})?$")


def parse_until(value) -> Tuple[bool, Optional[float], Optional[str]]:
    """(ok, until, why not) for a suspension value: until is seconds
    since the epoch, None for ``forever``. A time without an offset is
    UTC; a date without a time is refused (which end of the day?)."""
    if not isinstance(value, str):
        return False, None, "is not a time"
    text = value.strip()
    if text.lower() == FOREVER:
        return True, None, None
    m = _TIME.match(text)
    if not m:
        return False, None, ("is neither 'forever' nor an ISO-8601 time "
                             "such as 2030-01-31T18:00:00Z")
    # The pattern is what an operator may write; the conversion is the
    # one parser's (util.timeparse), given the canonical separator and
    # offset.
    zone = m.group(8)
    offset = "+00:00"
    if zone and zone.upper() not in ("Z", "UTC"):
        digits = zone[1:].replace(":", "")
        if int(digits[:2]) > 23 or int(digits[2:]) > 59:
            return False, None, "has an impossible UTC offset"
        offset = "%s%s:%s" % (zone[0], digits[:2], digits[2:])
    stamp = text[:m.start(8)].rstrip() if zone else text
    try:
        until = timeparse.epoch("%sT%s%s" % (stamp[:10], stamp[11:], offset))
    except ValueError as e:
        return False, None, "is not a valid time (%s)" % e
    return True, until, None


def format_time(epoch: Optional[float]) -> str:
    """'2030-01-31T18:00:00Z', or 'forever' for None."""
    if epoch is None:
        return FOREVER
    t = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Settings:
    repair_key: str = DEFAULT_REPAIR_KEY
    suspend_key: str = DEFAULT_SUSPEND_KEY
    #: the level when no scope sets one
    default_level: Level = Level.EVACUATE
    #: name of the aggregate whose metadata is the global scope
    global_aggregate: Optional[str] = None
    #: False: a server's own level may lower, never raise, the level its
    #: aggregates or the global scope give (server metadata is writable
    #: by the server's owner)
    server_may_raise: bool = True
    #: other metadata keys in use (priority, evacuable): never reported
    #: as looking like a misspelt repair or suspension key
    known_keys: Tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("repair_key", "suspend_key"):
            key = getattr(self, name)
            if not isinstance(key, str) or not key.strip() \
                    or key != key.strip():
                raise ValueError("%s must be a non-empty name without "
                                 "blanks around it, not %r" % (name, key))
        if self.repair_key == self.suspend_key:
            raise ValueError("repair_key and suspend_key must differ")
        object.__setattr__(self, "default_level", Level(self.default_level))

    @classmethod
    def from_conf(cls, conf):
        r = conf.recovery
        level, why = parse_level(r.repair_level)
        if level is None:
            raise ValueError("[recovery] repair_level %r %s" % (
                r.repair_level, why))
        return cls(repair_key=r.repair_key, suspend_key=r.suspend_key,
                   default_level=level,
                   global_aggregate=r.global_aggregate or None,
                   server_may_raise=r.server_may_raise_level,
                   known_keys=(r.priority_key, r.evacuable_key))


# -- results ------------------------------------------------------------------

ACTIVE = "active"
EXPIRED = "expired"
MALFORMED = "malformed"


@dataclasses.dataclass(frozen=True)
class Marker:
    """A suspension marker found on one object."""
    scope: str
    object_id: str
    object_name: str
    key: str
    value: str
    until: Optional[float]      # None: forever (or malformed)
    state: str                  # ACTIVE | EXPIRED | MALFORMED

    @property
    def where(self):
        return short(self.scope, self.object_name, self.object_id)

    def describe(self):
        if self.state == MALFORMED:
            return ("%s: %s=%r is malformed, treated as suspended until "
                    "fixed or removed" % (self.where, self.key, self.value))
        if self.state == EXPIRED:
            return "%s: %s=%s expired at %s (remove it)" % (
                self.where, self.key, self.value, format_time(self.until))
        return "%s: suspended %s (%s=%s)" % (
            self.where, "forever" if self.until is None else
            "until " + format_time(self.until), self.key, self.value)


@dataclasses.dataclass(frozen=True)
class LevelSetting:
    """A level set on one object (or the configured default)."""
    scope: str                  # server | aggregate | global | default
    object_id: str
    object_name: str
    key: str
    value: Optional[str]        # the raw value; None for the default
    level: Level
    valid: bool = True          # False: malformed, counted as none

    @property
    def where(self):
        if self.scope == DEFAULT:
            return "the default ([recovery] repair_level)"
        return short(self.scope, self.object_name, self.object_id)

    def describe(self):
        if self.scope == DEFAULT:
            return "%s %s" % (self.where, self.level.label)
        if not self.valid:
            return "%s says %s=%r (malformed, counted as none)" % (
                self.where, self.key, self.value)
        return "%s says %s=%s" % (self.where, self.key, self.value)


@dataclasses.dataclass(frozen=True)
class RepairDecision:
    server_id: str
    level: Level
    level_from: LevelSetting
    suspended: bool
    #: while suspended: when every active marker has expired (None: never,
    #: a marker says forever or is malformed)
    until: Optional[float]
    #: the markers that suspend (active and malformed)
    suspensions: Tuple[Marker, ...]
    #: expired markers, for the caller to remove
    expired: Tuple[Marker, ...]
    problems: Tuple[Problem, ...]
    reason: str

    def allows(self, needed: Level = Level.EVACUATE) -> bool:
        """May instanceha start a repair of level ``needed`` now?"""
        return not self.suspended and self.level >= needed

    def why_not(self, needed: Level = Level.EVACUATE) -> Optional[str]:
        """None when allowed, else the reason (for status and logs)."""
        if self.allows(needed):
            return None
        return self.reason


# -- reading the scopes -------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Obj:
    scope: str
    id: str
    name: str
    metadata: Mapping[str, Any]


def scopes(server: ServerFacts, s: Settings,
           global_scope: Optional[AggregateFacts] = None):
    """The objects consulted, nearest first: the server, its host's
    aggregates (by name, without the global one), the global aggregate."""
    out = [_Obj(SERVER, server.id, server.name, server.metadata or {})]
    for agg in sorted(server.aggregates, key=lambda a: (a.name, a.id)):
        if s.global_aggregate is not None and agg.name == s.global_aggregate:
            continue
        out.append(_Obj(AGGREGATE, agg.id, agg.name, agg.metadata or {}))
    if global_scope is not None:
        out.append(_Obj(GLOBAL, global_scope.id, global_scope.name,
                        global_scope.metadata or {}))
    return out


def _misspelt(obj, s, problems):
    wanted = {s.repair_key: s.repair_key.lower(),
              s.suspend_key: s.suspend_key.lower()}
    ignore = {s.repair_key, s.suspend_key} | set(s.known_keys)
    for name in obj.metadata:
        if not isinstance(name, str) or name in ignore:
            continue
        low = name.strip().lower().replace("-", "_")
        for key, key_low in wanted.items():
            if low == key_low or difflib.SequenceMatcher(
                    None, low, key_low).ratio() >= 0.85:
                problems.append(Problem(
                    WARNING, obj.scope, obj.id, obj.name, name,
                    str(obj.metadata[name]),
                    "%s: metadata key %r is not %r (exact match only); "
                    "ignored" % (describe(obj.scope, obj.name, obj.id),
                                 name, key)))
                break


def _level_at(obj, s, problems) -> Optional[LevelSetting]:
    if s.repair_key not in obj.metadata:
        return None
    raw = obj.metadata[s.repair_key]
    level, why = parse_level(raw)
    if level is None:
        problems.append(Problem(
            ERROR, obj.scope, obj.id, obj.name, s.repair_key, str(raw),
            "%s: %s=%r %s; counted as none (no automatic repair) until "
            "fixed" % (describe(obj.scope, obj.name, obj.id), s.repair_key,
                       raw, why)))
        return LevelSetting(obj.scope, obj.id, obj.name, s.repair_key,
                            str(raw), Level.NONE, valid=False)
    return LevelSetting(obj.scope, obj.id, obj.name, s.repair_key,
                        raw.strip(), level)


def _marker_at(obj, s, now, problems) -> Optional[Marker]:
    if s.suspend_key not in obj.metadata:
        return None
    raw = obj.metadata[s.suspend_key]
    ok, until, why = parse_until(raw)
    if not ok:
        problems.append(Problem(
            ERROR, obj.scope, obj.id, obj.name, s.suspend_key, str(raw),
            "%s: %s=%r %s; treated as suspended until fixed or removed"
            % (describe(obj.scope, obj.name, obj.id), s.suspend_key, raw,
               why)))
        return Marker(obj.scope, obj.id, obj.name, s.suspend_key, str(raw),
                      None, MALFORMED)
    state = EXPIRED if until is not None and until <= now else ACTIVE
    return Marker(obj.scope, obj.id, obj.name, s.suspend_key, raw.strip(),
                  until, state)


@dataclasses.dataclass(frozen=True)
class Line:
    """One object's part in a decision, for explain."""
    scope: str
    where: str                  # 'aggregate rack1'
    key: str
    value: Optional[str]        # None: not set
    note: str                   # 'wins', 'overridden by ...', 'not set', ...


def _evaluate(server, now, s, global_scope):
    problems, lines = [], []
    objs = scopes(server, s, global_scope)
    settings_by_scope = {scope: [] for scope in SCOPES}
    markers = []
    for obj in objs:
        _misspelt(obj, s, problems)
        setting = _level_at(obj, s, problems)
        if setting is not None:
            settings_by_scope[obj.scope].append(setting)
        marker = _marker_at(obj, s, now, problems)
        if marker is not None:
            markers.append(marker)

    # The level: nearest scope; within a scope the lowest level.
    chosen, outer = None, None
    for scope in SCOPES:
        found = settings_by_scope[scope]
        if not found:
            continue
        lowest = min(found, key=lambda x: (x.level, not x.valid))
        if len({x.level for x in found}) > 1:
            problems.append(Problem(
                WARNING, scope, "", ", ".join(x.object_name for x in found),
                s.repair_key, None,
                "%s disagree on %s (%s): the lowest, %s, wins" % (
                    "host aggregates" if scope == AGGREGATE else scope,
                    s.repair_key, ", ".join(
                        "%s=%s" % (x.where, x.value) for x in found),
                    lowest.level.label)))
        if chosen is None:
            chosen = lowest
        elif outer is None:
            outer = lowest
    default = LevelSetting(DEFAULT, "", "", s.repair_key, None,
                           s.default_level)
    if chosen is None:
        chosen = default
    elif outer is None:
        outer = default
    capped = None
    if (chosen.scope == SERVER and not s.server_may_raise
            and chosen.level > outer.level):
        problems.append(Problem(
            WARNING, SERVER, server.id, server.name, s.repair_key,
            chosen.value,
            "%s asks %s=%s, above %s %s; a server may only lower its level "
            "([recovery] server_may_raise_level = false)" % (
                describe(SERVER, server.name, server.id), s.repair_key,
                chosen.value, outer.where, outer.level.label)))
        capped, chosen = chosen, outer

    # Suspension: any active or malformed marker, at any scope.
    suspending = tuple(m for m in markers if m.state != EXPIRED)
    expired = tuple(m for m in markers if m.state == EXPIRED)
    suspended = bool(suspending)
    until = None
    if suspended and all(m.until is not None for m in suspending):
        until = max(m.until for m in suspending)

    # Lines for explain, object by object.
    for obj in objs:
        where = short(obj.scope, obj.name, obj.id)
        setting = next((x for x in settings_by_scope[obj.scope]
                        if x.object_id == obj.id
                        and x.object_name == obj.name), None)
        if setting is None:
            lines.append(Line(obj.scope, where, s.repair_key, None,
                              "not set"))
        elif setting is chosen:
            lines.append(Line(obj.scope, where, s.repair_key, setting.value,
                              "wins" if setting.valid else
                              "malformed, counted as none; wins"))
        elif setting is capped:
            lines.append(Line(obj.scope, where, s.repair_key, setting.value,
                              "ignored: a server may not raise its level "
                              "above %s" % chosen.where))
        else:
            why = ("malformed, counted as none; " if not setting.valid
                   else "")
            lines.append(Line(obj.scope, where, s.repair_key, setting.value,
                              why + "overridden by %s" % chosen.where))
        marker = next((m for m in markers if m.scope == obj.scope
                       and m.object_id == obj.id
                       and m.object_name == obj.name), None)
        if marker is None:
            lines.append(Line(obj.scope, where, s.suspend_key, None,
                              "not set"))
        elif marker.state == ACTIVE:
            lines.append(Line(obj.scope, where, s.suspend_key, marker.value,
                              "suspends until %s" % format_time(
                                  marker.until)
                              if marker.until is not None
                              else "suspends forever"))
        elif marker.state == EXPIRED:
            lines.append(Line(obj.scope, where, s.suspend_key, marker.value,
                              "expired at %s: no effect, remove it"
                              % format_time(marker.until)))
        else:
            lines.append(Line(obj.scope, where, s.suspend_key, marker.value,
                              "malformed: suspends until fixed or removed"))
    if chosen is default:
        lines.append(Line(DEFAULT, default.where, s.repair_key,
                          default.level.label, "wins"))

    level_text = "repair level %s from %s" % (chosen.level.label,
                                              chosen.where)
    if chosen.scope != DEFAULT:
        level_text += " (%s=%s)" % (chosen.key, chosen.value)
    if suspended:
        first = sorted(suspending, key=lambda m: (
            m.until is not None, -(m.until or 0)))[0]
        reason = "automatic repair suspended %s by %s (%s=%s)" % (
            "until " + format_time(until) if until is not None else
            ("until fixed" if first.state == MALFORMED else "forever"),
            first.where, first.key, first.value)
        if len(suspending) > 1:
            reason += " and %d more marker(s)" % (len(suspending) - 1)
        reason += "; " + level_text
    else:
        reason = level_text
        if chosen.level < Level.EVACUATE:
            reason += ": no automatic evacuation"
    decision = RepairDecision(
        server.id, chosen.level, chosen, suspended, until if suspended
        else None, suspending, expired, tuple(unique(problems)), reason)
    return decision, tuple(lines)


def decide(server: ServerFacts, now: float, s: Settings,
           global_scope: Optional[AggregateFacts] = None) -> RepairDecision:
    """The repair level and suspension that apply to ``server`` at
    ``now``. ``global_scope``: the aggregate named by
    ``s.global_aggregate``, if any (read by the caller)."""
    return _evaluate(server, now, s, global_scope)[0]


@dataclasses.dataclass(frozen=True)
class Explanation:
    decision: RepairDecision
    lines: Tuple[Line, ...]

    def text(self) -> str:
        """What ``instanceha policy explain SERVER`` prints."""
        d = self.decision
        out = [d.reason]
        if d.allows(Level.EVACUATE):
            out.append("evacuation allowed")
        else:
            out.append("evacuation not allowed")
        for line in self.lines:
            if line.value is None:
                out.append("  %s: %s %s" % (line.where, line.key, line.note))
            else:
                out.append("  %s: %s=%s: %s" % (line.where, line.key,
                                                line.value, line.note))
        for p in d.problems:
            out.append("  %s: %s" % (p.level, p.message))
        return "\n".join(out)

    def as_dict(self) -> dict:
        """The same, for the JSON API."""
        d = self.decision
        return {
            "server": d.server_id,
            "level": d.level.label,
            "level_from": {"scope": d.level_from.scope,
                           "object": d.level_from.where,
                           "value": d.level_from.value,
                           "valid": d.level_from.valid},
            "suspended": d.suspended,
            "suspended_until": (format_time(d.until) if d.suspended
                                else None),
            "evacuation_allowed": d.allows(Level.EVACUATE),
            "reason": d.reason,
            "expired": [dataclasses.asdict(m) for m in d.expired],
            "lines": [dataclasses.asdict(x) for x in self.lines],
            "problems": [dataclasses.asdict(p) for p in d.problems],
        }


def explain(server: ServerFacts, now: float, s: Settings,
            global_scope: Optional[AggregateFacts] = None) -> Explanation:
    """The decision with every object consulted and what it said."""
    decision, lines = _evaluate(server, now, s, global_scope)
    return Explanation(decision, lines)
