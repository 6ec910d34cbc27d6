"""Proactive HA: which hosts whose hardware degrades are drained now.

The fencing readiness audit reads each host's hardware health from its
BMC (:mod:`instanceha.drivers.fencing.health`). A host degraded at the
configured severity is drained into maintenance through the operator's
drain, never fenced for it. This module decides, without I/O or clock,
which degraded hosts start a drain now and why each other one waits:

* only a host in ``active`` is drained (one draining, in maintenance or
  in a recovery is left as it is);
* none while a storm hold is on (hosts are being lost: live migrations
  would compete with the recovery for the room that is left);
* at most ``max_concurrent`` proactive drains under way at once;
* at most ``max_per_interval`` started within ``rate_interval`` seconds;
* the most severe first, then by host name.

The drain's own preflight (room, HA admission) is the engine's next
step: a refused preflight leaves the host active, and it is asked again
at the next audit.
"""

import dataclasses
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from instanceha.util.hardware import Health, Severity

ACTIVE = "active"


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool = False
    severity: Severity = Severity.CRITICAL
    max_concurrent: int = 1
    max_per_interval: int = 2
    rate_interval: float = 3600.0

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":
        p = conf.proactive
        return cls(enabled=bool(p.enabled),
                   severity=Severity.parse(p.severity) or Severity.CRITICAL,
                   max_concurrent=int(p.max_concurrent),
                   max_per_interval=int(p.max_per_interval),
                   rate_interval=float(p.rate_interval))


@dataclasses.dataclass(frozen=True)
class Plan:
    """``drain``: [(host, why)] to drain now, in order; ``held``: {host:
    why it is not drained now} for every other degraded host at the
    severity."""

    drain: Tuple[Tuple[str, str], ...] = ()
    held: Mapping[str, str] = dataclasses.field(default_factory=dict)


def recent(started: Iterable[float], now: float, s: Settings) -> List[float]:
    """The drain starts still inside the rate window at ``now``."""
    return sorted(t for t in started if now - t < s.rate_interval)


def plan(healths: Mapping[str, Health], states: Mapping[str, str],
         s: Settings, draining: int, started: Iterable[float],
         now: float, storm: Optional[str] = None) -> Plan:
    """Which hosts to drain now.

    ``healths``: {host: Health} the audit read; ``states``: {host: the
    engine's state value}; ``draining``: proactive drains under way;
    ``started``: when proactive drains started (any age); ``storm``:
    why a storm hold is on, or None."""
    if not s.enabled:
        return Plan()
    due = sorted((h for h, health in healths.items()
                  if health.at_least(s.severity)),
                 key=lambda h: (-healths[h].severity.rank, h))
    held: Dict[str, str] = {}
    drain: List[Tuple[str, str]] = []
    window = recent(started, now, s)
    slots = s.max_concurrent - draining
    budget = s.max_per_interval - len(window)
    for host in due:
        why = healths[host].why()
        state = states.get(host)
        if state != ACTIVE:
            held[host] = "%s; not drained: in state %s" % (
                why, state or "unknown to the engine")
        elif storm:
            held[host] = "%s; not drained while the storm hold is on " \
                         "(%s)" % (why, storm)
        elif slots <= 0:
            held[host] = ("%s; waiting: %d proactive drain(s) under way, "
                          "[proactive] max_concurrent %d"
                          % (why, draining + len(drain), s.max_concurrent))
        elif budget <= 0:
            starts = window + [now] * len(drain)
            next_at = starts[0] + s.rate_interval
            held[host] = ("%s; waiting: %d proactive drain(s) started in "
                          "the last %.0fs ([proactive] max_per_interval "
                          "%d), next in %.0fs"
                          % (why, len(starts), s.rate_interval,
                             s.max_per_interval, max(0.0, next_at - now)))
        else:
            drain.append((host, why))
            slots -= 1
            budget -= 1
    return Plan(tuple(drain), held)
