"""One pass of an instance repair case (see :mod:`instanceha.engine.repair`):
read the server, follow the action in flight, decide and send the next.
Every side effect goes through the compute driver (``ctx.compute``) and
the journal; every decision is the policy's
(:mod:`instanceha.policy.instance_repair`), given the time read once per
pass from the engine's clock.
"""

import dataclasses
import enum
from typing import (Any, Callable, Counter, Dict, List, Mapping, Optional,
                    Protocol, Sequence, Tuple, Union)

import structlog

from instanceha import failpoints
from instanceha.drivers.compute import base
from instanceha.engine import repair_markers as markers
from instanceha.engine.context import Context
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State
from instanceha.policy import facts_nova
from instanceha.policy import instance_repair as ir
from instanceha.policy import repair as repair_policy
from instanceha.policy.facts import ServerFacts

Server = base.Server
#: a pass's answer: seconds to the next pass, or None (the case closed)
After = Optional[float]
#: a server's repair rows, as the journal gives them
Row = Dict[str, Any]

LOG = structlog.get_logger("instanceha.instance_repair")

#: seconds between passes while something waits (host, hold, group)
WAIT = 5.0
#: seconds between passes while an action runs
FOLLOW = 1.0
#: seconds between passes of a move waiting for capacity
CAPACITY = 15.0
#: Nova power_state running
RUNNING = 1
#: Nova power states of a guest that is off (shutdown, crashed, suspended)
GUEST_OFF = (4, 6, 7)
#: seconds a case waits for Nova's own stop of an active server whose guest
#: is off before the ladder goes on without it (a hard reboot)
NOVA_STOP_GRACE = 30.0
#: source of the agents' guest events; their cases wait this long for Nova's
#: view to show the guest broken before a server Nova shows up closes them
AGENT, AGENT_GRACE = "agent", 60.0
#: A repair row's outcome when its request never reached Nova: the member
#: that journalled it stopped (lost its lease, was killed) before sending,
#: and the member acting now found no trace of it in Nova. Not an attempt:
#: the ladder does not count it.
NOT_SENT = "not_sent"
#: Nova's instance action (os-instance-actions) for each repair action:
#: Nova's API records it when it accepts the request.
NOVA_ACTION = {ir.START: "start", ir.HARD_REBOOT: "reboot",
               ir.COLD_MIGRATE: "migrate", ir.REBUILD: "rebuild"}
#: Seconds Nova's clock may lag the clock of the member that journalled an
#: action: an instance action of the same kind started up to this long
#: before the row may be that request, and the row is then waited for.
SENT_SKEW = 300.0


class CaseState(str, enum.Enum):
    """Where a repair case stands (shown in status as its value)."""
    #: not yet read, or waiting for room on another host
    PENDING = "pending"
    #: repair paused (by an operator, or the server's own wish)
    PAUSED = "paused"
    #: held by the storm hold
    HELD = "held"
    #: waiting for its host, a group or Nova's own step
    WAITING = "waiting"
    #: an action in flight
    RUNNING = "running"
    #: the server is ACTIVE again; its uptime is being watched
    UPTIME = "uptime"


@dataclasses.dataclass
class Case:
    """One broken server being repaired (in memory)."""
    server_id: str
    verdict: str
    reason: str
    source: str
    broke_at: float
    host: Optional[str] = None
    state: CaseState = CaseState.PENDING
    why: str = ""
    #: the action in flight: its Attempt and journal row
    attempt: Optional[ir.Attempt] = None
    row: Optional[int] = None
    step: Optional[int] = None
    #: when the server was first seen ACTIVE since the attempt began
    active_since: Optional[float] = None
    #: cold migration: where it was, confirm and start sent
    moved_from: Optional[str] = None
    confirmed: bool = False
    started_after_move: bool = False
    #: an operator's one-off repair, and the level it may go to
    operator: bool = False
    level: Optional[int] = None
    #: project and restart group, read at the last pass
    project_id: Optional[str] = None
    group: Optional[int] = None
    #: a pass has read the server (its project and group are known)
    read: bool = False
    #: the attempt in flight was journalled by another process (resumed
    #: from the journal): whether it reached Nova is asked once
    inherited: bool = False

    def view(self) -> Dict[str, object]:
        return {"server": self.server_id, "state": self.state.value,
                "why": self.why, "verdict": self.verdict,
                "reason": self.reason, "source": self.source,
                "broke_at": self.broke_at, "host": self.host,
                "action": self.attempt.action if self.attempt else None,
                "action_started_at": self.attempt.started_at
                if self.attempt else None,
                "active_since": self.active_since,
                "operator": self.operator}


