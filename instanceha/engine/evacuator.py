"""Evacuate every evacuable server of one fenced host, K at a time.

Called by the EVACUATE action. Idempotent: a server already rebuilt
elsewhere is not on the host any more; one whose evacuation is still in
flight (found through its migration) is waited for, not evacuated again.
Completion is the migration reaching ``done`` (Nova has rebuilt the server
on its destination), not the server's task state, which can read ACTIVE on
the old host right after the request.
"""

import collections

import structlog

from instanceha.drivers.compute import base
from instanceha.fsm import machine as fsm_machine

LOG = structlog.get_logger("instanceha.evacuator")

#: vm_states Nova accepts for evacuate (check_instance_state in nova's API).
EVACUABLE_VM_STATES = {"active", "stopped", "error"}
IN_FLIGHT = {"accepted", "pre-migrating", "migrating", "queued", "preparing",
             "running", "post-migrating"}
SUCCEEDED = {"done", "completed"}
FAILED = {"error", "failed", "cancelled"}
NO_CAPACITY_MARKERS = ("no valid host",)
SEND_ATTEMPTS = 3       # evacuate requests per server that fail with an error


class Outcome:
    def __init__(self, total):
        self.total = total
        self.done = {}          # server_id -> dest host
        self.failed = {}        # server_id -> reason
        self.no_capacity = {}   # server_id -> reason
        self.skipped = {}       # server_id -> why not evacuable
        self.returned = False   # stopped: the host reported back
        self.stopped = 0        # servers not sent: an operator suspended


def _latest(migrations):
    latest = {}
    for m in migrations:
        cur = latest.get(m.server_id)
        if cur is None or (m.created_at or 0) >= (cur.created_at or 0):
            latest[m.server_id] = m
    return latest


