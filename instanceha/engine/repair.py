"""Instance repair as passes of the engine (issue 25): a server that broke
on a healthy host comes back, in order of risk, and says what happened.

Sources (Nova's notifications, the hosts' agents, the periodic sweep,
the operator) hand
news about one server to :meth:`InstanceRepair.news`; they never act. The
news opens a *case* for the server and starts its work on the engine
(``Action.REPAIR`` keyed :class:`RepairKey`): its passes run as a host's
actions do (the may-act check, the executor, the key's back-off), each
:meth:`InstanceRepair.process`: one level-triggered pass that reads the
server from Nova, follows the action in flight, and decides the next one
with the pure policy (:mod:`instanceha.policy.instance_repair`):

1. the host gate: no repair on a host that is not ``active`` for the
   engine (suspect, fencing, fenced, evacuating, failed: the host path
   owns its servers; draining, maintenance, suspended: planned work
   pauses repair) or whose compute service Nova reports down or forced
   down, checked again right before each request (the safety invariant:
   never act on a server whose host may be down or being fenced);
2. the action in flight (:mod:`instanceha.engine.repair_pass`): ACTIVE
   for ``min_uptime`` is a success; ERROR, down again, or not ACTIVE
   within ``action_timeout`` a failure or timeout (a journal row each);
3. exclusions (service-owned servers), the cloud-wide hold, restart
   groups, then :func:`~instanceha.policy.instance_repair.next_action`
   (the ladder, the per-server limit, the repair level);
4. a move (cold migration) waits for room on another host (pending).

Progress lives in the journal's ``instance_repairs`` rows (an attempt is
written before its request is sent) and in the server's metadata markers
(:mod:`instanceha.engine.repair_markers`); the case itself (why it waits)
is in memory and rebuilt from the running rows and the sweep after a
restart.
"""

import collections
import threading
from typing import (Any, Callable, Counter, Dict, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple)

import structlog

from instanceha.drivers.compute.base import InstanceAction, Server
from instanceha.engine import repair_markers, repair_news, repair_pass
from instanceha.engine.context import Context
from instanceha.engine.inbox import Pending
from instanceha.engine.passes import Requeue
# Case lives with its pass (repair_pass reads and changes it); named
# here too, as before.
from instanceha.engine.repair_pass import Case
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import Action
from instanceha.heartbeat.guest import GuestEvent
from instanceha.policy import instance_repair as ir
from instanceha.sources.nova_payloads import InstanceFacts

LOG = structlog.get_logger("instanceha.instance_repair")

#: verdict of an operator's one-off repair
OPERATOR = "operator"


class RepairKey(NamedTuple):
    """A server's key on the engine's work queue (hosts' keys are their
    service UUIDs: strings)."""
    server_id: str


class CaseWork:
    """The carry of a case's passes, and their subject: which server, of
    which InstanceRepair. Its progress is the case and the journal's
    repair rows, so abandoning it closes nothing."""

    __slots__ = ("repair", "server_id")

    def __init__(self, repair: "InstanceRepair", server_id: str) -> None:
        self.repair = repair
        self.server_id = server_id

    @property
    def name(self) -> str:
        """What the engine's log lines name it by."""
        return self.server_id

    def close(self) -> None:
        """Nothing to close: a new pass reads the case afresh."""


def run_case(ctx: Context, subject: object, carry: CaseWork
             ) -> Optional[Requeue]:
    """One pass of a case (Action.REPAIR's runner): a Requeue while the
    case is open, woken sooner by news of its server; None once it is
    closed. ``ctx`` is the repair's own (carry.repair.ctx)."""
    after = carry.repair.process(carry.server_id)
    if after is None:
        return None
    return Requeue(after, carry, waits_for=frozenset((carry.server_id,)))


