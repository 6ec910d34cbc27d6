"""Judging an evacuation's attempts in flight: from Nova's migrations and
services (a rebuild done, failed, stalled on a dead destination, timed
out) and from notifications (a server active on another host); and
whether the host itself has reported back since it was fenced (the state
machine's returned floor, on Nova's clock).

Each attempt is judged by the migrations of its server that changed since
it was sent: Nova's conductor works on the server's *oldest* ``accepted``
migration, so after a stuck evacuation the migration that moves is not the
newest one.
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple,
                    Union)

import structlog

from instanceha.drivers.compute import base
from instanceha.engine import evac_send, failures
from instanceha.engine.evac_state import (FAILED, IN_FLIGHT,
                                          REBUILD_TASK_STATES, SUCCEEDED,
                                          Attempt)
from instanceha.fsm import machine as fsm_machine
from instanceha.fsm.record import HostRecord

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.evac_run import Run

LOG = structlog.get_logger("instanceha.evacuator")


def judge(run: Run, attempt: Attempt, now: float) -> None:
    """Decide one in-flight attempt from Nova's migrations (read into
    ``run.migs``) and services."""
    sid = attempt.server_id
    changed = [m for m in run.migs.get(sid, [])
               if attempt.before.get(m.id) != m.status]
    ok = [m for m in changed if m.status in SUCCEEDED]
    if ok:
        run.done(attempt, ok[-1].dest_host)
        return
    bad = [m for m in changed if m.status in FAILED]
    if bad:
        if _failed(run, attempt, bad):
            return
    dest = next((m.dest_host for m in changed
                 if m.status in IN_FLIGHT and m.dest_host), None)
    via = "migration"
    if dest is None:
        dest = failures.destination_from_notification(
            run.ctx.board.facts(sid), attempt.started)
        via = "notification"
    age = now - attempt.started
    events = None
    if dest is None and age >= run.conf.stall_timeout:
        try:
            events = run.ctx.compute.rebuild_events(sid)
        except base.ComputeError as e:
            LOG.warning("rebuild_events_unavailable", server=sid,
                        reason=str(e))
    verdict, waiting = failures.in_flight(
        run.host, dest, via, evac_send.services_by_host(run),
        attempt.unschedulable, events, age, run.conf.stall_timeout)
    if waiting != attempt.waiting and waiting:
        LOG.warning("evacuation_stalled", host=run.host, server=sid,
                    reason=waiting)
    attempt.waiting = waiting
    if verdict is not None:
        evac_send.settle(run, attempt, verdict)
    elif age > run.conf.server_timeout:
        status = ", ".join(sorted({m.status for m in changed})) or "none"
        reason = "migration still %s after %.0fs" % (
            status, run.conf.server_timeout)
        if waiting:
            reason += " (%s)" % waiting
        run.inflight.pop(sid, None)
        run.outcome.failed[sid] = reason
        run.finish(attempt, "timeout", detail=reason)

def _failed(run: Run, attempt: Attempt, bad: Sequence[base.Migration]
            ) -> bool:
    """A migration of this server failed since the request. Believed
    only if the server is not rebuilding any more: a returning host can
    fail an old migration while a newer request still runs."""
    sid = attempt.server_id
    try:
        server = run.ctx.compute.get_server(sid)
    except base.NotFound:
        evac_send.settle(run, attempt,
                         failures.Verdict("gone", "server deleted"))
        return True
    except base.ComputeError:
        return False
    if (server.task_state or "") in REBUILD_TASK_STATES:
        for m in bad:
            attempt.before[m.id] = m.status
        return False
    if server.host not in (None, run.host) and \
            (server.vm_state or "") in ("active", "stopped"):
        run.done(attempt, server.host, "rebuilt; an older migration "
                                        "failed")
        return True
    dest = next((m.dest_host for m in bad if m.dest_host), None)
    svc = (None if dest is None
           else evac_send.services_by_host(run).get(dest))
    fault = server.fault or "migration %s, server %s" % (
        bad[-1].status, server.status)
    evac_send.settle(run, attempt, failures.rebuild_failed(fault, dest, svc))
    return True


def host_returned(record: HostRecord,
                  svc: Optional[base.ComputeService]) -> bool:
    """The compute service reported after it was fenced and isolated, as
    the state machine judges a heartbeat (fsm.guards.reported_after, on
    Nova's clock), applied to its row (``svc``: ComputeService or None)
    just read."""
    if fsm_machine.returned_floor(record) == float("-inf"):
        return False            # never fenced: nothing to come back from
    if svc is None or svc.id != record.id:
        return False
    return bool(svc.updated_at
                and fsm_machine.reported_after(record, svc.updated_at))


def rebuilt_by_event(ctx: Context, host: str,
                     inflight: Mapping[str, Union[Attempt,
                                                  Tuple[float, ...]]]
                     ) -> Dict[str, str]:
    """{server_id: dest} for in-flight servers that notifications show
    rebuilt: on another host, active or stopped, no task in progress, and
    recorded after the evacuation was requested (``inflight``: server id
    -> its Attempt, or a tuple starting with the request time)."""
    done: Dict[str, str] = {}
    for sid, attempt in inflight.items():
        started = attempt.started if isinstance(attempt, Attempt) \
            else attempt[0]
        # As a notification said them (failures.destination_from_
        # notification reads them the same way).
        f: Mapping[str, Any] = ctx.board.facts(sid)
        if (f.get("host") and f["host"] != host
                and f.get("state") in ("active", "stopped")
                and f.get("task_state") is None
                and f.get("at", 0) >= started):
            done[sid] = f["host"]
    return done