def evacuate_host(ctx, record):
    """Returns an :class:`Outcome`. Raises ComputeError on API trouble that a
    retry may cure (the engine backs off and calls again)."""
    conf = ctx.conf.evacuation
    host = record.name
    # Migrations first, then servers: an evacuation that finished before the
    # migration listing has already moved its server (Nova updates the
    # server's host before the migration's status), so a server still listed
    # on the host with an in-flight migration is waited for, and one whose
    # latest evacuation is older and finished is evacuated again.
    latest = _latest(ctx.compute.list_evacuations(host))
    servers = ctx.compute.list_servers(host)
    outcome = Outcome(total=len(servers))
    todo, inflight = collections.deque(), {}
    for s in servers:
        m = latest.get(s.id)
        if m is not None and m.status in IN_FLIGHT:
            inflight[s.id] = (ctx.clock(), None)      # resumed, not re-sent
        elif (s.vm_state or "").lower() in EVACUABLE_VM_STATES:
            todo.append(s)
        else:
            outcome.skipped[s.id] = "vm_state %s is not evacuable" % s.vm_state
    if outcome.skipped:
        LOG.warning("servers_not_evacuable", host=host,
                    count=len(outcome.skipped),
                    reason="Nova evacuates only active, stopped or error "
                           "servers")
    last_poll = ctx.clock()
    send_errors = collections.Counter()
    sent = 0
    while todo or inflight:
        ctx.running[record.id] = (
            "%d of %d servers sent, %d in flight, %d done"
            % (sent, outcome.total, len(inflight), len(outcome.done)))
        if todo and ctx.preempted(record.id):
            # An operator suspended the host: send nothing more; what Nova
            # already has finishes and is waited for (and journalled).
            outcome.stopped = len(todo)
            LOG.warning("evacuation_stopped", host=host, left=len(todo),
                        in_flight=len(inflight),
                        reason="operator suspended the host: no more "
                               "servers sent, those in flight finish")
            for s in todo:
                outcome.failed[s.id] = "not evacuated: suspended by operator"
            todo.clear()
        if todo and _host_returned(ctx, record):
            # A host that reports in again (a kdump reboot, someone powering
            # it on) may be running the servers not yet sent: stop here.
            outcome.returned = True
            for s in todo:
                outcome.failed[s.id] = "not evacuated: the host reported back"
            todo.clear()
        while todo and len(inflight) < conf.concurrency:
            s = todo.popleft()
            now = ctx.clock()
            evac_id = ctx.journal.evacuation_requested(record.id, host, s.id,
                                                       now)
            try:
                ctx.compute.evacuate(s.id)
            except base.NotFound:
                ctx.journal.evacuation_finished(evac_id, now, "gone")
                outcome.skipped[s.id] = "server deleted"
                continue
            except base.Conflict as e:
                ctx.journal.evacuation_finished(evac_id, now, "refused",
                                                detail=str(e))
                outcome.failed[s.id] = str(e)
                LOG.error("evacuation_refused", host=host, server=s.id,
                          reason=str(e))
                continue
            except base.ComputeError as e:
                # Trouble with this one request: try it again after the
                # others, a few times, without holding them up.
                ctx.journal.evacuation_finished(evac_id, now, "error",
                                                detail=str(e))
                send_errors[s.id] += 1
                if send_errors[s.id] < SEND_ATTEMPTS:
                    todo.append(s)
                else:
                    outcome.failed[s.id] = str(e)
                LOG.warning("evacuation_request_failed", host=host,
                            server=s.id, attempt=send_errors[s.id],
                            reason=str(e))
                continue
            inflight[s.id] = (now, evac_id)
            sent += 1
        if not inflight:
            break
        gen = ctx.board.generation()
        ctx.board.wait(gen, conf.poll_interval)
        now = ctx.clock()
        # Notifications first: a server Nova reports active on another host
        # is rebuilt. Nova's migration list is read every poll_interval
        # without events, and only every event_fallback_interval while the
        # notification stream is healthy (the safety net for lost events).
        by_event = _rebuilt_by_event(ctx, host, inflight)
        for sid, dest in by_event.items():
            outcome.done[sid] = dest
            _finish(ctx, inflight.pop(sid)[1], now, "done", dest,
                    "seen in notifications")
            ctx.progress(record, len(outcome.done), outcome.total)
        if not inflight or (ctx.events_healthy() and now - last_poll
                            < conf.event_fallback_interval):
            continue
        last_poll = now
        latest = _latest(ctx.compute.list_evacuations(host))
        for sid, (started, evac_id) in list(inflight.items()):
            m = latest.get(sid)
            status = m.status if m else None
            if status in SUCCEEDED:
                outcome.done[sid] = m.dest_host
                _finish(ctx, evac_id, now, "done", m.dest_host)
            elif status in FAILED:
                reason = _failure_reason(ctx, sid, status)
                if any(k in reason.lower() for k in NO_CAPACITY_MARKERS):
                    outcome.no_capacity[sid] = reason
                    _finish(ctx, evac_id, now, "no_capacity", None, reason)
                else:
                    outcome.failed[sid] = reason
                    _finish(ctx, evac_id, now, "failed", None, reason)
            elif now - started > conf.server_timeout:
                reason = ("migration still %s after %.0fs"
                          % (status, conf.server_timeout))
                outcome.failed[sid] = reason
                _finish(ctx, evac_id, now, "timeout", None, reason)
            else:
                continue
            del inflight[sid]
            ctx.progress(record, len(outcome.done), outcome.total)
    return outcome


def _host_returned(ctx, record):
    """The compute service reported after it was fenced and isolated (on
    Nova's clock: compared with the updated_at of our own write)."""
    floor = fsm_machine.returned_floor(record)
    if floor == float("-inf"):
        return False
    svc = next((s for s in ctx.compute.list_services()
                if s.id == record.id), None)
    return bool(svc and svc.updated_at and svc.updated_at > floor)


def _rebuilt_by_event(ctx, host, inflight):
    """{server_id: dest} for in-flight servers that notifications show
    rebuilt: on another host, active or stopped, no task in progress, and
    recorded after the evacuation was requested."""
    done = {}
    for sid, (started, _) in inflight.items():
        f = ctx.board.facts(sid)
        if (f.get("host") and f["host"] != host
                and f.get("state") in ("active", "stopped")
                and f.get("task_state") is None
                and f.get("at", 0) >= started):
            done[sid] = f["host"]
    return done


def _finish(ctx, evac_id, at, status, dest, detail=""):
    if evac_id is not None:
        ctx.journal.evacuation_finished(evac_id, at, status, dest, detail)


def _failure_reason(ctx, server_id, status):
    try:
        server = ctx.compute.get_server(server_id)
    except base.ComputeError:
        return "migration %s" % status
    return server.fault or "migration %s, server %s" % (status, server.status)