class RepairPort(Protocol):
    """What a pass uses of its InstanceRepair (engine.repair, which
    imports this module)."""
    @property
    def ctx(self) -> Context: ...

    @property
    def conf(self) -> Any: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def settings(self) -> ir.Settings: ...

    @property
    def stats(self) -> Counter[str]: ...

    @property
    def host_record(self) -> Callable[[str], Optional[HostRecord]]: ...

    @property
    def cluster_ok(self) -> Callable[[], Tuple[bool, str]]: ...

    def hold_now(self, now: float) -> ir.Hold: ...

    def members(self) -> List[ir.Member]: ...

    def unread(self) -> List[str]: ...

    def close(self, case: Case) -> None: ...

    def _drop(self, case: Case, kind: str, why: str, at: float) -> None: ...


# -- side effects ----------------------------------------------------------------

def set_markers(repair: RepairPort, server_id: str,
                wanted: Mapping[str, Optional[str]],
                current: Optional[Mapping[str, str]] = None) -> None:
    """Write the markers that changed; a failure is logged, never
    raised (a marker is information, not state)."""
    try:
        if current is None:
            current = (repair.ctx.compute.get_server(server_id).raw or {}) \
                .get("metadata") or {}
        change = markers.changes(current, wanted)
        if change:
            repair.ctx.compute.set_server_metadata(server_id, change)
    except (base.ComputeError, NotImplementedError) as e:
        LOG.warning("repair_marker_not_written", server=server_id,
                    reason=str(e) or type(e).__name__)


def finish_row(repair: RepairPort, case: Case, at: float, outcome: str,
               detail: str = "") -> None:
    try:
        repair.ctx.journal.repair_finished(case.row, at, outcome, detail)
    except Exception as e:   # noqa: BLE001 - logged; the sweep re-finds it
        LOG.error("journal_write_failed", server=case.server_id,
                  reason=str(e))
    case.row = None


def _row(repair: RepairPort, case: Case, action: str, now: float, outcome: str,
         detail: str, step: Optional[int] = None) -> None:
    """A journal row closing a case without an action (failed, not
    permitted, excluded)."""
    repair.ctx.journal.repair_started(
        case.server_id, case.host, action, now, step=step,
        verdict=case.verdict, outcome=outcome, detail=detail,
        finished_at=now)


# -- reading ------------------------------------------------------------------

def _metadata(server: Server) -> Dict[str, str]:
    return (server.raw or {}).get("metadata") or {}


def is_up(server: Server) -> bool:
    """ACTIVE, no task, the guest running (as far as Nova says)."""
    return ((server.status or "").upper() == "ACTIVE"
            and server.task_state is None
            and server.power_state in (None, RUNNING))


def _history(rows: Sequence[Row]) -> Tuple[List[ir.Attempt], bool]:
    """(attempts since the last clear, marked failed) of a server's
    repair rows (rows never sent are no attempt)."""
    rows = [r for r in rows if r["outcome"] != NOT_SENT]
    last_clear = max((i for i, r in enumerate(rows)
                      if r["action"] == "cleared"), default=-1)
    rows = rows[last_clear + 1:]
    attempts: List[ir.Attempt] = []
    failed = False
    for r in rows:
        if r["action"] in ir.ACTIONS:
            outcome = r["outcome"] if r["outcome"] in ir.OUTCOMES \
                else ir.FAILURE
            attempts.append(ir.Attempt(r["action"], r["started_at"],
                                       r["finished_at"], outcome))
        elif r["action"] == "failed":
            failed = True
    return attempts, failed


