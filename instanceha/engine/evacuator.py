"""Evacuate every evacuable server of one fenced host, K at a time, in
passes.

The EVACUATE action runs :func:`evacuate_pass`: the first pass proves the
host dead again, reads Nova and the journal and plans the run
(engine.evac_run); every pass judges what is in flight (engine.evac_judge),
sends what the admission gate allows and returns the run's Outcome once
nothing is left to send or in flight, else a :class:`Requeue`: the engine
comes back after its delay, or sooner when a notification about a server
wakes the host. No pass waits, and nothing runs on a thread of its own.
"""

from __future__ import annotations

import dataclasses
from typing import (TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import structlog

from instanceha.engine import admission, evac_groups, evac_judge, placement
from instanceha.engine import evac_send
from instanceha.engine import proof, selection
from instanceha.engine.evac_run import Run, close_open_rows
from instanceha.engine.evac_state import (IN_FLIGHT, REBUILD_TASK_STATES,
                                          Outcome, by_server)
from instanceha.engine.passes import Requeue, answer
from instanceha.drivers.compute.base import Migration, Server
from instanceha.events import Event, EvacuationSummary, EventKind as E
from instanceha.fsm.record import HostRecord
from instanceha.policy import power, storage_fence

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.evac_state import Attempt

LOG = structlog.get_logger("instanceha.evacuator")

__all__ = ["Outcome", "Requeue", "evacuate", "evacuate_pass",
           "close_open_rows"]


def evacuate(ctx: Context, record: HostRecord, carry: Optional[Run] = None
             ) -> Union[Event, Requeue]:
    """One pass of the host's evacuation (``carry``: the previous pass's
    Requeue.carry): a Requeue while servers are still to send or in
    flight, the result event once all are settled."""
    out = evacuate_pass(ctx, record, carry)
    if isinstance(out, Requeue):
        return out
    # Servers rebuilt by an earlier attempt of this recovery (a retried
    # action, a restart) count too: the summary is the recovery's.
    evacuable = out.total - len(out.skipped) + out.earlier
    summary = "%d/%d servers evacuated" % (len(out.done) + out.earlier,
                                           evacuable)
    if out.skipped:
        sid, why = sorted(out.skipped.items())[0]
        summary += ", %d not evacuable (%s: %s%s)" % (
            len(out.skipped), sid, why,
            "; the others in the journal" if len(out.skipped) > 1 else "")
    if out.reserved:
        summary += "; " + out.reserved
    if out.retried:
        # Servers whose destination died (or whose request Nova failed)
        # and that were sent again: not a failure of this host.
        summary += ", %d sent again after a failure" % len(out.retried)
    counts = EvacuationSummary(
        done=len(out.done) + out.earlier, total=out.total + out.earlier,
        skipped=len(out.skipped), failed=len(out.failed),
        no_capacity=len(out.no_capacity), retried=len(out.retried))
    if out.unproven:
        # Not proven dead when servers were to be sent: what was sent
        # before finishes; nothing more goes, and the host is watched.
        text = out.unproven
        if out.done or out.earlier:
            text += "; so far " + summary
        return answer(ctx, record, E.REPROOF_FAILED, text, counts)
    if out.stopped:
        return answer(ctx, record, E.EVACUATE_FAILED,
                       "%s; stopped for the operator's suspend: %d servers "
                       "not sent, left on the host" % (summary, out.stopped),
                       dataclasses.replace(counts,
                                           stopped_for_operator=True))
    if out.returned:
        return answer(ctx, record, E.EVACUATE_FAILED,
                       "%s; stopped: the host reported back while being "
                       "evacuated, %d servers left on it"
                       % (summary, len(out.failed)), counts)
    if out.failed:
        sid, why = next(iter(out.failed.items()))
        return answer(ctx, record, E.EVACUATE_FAILED,
                       "%s; %d failed (server %s: %s)"
                       % (summary, len(out.failed), sid, why), counts)
    if out.no_capacity:
        sid, why = next(iter(out.no_capacity.items()))
        if out.capacity:
            text = "%s; %s (server %s %s)" % (summary, out.capacity, sid,
                                              why)
        else:
            text = "%s; %d found no host (%s)" % (
                summary, len(out.no_capacity), why)
        return answer(ctx, record, E.EVACUATE_NO_CAPACITY, text, counts)
    return answer(ctx, record, E.EVACUATE_OK, summary, counts)


def evacuate_pass(ctx: Context, record: HostRecord, run: Optional[Run] = None
                  ) -> Union[Outcome, Requeue]:
    """One pass of the evacuation of ``record``'s host. ``run``: what the
    previous pass returned in its :class:`Requeue` (None: a new attempt).
    Returns the :class:`Outcome` once nothing is left to send or in
    flight, else a :class:`Requeue`. Never waits: the engine comes back.

    ``record`` is the host's record now: once it is no longer evacuating
    (an operator suspended it), nothing more is sent and the servers Nova
    already has are judged to the end (and journalled). Raises
    ComputeError on API trouble that a retry may cure (the engine backs
    off and starts a new attempt, which resumes what Nova took)."""
    if run is None:
        started = _start(ctx, record)
        if isinstance(started, Outcome):
            return started
        run = started
    try:
        return _step(ctx, record, run)
    except BaseException:
        run.close()
        raise


def _start(ctx: Context, record: HostRecord) -> Union[Run, Outcome]:
    """The first pass's reading of the world: a :class:`_Run`, or the
    :class:`Outcome` when the host is not proven dead now."""
    host = record.name
    # A proof of death is never reused (a restart, a takeover, a wait for
    # capacity may lie between the fence and now): proven dead again
    # before anything of this pass happens.
    ok, why = proof.reprove(ctx, record)
    if not ok:
        outcome = Outcome(total=0)
        outcome.unproven = why
        LOG.warning("evacuation_not_started", host=host, reason=why,
                    effect="nothing sent; the host is watched again")
        return outcome
    # Migrations first, then servers: an evacuation that finished before the
    # migration listing has already moved its server (Nova updates the
    # server's host before the migration's status), so a server still listed
    # on the host with an in-flight migration is waited for.
    migrations = by_server(ctx.compute.list_evacuations(host))
    servers = ctx.compute.list_servers(host)
    outcome = Outcome(total=len(servers))
    run = Run(ctx, record, outcome, migrations)
    # Where it stands, for status (Engine.running_work), while it runs.
    ctx.runs[record.id] = run
    try:
        _plan(ctx, record, run, servers, migrations)
    except BaseException:
        run.close()
        raise
    return run


def _plan(ctx: Context, record: HostRecord, run: Run, servers: List[Server],
          migrations: Mapping[str, Sequence[Migration]]) -> None:
    host = record.name
    outcome = run.outcome
    listed = {s.id for s in servers}
    run.close_finished(listed, migrations)
    outcome.earlier = sum(1 for sid, status in run.last_status.items()
                          if status == "done" and sid not in listed)
    now = ctx.clock()
    mv = power.parse_microversion(ctx.conf.evacuation.microversion)
    candidates: List[Server] = []
    for s in servers:
        plan = run.plans[s.id] = power.plan(s.vm_state, s.power_state, mv,
                                            s.status)
        migs = migrations.get(s.id, [])
        if (s.task_state or "") in REBUILD_TASK_STATES \
                or any(m.status in IN_FLIGHT for m in migs):
            evac_send.resume(run, s, now)
        elif plan.evacuate:
            candidates.append(s)
        else:
            outcome.skipped[s.id] = plan.reason
    if outcome.skipped:
        LOG.warning("servers_not_evacuable", host=host,
                    count=len(outcome.skipped), servers=dict(outcome.skipped),
                    reason="Nova evacuates only active, stopped or error "
                           "servers")
    candidates = _on_fenced_storage(record, candidates, outcome)
    # The recovery policies: which of them, in what order (priority);
    # service-owned servers stay.
    chosen = selection.select(ctx, host, candidates, now)
    outcome.skipped.update(chosen.skipped)
    run.record_skips()
    # Restart groups: of every server listed (one resumed in flight holds
    # the higher groups of its project too).
    run.groups = evac_groups.read(ctx, host, servers)
    # The capacity preflight: servers no destination has room for wait
    # (the host goes pending) instead of being sent into NoValidHost;
    # the higher restart groups of their projects wait with them.
    send, held, run.targets = placement.place(ctx, record,
                                     {s.id: s for s in candidates},
                                     chosen.ordered, outcome)
    send, behind = evac_groups.behind_capacity(run.groups, send, held)
    outcome.no_capacity.update(behind)
    held.update(behind)
    for sid in send:
        run.todo.append(evac_send.unsettled(run, sid, now)
                        or (sid, now, None))
    run.keys = chosen.keys
    run.proved_at = ctx.clock()
    run.record_waiting(held)
    run.last_poll = ctx.clock()
    evac_groups.publish(run)
    if run.inflight:
        LOG.info("evacuations_resumed", host=host, count=len(run.inflight))


def _on_fenced_storage(record: HostRecord, candidates: List[Server],
                       outcome: Outcome) -> List[Server]:
    """The candidates that may go: all of them, unless the host was fenced
    by storage only (it may still run); then only the servers whose every
    disk is on the fenced storage, the others left with the reason."""
    if record.proven_by != "storage":
        return candidates
    kept: List[Server] = []
    left: Dict[str, str] = {}
    for s in candidates:
        why = storage_fence.why_not_evacuated(s.raw or {},
                                              record.storage_protects)
        if why is None:
            kept.append(s)
        else:
            left[s.id] = why
    if left:
        outcome.skipped.update(left)
        LOG.warning("servers_left_on_storage_fenced_host", host=record.name,
                    count=len(left), servers=left,
                    protects=list(record.storage_protects),
                    reason="the host was fenced by storage only (level %s) "
                           "and may still run: only servers whose disks "
                           "are all on the fenced storage are evacuated"
                    % record.fenced_level)
    return kept


def _step(ctx: Context, record: HostRecord, run: Run
          ) -> Union[Outcome, Requeue]:
    """Judge what is in flight (when the previous pass waited on it), then
    send what may go; an Outcome when all is settled, else a Requeue."""
    conf = ctx.conf.evacuation
    # One read of Nova's services per pass, shared by judging and sending.
    run.services_fresh = False
    if run.judging:
        _judge_all(ctx, run)
    if run.todo or run.inflight:
        _send_ready(ctx, record, run)
    evac_groups.publish(run)
    if not run.inflight:
        run.judging = False
        if not run.todo:
            run.close()
            return run.outcome
        # Retries waiting for their back-off, servers the gate holds for
        # other hosts' evacuations, or servers waiting for a lower
        # restart group on another host (looked at every poll_interval).
        wake = min([t[1] for t in run.todo if t[0] not in run.group_waits]
                   or [ctx.clock() + conf.poll_interval])
        if run.held:
            wake = max(wake, ctx.clock() + conf.poll_interval)
        after = max(0.0, min(wake - ctx.clock(), conf.poll_interval))
    else:
        run.judging = True
        after = conf.poll_interval
    # News of a server in flight may settle it; with servers still to
    # send (held by the admission gate for other hosts' evacuations, or
    # waiting for a restart group elsewhere), news of any server may
    # free their turn.
    return Requeue(after, run, waits_for=None if run.todo
                   else frozenset(run.inflight))


def _send_ready(ctx: Context, record: HostRecord, run: Run) -> None:
    """Send the servers the gate admits now (nothing once the host is no
    longer evacuating, reported back, or is not proven dead any more)."""
    conf = ctx.conf.evacuation
    host = run.host
    outcome = run.outcome
    if run.todo and record.state is not run.record.state:
        # An operator suspended the host: send nothing more; what Nova
        # already has finishes and is judged (and journalled).
        outcome.stopped = len(run.todo)
        LOG.warning("evacuation_stopped", host=host, left=len(run.todo),
                    in_flight=len(run.inflight), state=record.state.value,
                    reason="operator suspended the host: no more "
                           "servers sent, those in flight finish")
        evac_send.drop_todo(run, "not evacuated: suspended by operator")
    now = ctx.clock()
    ready: List[Tuple[str, float, Optional[Attempt]]] = [
        t for t in run.todo if t[1] <= now]
    if run.todo and not run.services_fresh:
        run.services = ctx.shared_services()
        run.services_fresh = True
    # Its own row from the services this pass read (no extra request).
    if run.todo and evac_judge.host_returned(run.record, next(
            (s for s in run.services if s.id == run.record.id), None)):
        # A host that reports in again (a kdump reboot, someone powering
        # it on) may be running the servers not yet sent: stop here.
        outcome.returned = True
        evac_send.drop_todo(run, "not evacuated: the host reported back")
        ready = []
    if ready and (run.proved_at is None
                  or now - run.proved_at > conf.proof_max_age):
        # A long wait (capacity, unanswered requests, the gate) since
        # the host was proven dead (or no proof of this run's time):
        # proven again before more is sent.
        ok, why = proof.reprove(ctx, run.record)
        if ok:
            run.proved_at = ctx.clock()
        else:
            outcome.unproven = why
            LOG.warning("evacuation_stopped", host=host,
                        left=len(run.todo), in_flight=len(run.inflight),
                        reason="not proven dead any more: " + why)
            evac_send.drop_todo(run, "not evacuated: the host is not "
                                "proven dead now: " + why)
            ready = []
    # Restart groups: a server whose project has a lower group not
    # settled yet stays in the to-do (engine.evac_groups).
    ready = evac_groups.hold(ctx, run, ready)
    busy = sum(1 for a in run.inflight.values() if not a.waiting)
    # The per-host limit, the cap across hosts and the priority order
    # over every host being evacuated (engine.admission). Asked at
    # every pass, even with nothing ready, so that the slots of
    # evacuations finished since are given back at once.
    send, run.held = ctx.gate.request(host, [
        admission.Item(sid, host, run.priority(sid), run.key(sid))
        for sid, _, _ in ready], busy)
    if ready:
        if run.held and len(run.held) != run.held_logged:
            LOG.info("evacuations_held", host=host, count=len(run.held),
                     reason=next(iter(run.held.values())))
        run.held_logged = len(run.held)
        if any(sid in outcome.retried for sid in send):
            run.migs = by_server(ctx.compute.list_evacuations(host))
        by_id = {t[0]: t for t in ready}
        for sid in send:
            item = by_id[sid]
            run.todo.remove(item)
            evac_send.send(run, sid, now, item[2])


def _judge_all(ctx: Context, run: Run) -> None:
    """Notifications first: a server Nova reports active on another host
    is rebuilt. Nova's migration list is read every poll_interval without
    events (or while a destination is in doubt), and only every
    event_fallback_interval while the notification stream is healthy
    (the safety net for lost events)."""
    conf = ctx.conf.evacuation
    now = ctx.clock()
    rebuilt = evac_judge.rebuilt_by_event(ctx, run.host, run.inflight)
    for sid, dest in rebuilt.items():
        run.done(run.inflight[sid], dest, "seen in notifications")
    if not run.inflight:
        return
    doubtful = any(a.waiting or now - a.started >= conf.stall_timeout
                   for a in run.inflight.values())
    if (ctx.events_healthy() and not doubtful
            and now - run.last_poll < conf.event_fallback_interval):
        return
    run.last_poll = now
    run.migs = by_server(ctx.compute.list_evacuations(run.host))
    run.services = ctx.shared_services()
    run.services_fresh = True
    for attempt in list(run.inflight.values()):
        evac_judge.judge(run, attempt, now)