class InstanceRepair:
    """The cases and their passes; the engine's workers run them."""

    def __init__(self, conf: Any, ctx: Context,
                 start_work: Callable[[RepairKey, Pending], object],
                 host_record: Callable[[str], Optional[HostRecord]],
                 cluster_ok: Optional[Callable[[], Tuple[bool, str]]] = None
                 ) -> None:
        """``start_work(key, pending)``: the engine runs a case's first
        pass now (or its waiting pass at once); ``host_record(name)``:
        the engine's record of a host (None: unknown); ``cluster_ok()``:
        (ok, why) of the engine's storm gate."""
        self.conf = conf
        self.ctx = ctx
        self._start_work = start_work
        self.clock = ctx.clock
        self.host_record = host_record
        self.cluster_ok: Callable[[], Tuple[bool, str]] = \
            cluster_ok or (lambda: (True, ""))
        self.settings = ir.Settings.from_conf(conf)
        self._lock = threading.RLock()
        self.cases: Dict[str, Case] = {}
        #: server -> when it last broke (the hold's count), pruned
        self.breakages: Dict[str, float] = {}
        #: servers the sweep counted at its last pass (hold_percent)
        self.watched = 0
        #: an operator accepted this many breakages (hold lifted)
        self.acknowledged: Optional[int] = None
        self.stats: Counter = collections.Counter()
        self._last_hold: Optional[ir.Hold] = None

    def _wake(self, server_id: str) -> None:
        """The case's passes run now."""
        self._start_work(RepairKey(server_id), Pending(
            Action.REPAIR, None, CaseWork(self, server_id)))

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def reload_settings(self) -> None:
        self.settings = ir.Settings.from_conf(self.conf)

    # -- sources' news ------------------------------------------------------------
    def news(self, verdict: ir.Verdict, at: float, source: str) -> bool:
        """A source's verdict about one server. Returns True when it
        opened, woke or closed a case."""
        if not self.enabled or verdict is None:
            return False
        sid = verdict.server_id
        with self._lock:
            case = self.cases.get(sid)
            if verdict.repair:
                ours = case is not None and case.attempt is not None
                if not ours:
                    # Our own action failing is the attempt's business,
                    # not a new breakage for the hold.
                    self.breakages[sid] = at
                    self.stats["broken"] += 1
                if case is None:
                    case = Case(sid, verdict.kind, verdict.reason, source,
                                at, host=verdict.host)
                    self.cases[sid] = case
                    self.stats["cases"] += 1
                    LOG.info("repair_case_opened", server=sid,
                             host=verdict.host, verdict=verdict.kind,
                             source=source, reason=verdict.reason)
            elif verdict.left_alone or verdict.kind == ir.USER_STOP:
                if case is None:
                    return False
                if case.attempt is not None and verdict.kind in (
                        ir.RESIZING, ir.MIGRATING) \
                        and case.attempt.action == ir.COLD_MIGRATE:
                    return False        # our own cold migration
                if case.attempt is not None and verdict.kind == \
                        ir.REBUILDING and case.attempt.action == ir.REBUILD:
                    return False        # our own rebuild
                if case.attempt is not None and not verdict.by_user:
                    return False
                self._drop(case, verdict.kind, verdict.reason, at)
                return True
            else:
                return False
        self._wake(sid)
        return True

    def from_notification(self, facts: InstanceFacts, at: float,
                          stale: bool = False) -> bool:
        """A source's instance notification (sources.nova_payloads
        InstanceFacts), classified. ``stale``: it arrived after a newer
        one of the same server: it may open a case (the pass reads Nova
        and closes it if the server is fine) but never drop one."""
        if not self.enabled:
            return False
        verdict = repair_news.notification_verdict(facts)
        if verdict is None or not (verdict.repair or verdict.left_alone):
            return False
        if stale and not verdict.repair:
            return False
        LOG.info("instance_repair_news", server=verdict.server_id,
                 event_type=facts.event, host=verdict.host,
                 verdict=verdict.kind, reason=verdict.reason)
        return self.news(verdict, at, "notification")

    def from_agent(self, event: GuestEvent, at: float) -> bool:
        """A host agent's guest event (heartbeat.guest.GuestEvent, from
        the heartbeat source). A crash opens a case as a crash
        notification does; its pass then reads Nova and waits for Nova's
        view to catch up (repair_pass.AGENT_GRACE) before it closes a
        case of a server Nova still shows running."""
        if not self.enabled:
            return False
        verdict = repair_news.agent_verdict(event.host, event.server,
                                            event.event, event.detail)
        if verdict is None:
            return False
        LOG.info("instance_repair_news", server=verdict.server_id,
                 host=verdict.host, verdict=verdict.kind,
                 source=repair_pass.AGENT, reason=verdict.reason)
        return self.news(verdict, at, repair_pass.AGENT)

    def from_sweep(self, server: Server, actions: Sequence[InstanceAction],
                   at: float) -> bool:
        """The sweep's server (SHUTOFF or ERROR) and its instance
        actions, classified."""
        if not self.enabled:
            return False
        verdict = repair_news.sweep_verdict(server, actions)
        if verdict is None or not (verdict.repair or verdict.left_alone):
            return False
        if verdict.repair:
            LOG.info("instance_repair_news", server=verdict.server_id,
                     host=verdict.host, verdict=verdict.kind,
                     source="sweep", reason=verdict.reason)
        return self.news(verdict, at, "sweep")

    def sweep_skips(self, server: Server) -> bool:
        """The sweep need not read a server marked failed or with a
        case open."""
        meta = (server.raw or {}).get("metadata") or {}
        with self._lock:
            return (repair_markers.FAILED in meta
                    or server.id in self.cases)

    def set_watched(self, count: int) -> None:
        self.watched = int(count)

    def _drop(self, case: Case, kind: str, why: str, at: float) -> None:
        """Close a case left to its owner (a user's stop, a delete, a
        shelve...): the attempt in flight, if any, is recorded as
        interrupted."""
        self.cases.pop(case.server_id, None)
        if case.row is not None:
            repair_pass.finish_row(self, case, at, "interrupted",
                                   "%s: %s" % (kind, why))
        self.stats["left_alone"] += 1
        LOG.info("repair_case_dropped", server=case.server_id, verdict=kind,
                 reason=why)

    # -- operator -----------------------------------------------------------------
    def request(self, server_id: str, level: Optional[int] = None,
                reason: str = "") -> Dict[str, object]:
        """An operator's one-off repair of ``server_id`` (``level``: the
        highest repair level it may use, a Ladder rank; None: the
        server's own). Not held by the cloud-wide hold."""
        now = self.clock()
        with self._lock:
            case = self.cases.get(server_id)
            if case is None:
                case = Case(server_id, OPERATOR, reason or "operator "
                            "request", "operator", now)
                self.cases[server_id] = case
            case.operator = True
            case.level = level
        LOG.info("repair_requested", server=server_id, level=level,
                 reason=reason or "operator request")
        self._wake(server_id)
        return case.view()

    def clear(self, server_id: str, reason: str = "") -> None:
        """Clear a server's failure: its ladder starts again."""
        now = self.clock()
        self.ctx.journal.repair_started(
            server_id, None, "cleared", now, outcome="cleared",
            finished_at=now, detail=reason or "operator: repair --clear")
        repair_pass.set_markers(self, server_id, repair_pass.markers.cleared())
        with self._lock:
            case = self.cases.pop(server_id, None)
        if case is not None and case.row is not None:
            repair_pass.finish_row(self, case, now, "interrupted",
                                   "cleared by an operator")
        self.stats["cleared"] += 1
        LOG.info("repair_cleared", server=server_id,
                 reason=reason or "operator: repair --clear")

    def capacity_appeared(self) -> int:
        """Compute hosts became schedulable: moves waiting for room try
        now."""
        with self._lock:
            waiting = [c.server_id for c in self.cases.values()
                       if c.state is repair_pass.CaseState.PENDING]
        for sid in waiting:
            self._wake(sid)
        return len(waiting)

    def acknowledge_hold(self) -> int:
        """Lift the cloud-wide hold for the servers broken now."""
        h = self.hold_now(self.clock())
        self.acknowledged = len(h.failing)
        return self.acknowledged

    # -- the hold -----------------------------------------------------------------
    def hold_now(self, now: float) -> ir.Hold:
        s = self.settings
        with self._lock:
            since = now - max(s.hold_window, 1.0)
            for sid in [k for k, at in self.breakages.items()
                        if at <= since]:
                del self.breakages[sid]
            recent = dict(self.breakages)
        if self.acknowledged is not None and not recent:
            self.acknowledged = None
        h = ir.hold(recent, now, s, self.watched, self.acknowledged)
        if h.held and not (self._last_hold and self._last_hold.held):
            LOG.warning("instance_repair_hold", failing=len(h.failing),
                        total=h.total, reason=h.why)
            self.stats["hold_engaged"] += 1
        elif not h.held and self._last_hold and self._last_hold.held:
            LOG.info("instance_repair_hold_lifted", reason=h.why)
        self._last_hold = h
        return h

    # -- passes -------------------------------------------------------------------
    def process(self, server_id: str) -> Optional[float]:
        """One pass of the server's case; seconds to the next pass, or
        None when the case is closed."""
        with self._lock:
            case = self.cases.get(server_id)
        if case is None:
            return None
        if not self.enabled:
            with self._lock:
                self.cases.pop(server_id, None)
            return None
        return repair_pass.run(self, case)

    def members(self) -> List[ir.Member]:
        """The open cases as restart-group members."""
        with self._lock:
            return [ir.Member(c.server_id, c.project_id, c.group)
                    for c in self.cases.values()]

    def unread(self) -> List[str]:
        """Open cases whose server no pass has read yet: their restart
        group is not known."""
        with self._lock:
            return [c.server_id for c in self.cases.values() if not c.read]

    def close(self, case: Case) -> None:
        sid = case.server_id
        with self._lock:
            if self.cases.get(sid) is case:
                del self.cases[sid]

    def resume(self) -> int:
        """After a restart: a case for every server whose attempt row was
        left running (the attempt is followed, or timed out)."""
        if not self.enabled:
            return 0
        rows = [r for r in self.ctx.journal.repairs()
                if r["outcome"] == "running" and r["action"] in ir.ACTIONS]
        for r in rows:
            case: Case = Case(r["server_id"], r["verdict"] or "resumed",
                        "resumed from the journal", "journal",
                        r["started_at"], host=r["host_name"])
            case.attempt = ir.Attempt(r["action"], r["started_at"])
            case.row, case.step = r["id"], r["step"]
            case.inherited = True
            case.moved_from = r["host_name"] \
                if r["action"] == ir.COLD_MIGRATE else None
            sid = r["server_id"]
            with self._lock:
                self.cases.setdefault(sid, case)
            self._wake(sid)
        return len(rows)

    # -- status -------------------------------------------------------------------
    def snapshot(self) -> Dict[str, object]:
        now = self.clock()
        h = self.hold_now(now) if self.enabled else None
        with self._lock:
            cases = [c.view() for c in sorted(self.cases.values(),
                                              key=lambda c: c.broke_at)]
        counts = collections.Counter(v["state"] for v in cases)
        return {"enabled": self.enabled,
                "hold": h.as_dict() if h is not None else None,
                "cases": cases[:200], "open": len(cases),
                "by_state": dict(counts), "counts": dict(self.stats)}

    @staticmethod
    def markers_view(metadata: Mapping[str, str]) -> Dict[str, str]:
        """The repair markers of a server's metadata, by short name."""
        return repair_markers.view(metadata)

    def describe(self, server_id: str) -> Dict[str, object]:
        """What the operator sees of one server: its case, its markers,
        its journal rows."""
        with self._lock:
            case = self.cases.get(server_id)
        rows = self.ctx.journal.repairs(server_id, limit=50)
        return {"server": server_id,
                "case": case.view() if case is not None else None,
                "rows": rows}


#: the host gate (repair_pass.host_gate)
host_gate = repair_pass.host_gate


__all__: List[str] = ["InstanceRepair", "RepairKey", "Case", "CaseWork",
                      "host_gate", "run_case"]