def _level(repair: RepairPort, case: Case, server: Server, now: float
           ) -> Tuple[Union[int, repair_policy.RepairDecision], ServerFacts]:
    """The server's RepairDecision (nearest scope wins), or the
    operator's level for a one-off repair."""
    rs = repair_policy.Settings.from_conf(repair.conf)
    found = base.aggregates_or_none(
        repair.ctx.compute, None, "aggregate-scope repair levels are not "
        "consulted") or ()
    aggregates: tuple = tuple(facts_nova.aggregate_from_nova({
        "name": a.name, "id": a.id, "metadata": dict(a.metadata or {}),
        "hosts": list(a.hosts)}) for a in found)
    facts = facts_nova.server_from_record(server, aggregates=aggregates)
    global_scope = next((a for a in aggregates
                         if a.name == rs.global_aggregate), None) \
        if rs.global_aggregate else None
    decision = repair_policy.decide(facts, now, rs, global_scope)
    if case.level is not None:
        return case.level, facts
    return decision, facts


# -- the pass -------------------------------------------------------------------

#: A step's answer when the pass goes on to the next step.
class _Step(enum.Enum):
    GO = "go"


_GO = _Step.GO
#: a step's answer: the pass's (After), or _GO
Step = Union[After, _Step]


def run(repair: RepairPort, case: Case) -> After:
    """One pass of a repair case: seconds until its next pass, or None
    when the case is closed."""
    now = repair.clock()
    server, result = _read(repair, case, now)
    if server is None:
        return result
    facts = _note(repair, case, server)
    for step in (_in_flight, _healthy, _gates):
        answer = step(repair, case, server, facts, now)
        if answer is not _GO:
            return answer
    return _ladder(repair, case, server, now)


def _read(repair: RepairPort, case: Case, now: float
          ) -> Tuple[Optional[Server], After]:
    """(the server as Nova shows it, None) or (None, the pass's answer:
    the case dropped, the server gone; or a wait, Nova unreadable). A
    journalled attempt inherited from another process is first asked
    whether its request reached Nova."""
    try:
        server = repair.ctx.compute.get_server(case.server_id)
    except base.NotFound:
        repair._drop(case, ir.DELETED, "the server is gone", now)
        return None, None
    except base.ComputeError as e:
        LOG.warning("repair_server_unreadable", server=case.server_id,
                    reason=str(e))
        return None, WAIT
    if case.attempt is not None and case.inherited:
        # An attempt another process journalled (resumed after a takeover
        # or a restart): did its request reach Nova? Asked once.
        case.inherited = False
        if not went_out(repair, server, case.attempt.action,
                        case.attempt.started_at, case.host) \
                and _not_sent(repair, case.server_id, case.row,
                              case.attempt, now):
            case.attempt, case.row, case.step = None, None, None
            case.active_since = None
    return server, None


def _note(repair: RepairPort, case: Case, server: Server) -> ServerFacts:
    """Keep what the case needs of the server (host, project, restart
    group: read before any gate, a case paused or held still holds the
    higher groups of its project); returns the server's policy facts."""
    case.host = server.host or case.host
    case.project_id = facts_nova.project_of(server)
    facts = facts_nova.server_from_record(server)
    case.group, _problem = ir.restart_group_of(facts, repair.settings)
    case.read = True
    return facts


def _in_flight(repair: RepairPort, case: Case, server: Server,
               facts: ServerFacts, now: float) -> Step:
    """1. The action in flight: followed until it ends."""
    if case.attempt is None:
        return _GO
    s = repair.settings
    outcome = _follow(repair, case, server, now)
    if outcome == ir.RUNNING:
        case.state = (CaseState.UPTIME if case.active_since
                      else CaseState.RUNNING)
        if case.active_since is not None:
            return max(0.05, min(WAIT, case.active_since + s.min_uptime
                                 - now))
        return FOLLOW
    _finished(repair, case, server, outcome, now)
    if outcome == ir.SUCCESS:
        repair.close(case)
        return None
    return _GO


