"""Proactive HA (issue 38): drain a host whose hardware degrades.

After each fencing readiness audit (:mod:`instanceha.sources.audit`),
the hardware health it read of every host is handed to
:meth:`ProactiveHA.on_health`. The pure policy
(:func:`instanceha.policy.proactive.plan`) chooses the hosts to drain now
(in ``active``, no storm hold, under the rate limits); each is drained
into maintenance through the operator's drain: its preflight (room, HA
admission) read from Nova now, then an OPERATOR_DRAIN event whose source
is ``proactive`` and whose reason says why (journalled with the
transition). A refused preflight leaves the host active, reported, and
asked again at the next audit. Nothing here fences: a degraded host
that runs is never proven dead for its health, and a host whose health
recovers stays in maintenance until an operator resumes it.
"""

import re
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, \
    Tuple

import structlog

from instanceha.util.hardware import Health
from instanceha.events import DrainRequest, Event, EventKind as E
from instanceha.fsm.record import HostRecord
from instanceha.policy import proactive as policy

LOG = structlog.get_logger("instanceha.proactive")

SOURCE = "proactive"
#: seconds a drain just asked for counts as under way while its host's
#: record still says active (the engine's worker has not taken it yet)
SUBMIT_GRACE = 120.0


def _steady(text: str) -> str:
    """A hold's text without the seconds that change at every look: a
    host is logged again only when why it waits changes."""
    return re.sub(r", next in \d+s", "", text)


class EnginePort(Protocol):
    """What proactive HA asks of the engine."""

    def records(self) -> Mapping[str, HostRecord]: ...

    def cluster_status(self) -> Tuple[bool, str]: ...

    def drain_preflight(self, rec: HostRecord, request: DrainRequest
                        ) -> Dict[str, Any]: ...

    def submit(self, event: Event) -> None: ...


class ProactiveHA:

    def __init__(self, conf: Any, engine: EnginePort,
                 clock: Callable[[], float]) -> None:
        self.settings = policy.Settings.from_conf(conf)
        self._engine = engine
        self._clock = clock
        self._lock = threading.Lock()
        #: host -> when proactive HA asked for its drain
        self._ours: Dict[str, float] = {}
        #: when each proactive drain was asked for (pruned to the window)
        self._started: List[float] = []
        #: host -> (Health, what was done or why not) of the last pass
        self._view: Dict[str, Tuple[Health, str]] = {}

    def reload_settings(self, conf: Any) -> None:
        self.settings = policy.Settings.from_conf(conf)

    def _under_way(self, states: Mapping[str, str], now: float) -> int:
        """Proactive drains under way: hosts drained by us still
        draining (or just asked for); the others are forgotten."""
        for host, at in list(self._ours.items()):
            state = states.get(host)
            if state == "draining" or (
                    state == policy.ACTIVE and now - at < SUBMIT_GRACE):
                continue
            del self._ours[host]
        return len(self._ours)

    def on_health(self, healths: Mapping[str, Health]) -> List[str]:
        """One look at the hosts' hardware health (after an audit):
        drain those the policy chooses. Returns the hosts whose drain
        was asked for."""
        s = self.settings
        if not s.enabled:
            return []
        now = self._clock()
        records = {r.name: r for r in self._engine.records().values()}
        states = {name: r.state.value for name, r in records.items()}
        ok, why = self._engine.cluster_status()
        with self._lock:
            draining = self._under_way(states, now)
            self._started = policy.recent(self._started, now, s)
            ours = set(self._ours)
            chosen = policy.plan(
                {h: v for h, v in healths.items() if h not in ours},
                states, s, draining, self._started, now,
                storm=None if ok else why)
        view: Dict[str, Tuple[Health, str]] = {
            h: (healths[h], "held: " + why) for h, why in chosen.held.items()}
        for host in sorted(ours & set(healths)):
            view[host] = (healths[host], "proactive drain under way (%s)"
                          % states.get(host, "unknown"))
        asked = []
        for host, reason in chosen.drain:
            refused = self._drain(records[host], reason, now)
            if refused is None:
                asked.append(host)
                view[host] = (healths[host], "drain asked for")
            else:
                view[host] = (healths[host], "held: " + refused)
        with self._lock:
            before, self._view = self._view, view
        for host, (health, what) in sorted(view.items()):
            if what.startswith("held: ") and _steady(
                    before.get(host, (None, ""))[1]) != _steady(what):
                LOG.warning("proactive_drain_held", host=host,
                            severity=health.severity.value,
                            reason=what[len("held: "):])
        return asked

    def _drain(self, rec: HostRecord, why: str, now: float
               ) -> Optional[str]:
        """Ask for ``rec``'s drain into maintenance: None once asked,
        else why not (its preflight refused, or unreadable)."""
        request = DrainRequest(then="maintenance")
        try:
            body = self._engine.drain_preflight(rec, request)
        except Exception as e:   # noqa: BLE001 - asked again next audit
            return "%s; the drain preflight cannot be read: %s: %s" % (
                why, type(e).__name__, e)
        if not body.get("ok"):
            return "%s; the drain preflight refuses: %s" % (
                why, "; ".join(body.get("refusals") or ()) or "refused")
        reason = "proactive: %s" % why
        LOG.warning("proactive_drain", host=rec.name, reason=reason,
                    then="maintenance", fenced="never: the host runs")
        with self._lock:
            self._ours[rec.name] = now
            self._started.append(now)
        self._engine.submit(Event(E.OPERATOR_DRAIN, rec.id, now,
                                  name=rec.name, reason=reason,
                                  source=SOURCE, payload=request))
        return None

    def status(self) -> Dict[str, Any]:
        """The proactive part of status: settings and each degraded
        host's health and what was done."""
        s = self.settings
        with self._lock:
            view = dict(self._view)
            recent = len(policy.recent(self._started, self._clock(), s))
            under_way = sorted(self._ours)
        return {"enabled": s.enabled, "severity": s.severity.value,
                "under_way": under_way, "started_in_window": recent,
                "hosts": {h: dict(health.to_json(), action=what)
                          for h, (health, what) in sorted(view.items())}}
