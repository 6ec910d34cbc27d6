"""A planned drain of a live host, as passes of the engine (like the
evacuation): each pass reads the host's servers from Nova, asks the drain
policy (policy.drain.plan) how each is to move now, sends what the
concurrency allows, watches the migrations in flight (stuck ones aborted
or forced to complete) and returns either "come back in N seconds" or the
drain's result. The first pass runs the preflight and, when it passes (or
``force``), disables the compute service with instanceha's marker so the
scheduler places nothing new there.

Nothing here powers anything off or evacuates: the host is alive. A host
that dies while draining leaves the DRAINING state (the failure path takes
it); its next pass sees that and stops.

What a pass remembers is in its carry. What a restart must not forget
(the servers at the start, attempts per server, servers given up and why,
destinations tried, stuck counts, cold moves to confirm, when each move
was asked, when the next pass is due) is journalled at each pass and
before each migration request (Journal.drain_saved), under the drain's
name: when the host entered draining. A restarted engine reads it back
and continues the drain: no server gets more attempts than
[drain] stuck_retries allows, one given up stays given up, and the first
pass waits for the time the last one set. Only the progress of the
migrations in flight (their stuck clocks) starts afresh.
"""

import dataclasses
import datetime
from typing import (Any, Callable, Collection, Dict, Iterable, List, Mapping,
                    Optional, Sequence, Set, Tuple, Union)

import structlog

from instanceha import failpoints
from instanceha.drivers.compute import base as compute_base
from instanceha.engine.context import Context
from instanceha.engine.passes import Requeue
from instanceha.events import DrainSummary, Event, EventKind, EventKind as E
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State
from instanceha.policy import drain as drain_policy
from instanceha.policy import drain_hosts
from instanceha.policy import facts_nova
from instanceha.policy.drain import DrainPlan
from instanceha.policy.drain_settings import Settings
from instanceha.policy.facts import HostFacts
from instanceha.util.marker import MARKER

LOG = structlog.get_logger("instanceha.drain")

Server = compute_base.Server
Service = compute_base.ComputeService
#: a move's request to Nova: call(server id)
Request = Callable[[str], object]

#: The start of the disabled_reason a drain writes.
DRAIN_REASON = MARKER + " draining"

#: Seconds before a pass looks again at a migration that has just been
#: asked for, is preparing, or was just aborted, whatever [drain]
#: poll_interval says: its stuck clock starts when a pass first sees it
#: copying, and an aborted one's retry waits for the next pass.
QUICK = 1.0
#: The shortest wait between two passes of one drain (s).
MIN_WAIT = 0.05