def _healthy(repair: RepairPort, case: Case, server: Server,
             facts: ServerFacts, now: float) -> Step:
    """2. Healthy again (by itself, or by someone else): nothing to do,
    unless an operator asked for a repair anyway."""
    if is_up(server) and not case.operator and case.source == AGENT \
            and case.attempt is None and now - case.broke_at < AGENT_GRACE:
        case.state = CaseState.WAITING
        case.why = "the agent saw the guest break; Nova shows it running"
        return FOLLOW
    if is_up(server) and not case.operator:
        LOG.info("repair_case_closed", server=case.server_id,
                 reason="ACTIVE again without a repair action")
        repair.close(case)
        return None
    return _GO


def _gates(repair: RepairPort, case: Case, server: Server, facts: ServerFacts,
           now: float) -> Step:
    """3-7. What holds the case back before the ladder is asked."""
    s = repair.settings
    # 3. The host gate: the host path or planned work owns it.
    why = host_gate(repair, server.host)
    if why is not None:
        return _wait(repair, case, CaseState.PAUSED, why, now, server)

    # 4. Service-owned servers.
    out = ir.excluded(facts, s, project_id=case.project_id)
    if out is not None:
        _row(repair, case, "excluded", now, "not permitted", out)
        repair.stats["excluded"] += 1
        LOG.info("repair_excluded", server=case.server_id, reason=out)
        repair.close(case)
        return None

    # 5. The cloud-wide hold (an operator's one-off repair is not held).
    if not case.operator:
        h = repair.hold_now(now)
        if h.held:
            return _wait(repair, case, CaseState.HELD, h.why, now, server)

    # 6. Restart groups: lower groups of the project first. Servers that
    # broke together are opened together but read one pass at a time: a
    # grouped server waits until every open case has been read, or it
    # could go before a lower group not read yet.
    unread = [sid for sid in repair.unread() if sid != case.server_id]
    if case.group is not None and unread:
        # A moment's wait: no marker written for it.
        case.state = CaseState.WAITING
        case.why = ("restart group %d: %d other broken server(s) not read "
                    "yet" % (case.group, len(unread)))
        return FOLLOW
    _, waits = ir.release(repair.members())
    if case.server_id in waits:
        return _wait(repair, case, CaseState.WAITING, waits[case.server_id], now,
                     server)

    # 7. Nova's power-state sync saves a guest's power state (the news
    # that opened the case) and stops the server right after: its stop is
    # waited for, so that a server whose guest went off gets its start
    # rather than a hard reboot racing Nova's stop.
    if (not case.operator and case.attempt is None
            and server.vm_state in ("active", "paused")
            and server.task_state is None
            and server.power_state in GUEST_OFF
            and now - case.broke_at < NOVA_STOP_GRACE):
        case.state = CaseState.WAITING
        case.why = "Nova's power-state sync is stopping the server"
        return FOLLOW
    return _GO


def _ladder(repair: RepairPort, case: Case, server: Server, now: float
            ) -> After:
    """8. The ladder: the next action, sent, or why none."""
    s = repair.settings
    rows = _unsent_closed(repair, server,
                          repair.ctx.journal.repairs(case.server_id), now)
    history, marked_failed = _history(rows)
    level, _facts = _level(repair, case, server, now)
    if case.operator and not s.enabled:
        return None
    decision = ir.next_action(history, s, level, now=now,
                              vm_state=server.vm_state,
                              task_state=server.task_state,
                              marked_failed=marked_failed)
    if isinstance(decision, ir.Refusal):
        return _refused(repair, case, server, decision, now)
    return _send(repair, case, server, decision, now)


