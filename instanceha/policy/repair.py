"""Repair levels, scopes and suspensions, pure: data in, decision out.

After Ganeti's auto-repair design: how far instanceha may go to repair a
server is a *level*, ordered by risk; each level allows every lower one.

============ ===== =======================================================
level        rank  allows
============ ===== =======================================================
``none``     0     nothing automatic
``restart``  5     instance repair: start a server that stopped by itself
``reboot``   10    instance repair: hard-reboot it in place
``migrate``  15    instance repair: cold-migrate it elsewhere and start it
``evacuate`` 20    rebuild the server on another host once its host is
                   fenced
``rebuild``  30    instance repair: rebuild it from its image, losing its
                   local disks (also needs [instance_repair]
                   allow_rebuild)
============ ===== =======================================================

``restart``, ``reboot``, ``migrate`` and ``rebuild`` are levels only while
instance repair is on (``Settings.instance_levels``, from
``[instance_repair] enabled``: the levels are then
:class:`~instanceha.policy.repair_values.Ladder`'s); while it is off they
are refused as malformed, i.e. ``none``, and the levels are
:class:`~instanceha.policy.repair_values.Level`'s two. The ranks are the
same in both, so ``decision.allows(Ladder.REBOOT)`` and
``decision.allows(Level.EVACUATE)`` compare as expected.

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

* a level that is not one of the levels above (``none`` or ``evacuate``
  while instance repair is off) counts as ``none`` at that scope (it
  still wins over farther scopes), with an error;
* a suspension that is neither a time nor ``forever`` counts as
  suspended forever, with an error, until it is fixed or removed.

``now`` is an argument (seconds since the epoch); nothing reads a clock.

The values are read in :mod:`~instanceha.policy.repair_values`, what each
scope says in :mod:`~instanceha.policy.repair_scopes`; their public names
stay importable from here.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from instanceha.policy.facts import (AGGREGATE, SERVER, WARNING,
                                     AggregateFacts, Problem, ServerFacts,
                                     describe, short, unique)
from instanceha.policy.repair_scopes import (
    ACTIVE, DEFAULT, EXPIRED, MALFORMED, SCOPES, LevelSetting, Marker,
    Scoped, level_at, marker_at, note_misspelt, scopes)
from instanceha.policy.repair_values import (AnyLevel, Level, Settings,
                                             format_time)
# Re-exported: the engine, the API and tests use them as repair.<name>.
from instanceha.policy.facts import GLOBAL  # noqa: F401
from instanceha.policy.repair_values import (  # noqa: F401
    DEFAULT_REPAIR_KEY, DEFAULT_SUSPEND_KEY, RESERVED, Ladder, parse_level,
    parse_until)


@dataclasses.dataclass(frozen=True)
class RepairDecision:
    server_id: str
    level: AnyLevel
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

    def allows(self, needed: AnyLevel = Level.EVACUATE) -> bool:
        """May instanceha start a repair of level ``needed`` now?"""
        return not self.suspended and self.level >= needed

    def why_not(self, needed: AnyLevel = Level.EVACUATE) -> Optional[str]:
        """None when allowed, else the reason (for status and logs)."""
        if self.allows(needed):
            return None
        return self.reason


@dataclasses.dataclass(frozen=True)
class Line:
    """One object's part in a decision, for explain."""
    scope: str
    where: str                  # 'aggregate rack1'
    key: str
    value: Optional[str]        # None: not set
    note: str                   # 'wins', 'overridden by ...', 'not set', ...


def _evaluate(server: ServerFacts, now: float, s: Settings,
              global_scope: Optional[AggregateFacts]
              ) -> Tuple["RepairDecision", Tuple[Line, ...]]:
    problems: List[Problem] = []
    objs = scopes(server, s, global_scope)
    settings_by_scope, markers = _gather(objs, now, s, problems)
    chosen, capped, default = _choose_level(server, s, settings_by_scope,
                                            problems)
    # Suspension: any active or malformed marker, at any scope.
    suspending = tuple(m for m in markers if m.state != EXPIRED)
    expired = tuple(m for m in markers if m.state == EXPIRED)
    suspended = bool(suspending)
    until = None
    if suspended and all(m.until is not None for m in suspending):
        until = max(m.until for m in suspending if m.until is not None)
    lines = _explain(objs, s, settings_by_scope, markers, chosen, capped)
    if chosen is default:
        lines.append(Line(DEFAULT, default.where, s.repair_key,
                          default.level.label, "wins"))
    reason = _reason(chosen, suspending, until)
    decision = RepairDecision(
        server.id, chosen.level, chosen, suspended, until if suspended
        else None, suspending, expired, tuple(unique(problems)), reason)
    return decision, tuple(lines)