@dataclasses.dataclass
class Carry:
    """What the passes of one drain remember (in memory)."""

    ctx: Optional[Context] = None
    host: str = ""
    host_id: str = ""
    #: when the host entered draining: the drain's name in the journal
    since: Optional[float] = None
    #: when the next pass is due (the engine's clock), as journalled
    next_pass_at: Optional[float] = None
    #: when the drain began, when a server was last given up (ours)
    started_at: Optional[float] = None
    failed_at: Optional[float] = None
    #: the plan's view of the other hosts, read at the first pass
    capacities: Optional[Dict[str, HostFacts]] = None
    services: Optional[List[Service]] = None
    #: servers on the host at the first pass
    initial: Tuple[str, ...] = ()
    #: migrations in flight from the host at the last pass
    moving: int = 0
    attempts: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: server -> when its move was asked (ours), until it left the host
    sent_at: Dict[str, float] = dataclasses.field(default_factory=dict)
    #: server -> (bytes still to copy, when that count last went down)
    progress: Dict[str, Tuple[Optional[int], float]] = dataclasses.field(
        default_factory=dict)
    #: server -> stuck migrations handled (aborted or forced)
    stuck: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: server -> destinations of its migrations that got stuck (a retry
    #: goes elsewhere)
    tried: Dict[str, Set[str]] = dataclasses.field(default_factory=dict)
    #: server -> why it is no longer tried
    given_up: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: servers cold-migrated and not yet confirmed: once moved, they wait
    #: in VERIFY_RESIZE on their destination, off this host's list
    cold: Set[str] = dataclasses.field(default_factory=set)
    #: servers seen off the host (moved, or deleted meanwhile)
    moved: Set[str] = dataclasses.field(default_factory=set)
    #: servers live-migrating on the host at the last pass (not
    #: journalled): one that leaves needs no confirmation
    live_moving: Set[str] = dataclasses.field(default_factory=set)

    def close(self) -> None:
        self.moving = 0
        runs = getattr(self.ctx, "runs", None)
        if runs is not None and runs.get(self.host_id) is self:
            del runs[self.host_id]

    def durable(self) -> Dict[str, object]:
        """What the journal keeps of this drain (JSON-able)."""
        return {"initial": list(self.initial),
                "attempts": dict(self.attempts),
                "given_up": dict(self.given_up),
                "tried": {s: sorted(h) for s, h in self.tried.items()},
                "stuck": dict(self.stuck),
                "cold": sorted(self.cold),
                "sent_at": dict(self.sent_at)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`durable` kept."""
        self.initial = tuple(state.get("initial", ()))
        self.attempts = dict(state.get("attempts", {}))
        self.given_up = dict(state.get("given_up", {}))
        self.tried = {s: set(h) for s, h in state.get("tried", {}).items()}
        self.stuck = dict(state.get("stuck", {}))
        self.cold = set(state.get("cold", ()))
        self.sent_at = dict(state.get("sent_at", {}))

    def servers_view(self) -> Dict[str, str]:
        """{server id: where it stands} for status, server by server."""
        view = {}
        for sid in self.initial:
            if sid in self.given_up:
                view[sid] = "not migratable: " + self.given_up[sid]
            elif sid in self.sent_at or sid in self.cold:
                view[sid] = "moving"
            else:
                view[sid] = "waiting"
        for sid in self.moved:
            view[sid] = "moved"
        return view

    def status_text(self) -> str:
        """Where the drain stands, in a few words (status)."""
        text = "%d of %d servers moved, %d moving" % (
            len(self.moved), len(self.initial), self.moving)
        if self.given_up:
            text += ", %d not migratable" % len(self.given_up)
        return text


def others_inflight(ctx: Context, host: str) -> int:
    """Servers migrating now from the other hosts being drained or failed
    back (their runs' last count): the cap across hosts ([drain]
    max_concurrent)."""
    return sum(run.moving for run in list(ctx.runs.values())
               if isinstance(run, Carry) and run.host != host)


def _now_text(ctx: Context) -> str:
    return datetime.datetime.fromtimestamp(
        ctx.clock(), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def result(ctx: Context, record: HostRecord, kind: EventKind, reason: str
           ) -> Event:
    return Event(kind, record.id, ctx.clock(), name=record.name,
                 reason=reason, source="action")


def read(ctx: Context, host: str
         ) -> Tuple[List[Server], Dict[str, HostFacts], List[Service]]:
    """(servers, {host: HostFacts}, services) of Nova now, as the plan
    takes them: the host's servers, every compute host's capacity, zone
    and aggregates, and the compute and control services."""
    servers = ctx.compute.list_servers(host)
    try:
        capacities = ctx.compute.host_capacities()
    except (compute_base.ComputeError, NotImplementedError) as e:
        LOG.warning("capacity_unknown", host=host,
                    reason=str(e) or type(e).__name__,
                    effect="the drain preflight cannot count free capacity")
        capacities = {}
    services = list(ctx.compute.list_services())
    try:
        services += list(ctx.compute.list_control_services())
    except (compute_base.ComputeError, NotImplementedError) as e:
        LOG.warning("control_services_unknown", host=host,
                    reason=str(e) or type(e).__name__)
    aggregates = compute_base.aggregates_or_none(
        ctx.compute, LOG, "the drain preflight ignores aggregates",
        host=host) or ()
    hosts = facts_nova.host_facts(capacities, services, aggregates)
    return servers, hosts, services


def settings_for(ctx: Context, concurrency: Optional[int] = None
                 ) -> Settings:
    """[drain]'s settings, with an operator's concurrency for one host."""
    settings = drain_policy.Settings.from_conf(ctx.conf)
    if concurrency:
        settings = dataclasses.replace(settings, concurrency=concurrency)
    return settings


def _plan(ctx: Context, host: str, servers: Sequence[Server],
          hosts: Mapping[str, HostFacts], services: Sequence[Service],
          force: bool, concurrency: Optional[int]) -> DrainPlan:
    return drain_policy.plan(host, drain_policy.server_facts(servers),
                             hosts, services,
                             settings_for(ctx, concurrency), force=force)


def preflight(ctx: Context, host: str, force: bool = False,
              concurrency: Optional[int] = None) -> DrainPlan:
    """The drain's plan for ``host``, read from Nova now; nothing is
    changed."""
    servers, hosts, services = read(ctx, host)
    return _plan(ctx, host, servers, hosts, services, force, concurrency)


def drain(ctx: Context, record: HostRecord, carry: Optional[Carry] = None
          ) -> Union[Event, Requeue]:
    """One pass of the host's drain: a Requeue while servers are moving
    or still to send, the result event once what can move has moved."""
    if record.state is not State.DRAINING:
        # The host left draining (cancelled, suspended, lost): nothing
        # more is sent; what Nova has in flight finishes or is aborted by
        # the undrain.
        if carry is not None:
            carry.close()
        _ended(ctx, record)
        return result(ctx, record, E.DRAIN_CANCELLED,
                      "the host left draining (%s)" % record.state.value)
    settings = settings_for(ctx, record.drain_concurrency)
    concurrency = settings.concurrency
    if carry is None:
        carry = resumed(ctx, record)
        now = ctx.clock()
        if carry is not None and carry.next_pass_at is not None \
                and carry.next_pass_at > now:
            return Requeue(max(MIN_WAIT, carry.next_pass_at - now), carry)
    if carry is None:
        servers, capacities, services = read(ctx, record.name)
        plan = _plan(ctx, record.name, servers, capacities, services,
                     record.drain_force, concurrency)
        if not (plan.ok or plan.proceed):
            LOG.warning("drain_refused", host=record.name,
                        reasons=len(plan.refusals),
                        reason="; ".join(plan.refusals))
            return result(ctx, record, E.DRAIN_FAILED,
                           "preflight refused: " + "; ".join(plan.refusals))
        svc = ctx.compute.service_of(record.name)
        if svc is not None and svc.status == "enabled":
            ctx.compute.disable_service(
                svc.id, "%s since %s" % (DRAIN_REASON, _now_text(ctx)))
            LOG.info("drain_disabled", host=record.name,
                     reason="scheduling stopped: nothing new is placed on "
                            "the host while it drains")
        carry = Carry(capacities=capacities, services=services,
                      initial=tuple(s.id for s in servers),
                      host=record.name, host_id=record.id, ctx=ctx,
                      started_at=ctx.clock(), since=record.since)
        ctx.runs[record.id] = carry
        LOG.info("drain_started", host=record.name,
                 servers=len(servers), concurrency=concurrency,
                 refusals=len(plan.refusals), forced=record.drain_force,
                 reason="preflight passed" if plan.ok else
                 "preflight refused, forced: " + "; ".join(plan.refusals))
    else:
        down = source_down(ctx, record)
        if down:
            # Nova refuses every move from a host whose nova-compute is
            # down: nothing is sent or counted; the host is dead or its
            # compute is, and the failure path decides (its heartbeat loss
            # takes the host out of draining). Never declared drained.
            carry.moving = 0
            LOG.warning("drain_paused", host=record.name, reason=down,
                        effect="nothing sent until it reports again")
            return Requeue(settings.poll_interval, carry)
        servers = ctx.compute.list_servers(record.name)
    return _step(ctx, record, carry, servers, settings, concurrency)


def resumed(ctx: Context, record: HostRecord) -> Optional[Carry]:
    """The carry of a drain that a restarted engine continues, rebuilt
    from the journal (with Nova's view of the other hosts read now), or
    None: no drain of this host since it entered draining was journalled
    (a new drain, or one that never passed its first pass)."""
    row = ctx.journal.drain_run(record.id, record.since)
    if row is None:
        row = _ended_unreported(ctx, record)
    if row is None:
        return None
    _, capacities, services = read(ctx, record.name)
    carry = Carry(ctx=ctx, host=record.name, host_id=record.id,
                  since=record.since, started_at=row["started_at"],
                  failed_at=row["failed_at"],
                  next_pass_at=row["next_pass_at"],
                  capacities=capacities, services=services)
    carry.restore(row["state"])
    ctx.runs[record.id] = carry
    LOG.info("drain_resumed", host=record.name,
             servers=len(carry.initial),
             attempts=sum(carry.attempts.values()),
             given_up=len(carry.given_up), next_pass_at=carry.next_pass_at,
             reason="the drain journalled before the restart goes on: its "
                    "counts are kept")
    return carry


def _ended_unreported(ctx: Context, record: HostRecord
                      ) -> Optional[Mapping[str, Any]]:
    """The row of this drain (the host still draining since the same
    moment) marked ended: the process ended the drain and was stopped
    before its result was journalled. The drain's last pass is run again
    from it, so that its summary counts every server it moved."""
    rows = [r for r in ctx.journal.drain_runs(record.id)
            if r["since"] == record.since]
    return rows[-1] if rows else None


def journalled(ctx: Context, record: HostRecord, carry: Carry, now: float
               ) -> bool:
    """Journal what the drain knows; False (logged) when the journal did
    not take it: then nothing more is sent this pass."""
    try:
        ctx.journal.drain_saved(
            record.id, record.name or "", carry.since, now,
            carry.started_at, carry.durable(),
            next_pass_at=carry.next_pass_at, failed_at=carry.failed_at)
    except Exception as e:   # noqa: BLE001 - the journal down, or refused
        LOG.warning("drain_not_journalled", host=record.name,
                    reason="%s: %s" % (type(e).__name__, e),
                    effect="no migration is asked for until it is")
        return False
    return True


def _ended(ctx: Context, record: HostRecord) -> None:
    try:
        ctx.journal.drain_ended(record.id, ctx.clock())
    except Exception as e:   # noqa: BLE001 - an open row names an old drain
        LOG.warning("drain_end_not_journalled", host=record.name,
                    reason="%s: %s" % (type(e).__name__, e))


def source_down(ctx: Context, record: HostRecord) -> Optional[str]:
    """Why the host's own nova-compute cannot migrate anything now (Nova
    says it is down, or it is forced down), or None."""
    svc = ctx.compute.service_of(record.name)
    if svc is None:
        return "Nova lists no compute service for the host"
    if svc.forced_down:
        return "its compute service is forced down"
    if svc.state != "up":
        return "Nova reports its compute service down"
    return None


def _step(ctx: Context, record: HostRecord, carry: Carry,
          servers: Sequence[Server], settings: Settings, concurrency: int
          ) -> Union[Event, Requeue]:
    now = ctx.clock()
    plan = drain_policy.plan(record.name,
                             drain_policy.server_facts(servers),
                             carry.capacities, carry.services, settings,
                             force=True)
    by_id, left_now = _observe(ctx, carry, servers, now)
    inflight = [sid for sid, _, how in plan.steps if how == "wait"]
    wake = [watch(ctx, record, carry, sid, settings, now)
            for sid in inflight]
    room = max(0, concurrency - len(inflight))
    cap = settings.max_concurrent - others_inflight(ctx, record.name)
    #: other hosts' moves hold this drain's back: any server's news may
    #: free its turn
    shared = cap < room
    room = max(0, min(room, cap))
    sent_now, left, deferred = _send_moves(ctx, record, carry, plan,
                                           settings, room, now)
    sent = len(sent_now)
    if sent:
        wake.append(now + QUICK)
    unconfirmed = _confirm_moved(ctx, record, carry, by_id, sent_now,
                                 left_now)
    carry.moved = {s for s in carry.initial
                   if s not in by_id and s not in carry.cold}
    moving = len(inflight) + sent + unconfirmed
    carry.moving = moving
    if moving or any(how in ("live", "cold", "confirm")
                     and sid not in carry.given_up
                     for sid, _, how in plan.steps):
        return _again(ctx, record, carry, now,
                      next_pass(settings, now, wake), anyone=shared)
    if carry.failed_at is not None and not (
            record.nova_seen_at is not None
            and record.nova_seen_at > carry.failed_at):
        # Servers given up on may have failed because the host is dying
        # (Nova calls it up for its service_down_time after a death):
        # the drain ends only once Nova has recorded a heartbeat after
        # the last failure. A dead host never gets one: its heartbeat
        # loss hands it to the failure path instead.
        LOG.info("drain_end_waits", host=record.name,
                 reason="waiting for a heartbeat newer than the last "
                        "failed migration before leaving servers on it")
        return _again(ctx, record, carry, now, settings.poll_interval)
    return _finished(ctx, record, carry, by_id, left, deferred)


def _observe(ctx: Context, carry: Carry, servers: Sequence[Server],
             now: float) -> Tuple[Dict[str, Server], bool]:
    """({server id: server} on the host now, did a server leave it since
    the last pass other than by a live migration seen under way?), with
    the carry's view of moves brought up to date."""
    by_id = {s.id: s for s in servers}
    # Servers that left the host since the last pass (all of those gone
    # at the first pass of a restarted engine), other than by a live
    # migration seen under way: whether one waits for its confirmation
    # is read from Nova (_confirm_moved).
    left_now = any(s not in by_id and s not in carry.moved
                   and s not in carry.live_moving for s in carry.initial)
    carry.live_moving = {
        s.id for s in servers
        if (s.task_state or "").strip().lower() == "migrating"}
    carry.moved = {s for s in carry.initial
                   if s not in by_id and s not in carry.cold}
    for sid in [s for s in carry.sent_at if s not in by_id]:
        # Off the host: moved (a cold move is confirmed on arrival).
        ctx.drain_stats["moved"] += 1
        ctx.drain_durations.append(now - carry.sent_at.pop(sid))
    return by_id, left_now


def _send_moves(ctx: Context, record: HostRecord, carry: Carry,
                plan: DrainPlan, settings: Settings, room: int, now: float
                ) -> Tuple[Set[str], List[str], List[str]]:
    """Send this pass's requests: every confirmation due, and up to
    ``room`` migrations, each counted in the journal before it is asked.
    Returns (the servers asked to move, [left: text], [deferred: name])."""
    why = plan.why
    sent_now: Set[str] = set()
    unjournalled = False
    left: List[str] = []
    deferred: List[str] = []
    for sid, name, how in plan.steps:
        if sid in carry.given_up:
            continue
        if how == "leave":
            left.append("%s (%s)" % (name or sid, why.get(sid, "left")))
            continue
        if how == "defer":
            deferred.append(name or sid)
            continue
        if how == "confirm":
            send(ctx, record, carry, sid, "confirm_resize",
                 ctx.compute.confirm_resize)
            continue
        if how not in ("live", "cold") or len(sent_now) >= room \
                or unjournalled:
            continue
        tries = carry.attempts.get(sid, 0)
        if tries > settings.stuck_retries:
            carry.given_up[sid] = ("%s migration failed %d times"
                                   % (how, tries))
            carry.failed_at = now
            ctx.drain_stats["given_up"] += 1
            LOG.warning("drain_server_given_up", host=record.name,
                        server=sid, reason=carry.given_up[sid])
            continue
        carry.attempts[sid] = tries + 1
        first_ask = sid not in carry.sent_at
        carry.sent_at.setdefault(sid, now)
        if how == "cold":
            # A cold move ends in VERIFY_RESIZE on its destination, off
            # this host's list: journalled as to confirm before it is
            # asked, so that a restart (or the replica taking over) finds
            # and confirms it (_confirm_moved).
            carry.cold.add(sid)
        # Counted in the journal before it is asked: a restart never
        # gives a server more attempts than stuck_retries allows.
        if not journalled(ctx, record, carry, now):
            carry.attempts[sid] = tries
            _unasked(carry, sid, first_ask)
            unjournalled = True
            continue
        request = (ctx.compute.live_migrate if how == "live"
                   else ctx.compute.cold_migrate)
        if how == "live" and carry.tried.get(sid):
            request = _elsewhere(ctx, record, carry, sid, request)
        if send(ctx, record, carry, sid, how + "_migrate", request):
            sent_now.add(sid)
            ctx.drain_stats["sent_" + how] += 1
        else:
            _unasked(carry, sid, first_ask)
    return sent_now, left, deferred


def _finished(ctx: Context, record: HostRecord, carry: Carry,
              by_id: Mapping[str, Server], left: List[str],
              deferred: List[str]) -> Event:
    """The drain is over: its DRAIN_OK, saying what moved and where, what
    could not be moved and what was left."""
    carry.close()
    _ended(ctx, record)
    gone = [s for s in carry.initial if s not in by_id]
    moved = len(gone)
    parts = ["%d/%d servers moved" % (moved, len(carry.initial))]
    if gone:
        parts.append("moved: " + _where(ctx, record, carry, gone))
    if carry.given_up:
        parts.append("not migratable: " + ", ".join(
            "%s (%s)" % (s, why) for s, why in sorted(carry.given_up.items())))
    if left:
        parts.append("left: " + ", ".join(left))
    if deferred:
        parts.append("in ERROR, not moved: " + ", ".join(deferred))
    summary = "; ".join(parts)
    LOG.info("drain_finished", host=record.name, moved=moved,
             total=len(carry.initial), reason=summary)
    return Event(E.DRAIN_OK, record.id, ctx.clock(), name=record.name,
                 reason=summary, source="action",
                 payload=DrainSummary(moved=tuple(gone)))


def _again(ctx: Context, record: HostRecord, carry: Carry, now: float,
           after: float, anyone: bool = False) -> Requeue:
    """Come back in ``after`` seconds, journalled with what the pass
    learnt; sooner on news of one of the host's servers (a migration's
    end), or of any server (``anyone``: other hosts' moves hold it)."""
    carry.next_pass_at = now + after
    journalled(ctx, record, carry, now)
    return Requeue(after, carry, waits_for=None if anyone
                   else frozenset(carry.initial))


#: Servers named one by one in a drain's summary (the journal's reason).
NAMED = 100
#: Seconds before the drain began from which Nova's migration records are
#: read (clock skew between this node and Nova).
SINCE_MARGIN = 600.0


def _where(ctx: Context, record: HostRecord, carry: Carry,
           gone: Sequence[str]) -> str:
    """'id to host, ...' for the servers the drain moved, from Nova's
    migration records of the host since the drain began (one read); a
    server with none is named alone."""
    dest: Dict[str, str] = {}
    try:
        # Nova's changes-since is on Nova's clock: a margin for skew
        # (an older migration of a server is replaced by its newer one).
        since = (None if carry.started_at is None
                 else carry.started_at - SINCE_MARGIN)
        for m in ctx.compute.list_host_migrations(record.name, since=since):
            if m.source_host == record.name and m.dest_host \
                    and m.status in ("completed", "confirmed", "finished",
                                     "done"):
                dest[m.server_id] = m.dest_host
    except (compute_base.ComputeError, NotImplementedError) as e:
        LOG.warning("drain_destinations_unknown", host=record.name,
                    reason=str(e) or type(e).__name__)
    text = ", ".join("%s to %s" % (s, dest[s]) if s in dest else s
                     for s in gone[:NAMED])
    if len(gone) > NAMED:
        text += " and %d more" % (len(gone) - NAMED)
    return text


def _unasked(carry: Carry, sid: str, first_ask: bool) -> None:
    """A move not asked after all (the journal or Nova refused it): the
    server waits on the host, its next try is a new move."""
    carry.cold.discard(sid)
    if first_ask:
        carry.sent_at.pop(sid, None)


#: Nova's statuses of a cold migration that reached its destination and
#: waits for its confirmation, or is being confirmed
TO_CONFIRM, CONFIRMING = "finished", "confirming"


def _cold_records(ctx: Context, record: HostRecord, carry: Carry
                  ) -> Optional[Dict[str, str]]:
    """{server: status of its newest cold migration from the host} for
    the drain's servers, from Nova's migration records of the host since
    the drain began (one read); None when they cannot be read."""
    since = (None if carry.started_at is None
             else carry.started_at - SINCE_MARGIN)
    try:
        migrations = ctx.compute.list_host_migrations(record.name,
                                                      since=since)
    except (compute_base.ComputeError, NotImplementedError) as e:
        LOG.warning("drain_migrations_unreadable", host=record.name,
                    reason=str(e) or type(e).__name__,
                    effect="cold moves confirmed from the servers' "
                           "status alone")
        return None
    out: Dict[str, str] = {}
    ours = set(carry.initial)
    for m in migrations:                # newest first
        if m.migration_type == "migration" and m.source_host == record.name \
                and m.server_id in ours:
            out.setdefault(m.server_id, m.status)
    return out


def _confirm_moved(ctx: Context, record: HostRecord, carry: Carry,
                   on_host: Mapping[str, Server],
                   sent_now: Collection[str] = (), look: bool = False) -> int:
    """Confirm the cold migrations that reached their destination (the
    server waits in VERIFY_RESIZE there); returns how many are still
    to confirm or to arrive.

    The moves followed are those in ``carry.cold`` (journalled before
    each request, so also those a killed process, or the replica before
    a takeover, sent), and those Nova's migration records show waiting
    for confirmation (``finished``) from this host of one of the drain's
    servers, read when a server left the host since the last pass
    (``look``) or a move is followed: a move the journal missed is
    confirmed too. A move Nova records as ``confirming`` is not asked
    again. A server of ``carry.cold`` still on the host with no task in
    progress is not moving (its request never left, was refused, or its
    migration failed): it is followed no more, and the plan moves it
    again (its attempt counted) or gives it up. ``sent_now``: asked this
    pass, after ``on_host`` was read."""
    records = (_cold_records(ctx, record, carry)
               if carry.cold or look else {})
    for sid, status in sorted((records or {}).items()):
        if status == TO_CONFIRM and sid not in on_host \
                and sid not in carry.cold:
            carry.cold.add(sid)
            LOG.warning("drain_cold_move_found", host=record.name,
                        server=sid, reason="Nova's record of its cold "
                        "migration from the host waits for confirmation, "
                        "the journal had none: confirmed")
    for sid in sorted(carry.cold):
        if sid in sent_now:
            continue
        listed = on_host.get(sid)
        if listed is not None:
            if not (listed.task_state or "").strip():
                carry.cold.discard(sid)
                LOG.info("drain_cold_move_not_pending", host=record.name,
                         server=sid, status=listed.status,
                         reason="still on the host with no task: its move "
                                "is not under way (never sent, refused or "
                                "failed)")
            continue                    # still here: moving
        if records is not None and records.get(sid) == CONFIRMING:
            continue                    # confirmation asked: Nova ends it
        try:
            server = ctx.compute.get_server(sid)
        except compute_base.NotFound:
            carry.cold.discard(sid)     # deleted meanwhile
            continue
        except compute_base.ComputeError as e:
            LOG.warning("drain_server_unreadable", host=record.name,
                        server=sid, reason=str(e))
            continue
        if (server.status or "").upper() == "VERIFY_RESIZE":
            send(ctx, record, carry, sid, "confirm_resize",
                 ctx.compute.confirm_resize)
        elif server.host != record.name and not server.task_state:
            carry.cold.discard(sid)     # confirmed: settled elsewhere
    # (one still on the host is counted by the plan: it waits for it)
    return sum(1 for sid in carry.cold if sid not in on_host)


def _elsewhere(ctx: Context, record: HostRecord, carry: Carry, sid: str,
              request: Request) -> Request:
    """The live migration of a server whose last one got stuck, aimed at
    another destination (drain_hosts.retry_destination) when one is
    left; else ``request`` (the scheduler chooses)."""
    tried = carry.tried[sid]
    dest = drain_hosts.retry_destination(record.name, carry.capacities or {},
                                         carry.services or (), tried)
    LOG.info("drain_retry_destination", host=record.name, server=sid,
             destination=dest, tried=",".join(sorted(tried)),
             reason="its migration to %s got stuck: tried elsewhere"
             % ", ".join(sorted(tried)) if dest else
             "no other destination left: the scheduler chooses")
    if dest is None:
        return request
    return lambda s: ctx.compute.live_migrate(s, host=dest)


def send(ctx: Context, record: HostRecord, carry: Carry, sid: str, what: str,
         call: Request) -> bool:
    """Send one request; a refusal is logged and the server tried again
    at a later pass (its attempts counted)."""
    try:
        failpoints.hit("before_drain_request:" + what, sid)
        call(sid)
    except compute_base.ComputeError as e:
        LOG.warning("drain_request_refused", host=record.name, server=sid,
                    request=what, reason=str(e))
        return False
    failpoints.hit("after_drain_request:" + what, sid)
    LOG.info("drain_request_sent", host=record.name, server=sid,
             request=what)
    return True


def next_pass(settings: Settings, now: float,
              wake: Iterable[Optional[float]]) -> float:
    """Seconds to the next pass: [drain] poll_interval, sooner when a
    migration in flight needs a look (``wake``: moments on the engine's
    clock, None for "at the poll"), so that a stuck one is handled at its
    deadline rather than at the first poll after it."""
    due = [w for w in wake if w is not None]
    if not due:
        return settings.poll_interval
    return max(MIN_WAIT, min(float(settings.poll_interval), min(due) - now))


def watch(ctx: Context, record: HostRecord, carry: Carry, sid: str,
          settings: Settings, now: float) -> Optional[float]:
    """A migration in flight: note its progress; one that copied nothing
    for [drain] stuck_timeout is aborted or forced to complete. Returns
    when a pass should look at it again (the engine's clock), or None
    for the next poll."""
    try:
        migrations = ctx.compute.server_migrations(sid)
    except compute_base.ComputeError as e:
        LOG.warning("drain_progress_unknown", host=record.name, server=sid,
                    reason=str(e))
        return None
    running = [m for m in migrations if m.status in ("running", "queued",
                                                     "preparing")]
    if not running:
        carry.progress.pop(sid, None)
        return None
    mig = running[0]
    left = None
    if mig.memory_remaining is not None or mig.disk_remaining is not None:
        left = (mig.memory_remaining or 0) + (mig.disk_remaining or 0)
    if mig.status != "running" or left is None:
        # Queued behind another (Nova runs max_concurrent_live_migrations
        # at once per compute, 1 by default) or preparing: it has not
        # started copying, and without figures no progress can be judged.
        # Only a running migration whose figures stop going down is stuck.
        # A queued one may wait long (the poll); one preparing, or running
        # without figures yet, is about to start its stuck clock (soon).
        carry.progress.pop(sid, None)
        return None if mig.status == "queued" else now + QUICK
    seen = carry.progress.get(sid)
    if seen is None or seen[0] is None or left < seen[0]:
        carry.progress[sid] = (left, now)
        return now + settings.stuck_timeout
    if now - seen[1] < settings.stuck_timeout:
        return seen[1] + settings.stuck_timeout
    handled = carry.stuck.get(sid, 0)
    carry.stuck[sid] = handled + 1
    if mig.dest_host:
        carry.tried.setdefault(sid, set()).add(mig.dest_host)
    ctx.drain_stats["stuck"] += 1
    carry.progress.pop(sid, None)
    action = settings.stuck_action
    why = ("no progress for %.0fs (%s bytes left)"
           % (now - seen[1], "?" if left is None else left))
    LOG.warning("drain_migration_stuck", host=record.name, server=sid,
                migration=mig.id, action=action, reason=why)
    try:
        if action == "force_complete":
            ctx.compute.force_complete_migration(sid, mig.id)
            ctx.drain_stats["forced"] += 1
        else:
            ctx.compute.abort_migration(sid, mig.id)
            ctx.drain_stats["aborted"] += 1
    except compute_base.ComputeError as e:
        LOG.warning("drain_stuck_action_refused", host=record.name,
                    server=sid, action=action, reason=str(e))
    return now + QUICK