def went_out(repair: RepairPort, server: Server, action: str,
             started_at: float, host: Optional[str]) -> bool:
    """Whether the repair ``action`` journalled at ``started_at`` for the
    server on ``host`` by another process (a member whose lease lapsed or
    that was killed, this one before a restart) may have reached Nova.
    False only when Nova shows it did not: the server still on ``host``
    with no task in progress, and none of its instance actions is that
    action started ``SENT_SKEW`` seconds before the row or later. Any
    doubt (Nova unreadable, an action without a start time) says True:
    the attempt is then followed as sent."""
    name = NOVA_ACTION.get(action)
    if name is None or server.task_state is not None \
            or (host and server.host != host):
        return True
    try:
        actions = repair.ctx.compute.instance_actions(server.id)
    except (base.ComputeError, NotImplementedError) as e:
        LOG.warning("repair_sent_unknown", server=server.id, action=action,
                    reason=str(e) or type(e).__name__,
                    effect="the journalled attempt is followed as sent")
        return True
    return any(a.action == name and (a.start_time is None
                                     or a.start_time >= started_at - SENT_SKEW)
               for a in actions)


def _not_sent(repair: RepairPort, server_id: str, row: Optional[int],
              attempt: ir.Attempt, now: float) -> bool:
    """Close the row of an attempt never sent (NOT_SENT); False when the
    journal refused."""
    why = ("no %s in Nova's instance actions of the server since the row "
           "was journalled: the process that journalled it stopped before "
           "sending it" % NOVA_ACTION[attempt.action])
    if row is not None:
        try:
            repair.ctx.journal.repair_finished(row, now, NOT_SENT, why)
        except Exception as e:   # noqa: BLE001 - logged; followed as sent
            LOG.error("journal_write_failed", server=server_id,
                      reason=str(e), effect="the attempt is followed as "
                      "sent")
            return False
    repair.stats["not_sent"] += 1
    LOG.warning("repair_not_sent", server=server_id, action=attempt.action,
                journalled_at=attempt.started_at, reason=why,
                effect="not counted as an attempt: the ladder goes on now")
    return True


def _unsent_closed(repair: RepairPort, server: Server, rows: List[Row],
                   now: float) -> List[Row]:
    """The server's repair rows, those left running by another process
    (this case follows none) and never sent closed as NOT_SENT: a row
    that would hold the server until its deadline is asked of Nova."""
    s = repair.settings
    for r in rows:
        if r["outcome"] != ir.RUNNING or r["action"] not in ir.ACTIONS:
            continue
        attempt = ir.Attempt(r["action"], r["started_at"])
        if now >= ir.deadline(attempt, s) or went_out(
                repair, server, r["action"], r["started_at"],
                r["host_name"]):
            continue
        if _not_sent(repair, server.id, r["id"], attempt, now):
            r["outcome"] = NOT_SENT
    return rows


def _wait(repair: RepairPort, case: Case, state: CaseState, why: str,
          now: float, server: Server) -> float:
    if case.state != state or case.why != why:
        LOG.info("repair_waits", server=case.server_id, state=state.value,
                 reason=why)
        set_markers(repair, case.server_id, markers.pending(now, why),
                    _metadata(server))
    case.state, case.why = state, why
    repair.stats["waits_" + state.value] += 1
    return WAIT


def _refused(repair: RepairPort, case: Case, server: Server,
             refusal: ir.Refusal, now: float) -> After:
    kind = refusal.kind
    if kind in (ir.IN_PROGRESS, ir.BUSY):
        case.state, case.why = CaseState.WAITING, refusal.reason
        if refusal.until is not None:
            return max(FOLLOW, min(WAIT, refusal.until - now))
        return WAIT
    meta = _metadata(server)
    if kind == ir.FAILED and markers.FAILED in meta:
        LOG.info("repair_not_started", server=case.server_id, kind=kind,
                 reason=refusal.reason)
    elif kind == ir.FAILED:
        _row(repair, case, "failed", now, "failed", refusal.reason)
        set_markers(repair, case.server_id,
                    markers.failed(now, refusal.reason), meta)
        repair.stats["failed"] += 1
        LOG.warning("repair_failed", server=case.server_id,
                    reason=refusal.reason)
    elif kind == ir.NOT_PERMITTED:
        _row(repair, case, "not_permitted", now, "not permitted",
             refusal.reason)
        set_markers(repair, case.server_id, markers.result(
            refusal.action or "repair", markers.NOT_PERMITTED, now,
            refusal.reason), meta)
        repair.stats["not_permitted"] += 1
        LOG.warning("repair_not_permitted", server=case.server_id,
                    action=refusal.action, reason=refusal.reason)
    else:
        set_markers(repair, case.server_id, {markers.PENDING: None}, meta)
        LOG.info("repair_not_started", server=case.server_id, kind=kind,
                 reason=refusal.reason)
    repair.close(case)
    return None