def _gather(objs: Sequence[Scoped], now: float, s: Settings,
            problems: List[Problem]
            ) -> Tuple[Dict[str, List[LevelSetting]], List[Marker]]:
    """({scope: [LevelSetting]}, [markers]) set on ``objs``; what is
    misspelt or malformed is added to ``problems``."""
    settings_by_scope: Dict[str, List[LevelSetting]] = {
        scope: [] for scope in SCOPES}
    markers: List[Marker] = []
    for obj in objs:
        note_misspelt(obj, s, problems)
        setting = level_at(obj, s, problems)
        if setting is not None:
            settings_by_scope[obj.scope].append(setting)
        marker = marker_at(obj, s, now, problems)
        if marker is not None:
            markers.append(marker)
    return settings_by_scope, markers


def _choose_level(server: ServerFacts, s: Settings,
                  settings_by_scope: Mapping[str, Sequence[LevelSetting]],
                  problems: List[Problem]
                  ) -> Tuple[LevelSetting, Optional[LevelSetting],
                             LevelSetting]:
    """(chosen, capped, default) LevelSettings: the nearest scope's, within
    a scope the lowest level; a server's own level above the next scope's
    is capped (``capped``: the server's, else None) unless
    ``s.server_may_raise``."""
    chosen: Optional[LevelSetting] = None
    outer: Optional[LevelSetting] = None
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
    if outer is None:
        # (Also when chosen is the default: then it is never read.)
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
    return chosen, capped, default


def _explain(objs: Sequence[Scoped], s: Settings,
             settings_by_scope: Mapping[str, Sequence[LevelSetting]],
             markers: Sequence[Marker], chosen: LevelSetting,
             capped: Optional[LevelSetting]) -> List[Line]:
    """[Line] for explain, object by object: its level setting's part in
    the decision, then its suspension marker's."""
    lines: List[Line] = []
    for obj in objs:
        where = short(obj.scope, obj.name, obj.id)
        setting = next((x for x in settings_by_scope[obj.scope]
                        if x.object_id == obj.id
                        and x.object_name == obj.name), None)
        lines.append(_level_line(obj, where, s, setting, chosen, capped))
        marker = next((m for m in markers if m.scope == obj.scope
                       and m.object_id == obj.id
                       and m.object_name == obj.name), None)
        lines.append(_marker_line(obj, where, s, marker))
    return lines


def _level_line(obj: Scoped, where: str, s: Settings,
                setting: Optional[LevelSetting], chosen: LevelSetting,
                capped: Optional[LevelSetting]) -> Line:
    if setting is None:
        return Line(obj.scope, where, s.repair_key, None, "not set")
    if setting is chosen:
        return Line(obj.scope, where, s.repair_key, setting.value,
                    "wins" if setting.valid else
                    "malformed, counted as none; wins")
    if setting is capped:
        return Line(obj.scope, where, s.repair_key, setting.value,
                    "ignored: a server may not raise its level "
                    "above %s" % chosen.where)
    why = "malformed, counted as none; " if not setting.valid else ""
    return Line(obj.scope, where, s.repair_key, setting.value,
                why + "overridden by %s" % chosen.where)


def _marker_line(obj: Scoped, where: str, s: Settings,
                 marker: Optional[Marker]) -> Line:
    if marker is None:
        return Line(obj.scope, where, s.suspend_key, None, "not set")
    if marker.state == ACTIVE:
        return Line(obj.scope, where, s.suspend_key, marker.value,
                    "suspends until %s" % format_time(marker.until)
                    if marker.until is not None else "suspends forever")
    if marker.state == EXPIRED:
        return Line(obj.scope, where, s.suspend_key, marker.value,
                    "expired at %s: no effect, remove it"
                    % format_time(marker.until))
    return Line(obj.scope, where, s.suspend_key, marker.value,
                "malformed: suspends until fixed or removed")


def _reason(chosen: LevelSetting, suspending: Sequence[Marker],
            until: Optional[float]) -> str:
    """The decision in one sentence: the level and where it comes from,
    after the suspension when one holds."""
    level_text = "repair level %s from %s" % (chosen.level.label,
                                              chosen.where)
    if chosen.scope != DEFAULT:
        level_text += " (%s=%s)" % (chosen.key, chosen.value)
    if not suspending:
        if chosen.level < Level.EVACUATE:
            return level_text + ": no automatic evacuation"
        return level_text
    first = sorted(suspending, key=lambda m: (
        m.until is not None, -(m.until or 0)))[0]
    reason = "automatic repair suspended %s by %s (%s=%s)" % (
        "until " + format_time(until) if until is not None else
        ("until fixed" if first.state == MALFORMED else "forever"),
        first.where, first.key, first.value)
    if len(suspending) > 1:
        reason += " and %d more marker(s)" % (len(suspending) - 1)
    return reason + "; " + level_text


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

    def as_dict(self) -> Dict[str, Any]:
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
