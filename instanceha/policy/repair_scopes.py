"""What each scope says about a server's repair: levels and suspension markers.

:func:`scopes` lists the objects consulted, nearest first (the server, its
host's aggregates, the global aggregate); :func:`level_at` and
:func:`marker_at` read one object's :class:`LevelSetting` and
:class:`Marker` (a malformed value noted as a Problem);
:func:`note_misspelt` notes keys that look like a misspelt repair or
suspension key. Pure; the rules are in :mod:`instanceha.policy.repair`.
"""

import dataclasses
import difflib
from typing import Any, List, Mapping, Optional

from instanceha.policy.facts import (AGGREGATE, ERROR, GLOBAL, SERVER,
                                     WARNING, AggregateFacts, Problem,
                                     ServerFacts, describe, short)
from instanceha.policy.repair_values import (AnyLevel, Level, Settings,
                                             format_time, parse_level,
                                             parse_until)

#: scopes, nearest first
SCOPES = (SERVER, AGGREGATE, GLOBAL)
DEFAULT = "default"

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
    def where(self) -> str:
        return short(self.scope, self.object_name, self.object_id)

    def describe(self) -> str:
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
    level: AnyLevel
    valid: bool = True          # False: malformed, counted as none

    @property
    def where(self) -> str:
        if self.scope == DEFAULT:
            return "the default ([recovery] repair_level)"
        return short(self.scope, self.object_name, self.object_id)

    def describe(self) -> str:
        if self.scope == DEFAULT:
            return "%s %s" % (self.where, self.level.label)
        if not self.valid:
            return "%s says %s=%r (malformed, counted as none)" % (
                self.where, self.key, self.value)
        return "%s says %s=%s" % (self.where, self.key, self.value)


@dataclasses.dataclass(frozen=True)
class Scoped:
    scope: str
    id: str
    name: str
    metadata: Mapping[str, Any]


def scopes(server: ServerFacts, s: Settings,
           global_scope: Optional[AggregateFacts] = None) -> List[Scoped]:
    """The objects consulted, nearest first: the server, its host's
    aggregates (by name, without the global one), the global aggregate."""
    out = [Scoped(SERVER, server.id, server.name, server.metadata or {})]
    for agg in sorted(server.aggregates, key=lambda a: (a.name, a.id)):
        if s.global_aggregate is not None and agg.name == s.global_aggregate:
            continue
        out.append(Scoped(AGGREGATE, agg.id, agg.name, agg.metadata or {}))
    if global_scope is not None:
        out.append(Scoped(GLOBAL, global_scope.id, global_scope.name,
                        global_scope.metadata or {}))
    return out


def note_misspelt(obj: Scoped, s: Settings, problems: List[Problem]
                  ) -> None:
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


def level_at(obj: Scoped, s: Settings, problems: List[Problem]
             ) -> Optional[LevelSetting]:
    if s.repair_key not in obj.metadata:
        return None
    raw = obj.metadata[s.repair_key]
    level, why = parse_level(raw, s.levels)
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


def marker_at(obj: Scoped, s: Settings, now: float,
              problems: List[Problem]) -> Optional[Marker]:
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