def _room_elsewhere(repair: RepairPort, server: Server) -> Optional[str]:
    """A host other than the server's with room for it, or None."""
    raw = server.raw or {}
    flavor = raw.get("flavor") or {}
    need = (int(flavor.get("vcpus") or 1), int(flavor.get("ram") or 0),
            int(flavor.get("disk") or 0))
    try:
        caps = repair.ctx.compute.host_capacities() or {}
        services = {svc.host: svc for svc in repair.ctx.compute
                    .list_services()}
    except (base.ComputeError, NotImplementedError) as e:
        LOG.warning("capacity_unknown", server=server.id,
                    reason=str(e) or type(e).__name__)
        return None
    for name, c in sorted(caps.items()):
        svc = services.get(name)
        if name == server.host or svc is None or svc.status != "enabled" \
                or svc.state != "up" or svc.forced_down:
            continue
        if (c.vcpus - c.vcpus_used >= need[0]
                and c.ram_mb - c.ram_mb_used >= need[1]
                and c.disk_gb - c.disk_gb_used >= need[2]):
            return name
    return None


def _send(repair: RepairPort, case: Case, server: Server, action: ir.Action,
          now: float) -> float:
    ctx = repair.ctx
    if action.moves and _room_elsewhere(repair, server) is None:
        _wait(repair, case, CaseState.PENDING, "%s needs room on another host: "
              "none has it now (retried when capacity appears)"
              % action.name, now, server)
        return CAPACITY
    # The gate once more, right before the request: the host must still
    # be active for the engine and up for Nova.
    why = host_gate(repair, server.host)
    if why is None:
        try:
            svc = ctx.compute.service_of(server.host)
        except base.ComputeError as e:
            svc, why = None, "Nova's service row unreadable: %s" % e
        if why is None and (svc is None or svc.state != "up"
                            or svc.forced_down):
            why = "Nova reports the compute service of %s down or " \
                  "forced down" % server.host
    if why is not None:
        return _wait(repair, case, CaseState.PAUSED, why, now, server)
    case.row = ctx.journal.repair_started(
        case.server_id, server.host, action.name, now, step=action.step,
        verdict=case.verdict, detail=action.reason)
    case.attempt = ir.Attempt(action.name, now)
    case.step = action.step
    case.active_since = None
    case.moved_from = server.host if action.moves else None
    case.confirmed = case.started_after_move = False
    case.state, case.why = CaseState.RUNNING, action.reason
    set_markers(repair, case.server_id, markers.running(action.name, now),
                _metadata(server))
    try:
        failpoints.hit("before_repair_request:" + action.name, case.server_id)
        if action.name == ir.START:
            ctx.compute.start_server(case.server_id)
        elif action.name == ir.HARD_REBOOT:
            ctx.compute.reboot_server(case.server_id, hard=True)
        elif action.name == ir.COLD_MIGRATE:
            ctx.compute.cold_migrate(case.server_id)
        elif action.name == ir.REBUILD:
            image = (server.raw or {}).get("image")
            ctx.compute.rebuild_server(case.server_id, image.get("id")
                                       if isinstance(image, dict) else image)
    except base.ComputeError as e:
        LOG.warning("repair_request_refused", server=case.server_id,
                    action=action.name, reason=str(e))
        _finished(repair, case, server, ir.FAILURE, repair.clock(),
                  "Nova refused: %s" % e)
        return FOLLOW
    failpoints.hit("after_repair_request:" + action.name, case.server_id)
    repair.stats["sent_" + action.name] += 1
    LOG.info("repair_sent", server=case.server_id, host=server.host,
             action=action.name, step=action.step, reason=action.reason)
    return FOLLOW


def _follow(repair: RepairPort, case: Case, server: Server, now: float) -> str:
    """How the action in flight stands (a policy outcome), sending what a
    cold migration needs on its way (confirm, start)."""
    s = repair.settings
    status = (server.status or "").upper()
    attempt = case.attempt
    # (only _in_flight asks, for a case with an attempt in flight)
    assert attempt is not None
    if attempt.action == ir.COLD_MIGRATE and not case.started_after_move:
        if status == "VERIFY_RESIZE" and not case.confirmed:
            try:
                repair.ctx.compute.confirm_resize(case.server_id)
                case.confirmed = True
            except base.ComputeError as e:
                LOG.warning("repair_confirm_refused", server=case.server_id,
                            reason=str(e))
        elif (status == "SHUTOFF" and server.task_state is None
              and server.host != case.moved_from):
            if host_gate(repair, server.host) is None:
                try:
                    repair.ctx.compute.start_server(case.server_id)
                    case.started_after_move = True
                except base.ComputeError as e:
                    LOG.warning("repair_start_refused",
                                server=case.server_id, reason=str(e))
    if server.task_state is not None or status in ("VERIFY_RESIZE",
                                                   "RESIZE", "REBUILD",
                                                   "HARD_REBOOT"):
        if now - attempt.started_at > s.action_timeout:
            return ir.TIMEOUT
        return ir.RUNNING
    if is_up(server):
        if case.active_since is None:
            case.active_since = now
    elif status == "ACTIVE":
        status = "SHUTOFF"              # ACTIVE with the guest off
    return ir.judge(attempt, status, case.active_since, now, s)


def host_gate(repair: RepairPort, host: Optional[str]) -> Optional[str]:
    """Why no repair may act on a server of ``host`` now, or None."""
    if not host:
        return "the server has no host"
    rec = repair.host_record(host)
    if rec is None:
        return "host %s is unknown to the engine" % host
    if rec.state is not State.ACTIVE:
        owner = ("planned work pauses repair"
                 if rec.state in (State.DRAINING, State.MAINTENANCE,
                                  State.SUSPENDED)
                 else "the host path owns its servers")
        return "host %s is %s: %s" % (host, rec.state.value, owner)
    if not rec.heartbeat_ok:
        return "host %s: its heartbeat was lost" % host
    if rec.agent == "silent":
        return "host %s: its agent is silent" % host
    if rec.operator_disabled:
        return ("host %s is disabled by its operator (%s): planned work "
                "pauses repair" % (host, rec.operator_disabled))
    ok, why = repair.cluster_ok()
    if not ok:
        return "the engine holds host recoveries: %s" % why
    return None



def _finished(repair: RepairPort, case: Case, server: Server, outcome: str,
              now: float, detail: str = "") -> None:
    attempt = case.attempt
    # (asked for the attempt in flight: followed, or just refused)
    assert attempt is not None
    detail = detail or {
        ir.SUCCESS: "ACTIVE for %.0f s" % repair.settings.min_uptime,
        ir.FAILURE: "the server is %s" % server.status,
        ir.TIMEOUT: "not ACTIVE within %.0f s" % repair.settings
        .action_timeout}.get(outcome, outcome)
    if case.row is not None:
        finish_row(repair, case, now, outcome, detail)
    repair.stats["outcome_" + outcome] += 1
    log = LOG.info if outcome == ir.SUCCESS else LOG.warning
    log("repair_result", server=case.server_id, action=attempt.action,
        outcome=outcome, seconds=round(now - attempt.started_at, 2),
        reason=detail)
    set_markers(repair, case.server_id,
                markers.result(attempt.action, outcome, now, "" if outcome
                               == ir.SUCCESS else detail))
    case.attempt = None
    case.active_since = None


__all__: List[str] = ["run", "set_markers", "finish_row", "is_up",
                      "went_out", "NOT_SENT"]
