"""Sending one host's servers: a request, its failure (Nova may have taken
it all the same), the per-server back-off and retry budget, and a
request a previous process left unanswered. Functions that take the
run (engine.evac_run.Run: the run's state and its journal rows) and act
on it; the run's judging is engine.evac_judge's.

A server whose destination died during the rebuild is sent again, with
back-off and at most ``[evacuation] server_retries`` times, but only once
Nova cannot still be rebuilding it: the destination is forced down
(instanceha fences that host through its own state machine). Nova 34
would accept a second evacuation of a server still rebuilding; this rule
is what keeps a server from running on two hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, NoReturn, \
    Optional, Tuple

import structlog

from instanceha import failpoints
from instanceha.drivers.compute import base
from instanceha.engine import failures
from instanceha.engine.evac_state import (IN_FLIGHT, REBUILD_TASK_STATES,
                                          Attempt)
from instanceha.util import backoff

if TYPE_CHECKING:
    from instanceha.engine.evac_run import Run, ServicesMemo

LOG = structlog.get_logger("instanceha.evacuator")


def unschedulable(services: Iterable[base.ComputeService]
                  ) -> FrozenSet[str]:
    """The hosts of ``services`` Nova would not schedule onto."""
    return frozenset(s.host for s in services
                     if not (failures.alive(s) and s.status == "enabled"))


def _services_read(run: Run) -> ServicesMemo:
    memo = run.services_memo
    if memo is None or memo[0] is not run.services:
        memo = (run.services, {s.host: s for s in run.services},
                unschedulable(run.services))
        run.services_memo = memo
    return memo


def services_by_host(run: Run) -> Dict[str, base.ComputeService]:
    """{host: ComputeService} of the services read last."""
    return _services_read(run)[1]


def _unschedulable(run: Run) -> FrozenSet[str]:
    return _services_read(run)[2]


def resume(run: Run, server: base.Server, now: float) -> None:
    """A request a previous run (or process) left in Nova: wait for it.
    Its in-flight migrations count as its own; finished ones do not."""
    row, at = run.open_rows.pop(server.id, (None, now))
    before = {m.id: m.status for m in run.migs.get(server.id, [])
              if m.status not in IN_FLIGHT}
    run.inflight[server.id] = Attempt(server.id, min(at, now), row,
                                      before)


def unsettled(run: Run, sid: str, now: float
              ) -> Optional[Tuple[str, float, Attempt]]:
    """A request of ``sid`` a previous process journalled and stopped
    before Nova answered (nothing of it in flight or done in Nova), less
    than ``unanswered_request_wait`` ago: it may still reach nova-api.
    Returns the to-do entry that checks the server and sends it again
    only after that wait, or None."""
    row = run.open_rows.get(sid)
    if row is None or row[1] + run.conf.unanswered_request_wait <= now:
        return None
    run.open_rows.pop(sid)
    at = row[1] + run.conf.unanswered_request_wait
    LOG.warning("evacuation_request_unsettled", host=run.host,
                server=sid, wait=round(at - now, 1),
                reason="a previous process journalled this request and "
                       "stopped before Nova answered: it may still "
                       "reach nova-api, so the server is checked and "
                       "sent again only after [evacuation] "
                       "unanswered_request_wait")
    return (sid, at, Attempt(sid, row[1], row[0], {}, unanswered=True,
                             inherited=True))


def _taken_after_all(run: Run, sid: str, now: float, check: Attempt
                     ) -> bool:
    """After a failed request (``check``): True when it needs no new one
    (the server is gone, or Nova took the request after all: rebuilding,
    waited for; rebuilt on another host, done)."""
    ctx = run.ctx
    try:
        server = ctx.compute.get_server(sid)
    except base.NotFound:
        if check.unanswered:
            run.finish(check, "gone", detail="server deleted")
        run.outcome.skipped[sid] = "server deleted"
        return True
    if (server.task_state or "") in REBUILD_TASK_STATES:
        LOG.warning("evacuation_request_taken", host=run.host,
                    server=sid, reason="the failed request was "
                    "taken by Nova after all: waiting for it")
        _not_retried(run, sid)
        run.inflight[sid] = Attempt(
            sid, now, check.evac_id, {m.id: m.status for m in
                                      run.migs.get(sid, [])
                                      if m.status not in IN_FLIGHT},
            _unschedulable(run))
        return True
    if server.host not in (None, run.host) and \
            (server.vm_state or "") in ("active", "stopped"):
        why = ("the failed request was taken by Nova after all: "
               "rebuilt on %s" % server.host)
        LOG.warning("evacuation_request_taken", host=run.host,
                    server=sid, dest=server.host, reason=why)
        _not_retried(run, sid)
        run.done(check, server.host, why)
        return True
    if check.unanswered:
        # Its row was left open for this check.
        run.close_unanswered(
            check, "Nova had not taken it %.0fs later: sent again"
            % (now - check.started))
    return False


def send(run: Run, sid: str, now: float, check: Optional[Attempt] = None
         ) -> None:
    """``check``: the failed attempt, for a retry after a failed
    request; Nova may have taken that request after all (a 5xx from a
    proxy, a timeout): a server found rebuilding is waited for, one
    found rebuilt on another host is done; neither is sent twice."""
    ctx = run.ctx
    if check is not None and _taken_after_all(run, sid, now, check):
        return
    if check is not None and \
            run.request_failures[sid] > run.conf.server_retries:
        # The last of them went unanswered and has now been waited
        # for: not taken, so the budget is spent.
        _give_up_requests(run, sid, "the last one got no answer and "
                          "Nova did not take it")
    prior = run.open_rows.pop(sid, None)
    if prior is not None:
        # A previous process journalled a request of this server and
        # stopped; Nova shows none of it in flight and the server is
        # still here: that row is closed before the server is sent.
        ctx.journal.evacuation_finished(
            prior[0], now, "interrupted",
            detail="instanceha stopped before Nova showed this request "
                   "(no evacuation of the server in flight or done): "
                   "sent again")
    evac_id = ctx.journal.evacuation_requested(run.record.id, run.host,
                                               sid, now)
    ctx.rows_seen[evac_id] = now
    attempt = Attempt(sid, now, evac_id,
                      {m.id: m.status for m in run.migs.get(sid, [])},
                      _unschedulable(run))
    target = run.targets.get(sid)
    failpoints.hit("before_evacuate_request")
    try:
        if target:
            # Nova's scheduler still validates the host (never forced).
            ctx.compute.evacuate(sid, host=target)
        else:
            ctx.compute.evacuate(sid)
    except base.ComputeError as e:
        verdict = failures.request_error(e)
        LOG.warning("evacuation_request_failed", host=run.host,
                    server=sid, outcome=verdict.status,
                    unanswered=e.unanswered, reason=verdict.reason)
        attempt.unanswered = e.unanswered
        settle(run, attempt, verdict, request_failed=True)
        return
    failpoints.hit("after_evacuate_request")
    run.inflight[sid] = attempt
    run.sent += 1


def _request_failed(run: Run, attempt: Attempt, verdict: failures.Verdict
                    ) -> None:
    """Nova's API failed the evacuate request (5xx, no answer). Nova
    may have taken it all the same, so the server is checked before
    it is sent again (the failed attempt rides along: its row says
    what became of it), after a back-off doubling from
    ``server_retry_delay``. Not a failed rebuild: the server's
    retries are not spent. More than ``server_retries`` in a row and
    the action raises: the engine backs off and runs it again
    (``[DEFAULT] action_retries``), resuming what Nova took.

    An unanswered request may still be on its way to Nova's API, so
    nothing is checked or sent before ``unanswered_request_wait`` (a
    check any sooner could find nothing, send again, and the first
    request land after it). Its row stays open meanwhile: a restart
    sees a request that may still land, and waits for it the same
    way."""
    sid = attempt.server_id
    unanswered = attempt.unanswered
    if not unanswered:
        run.finish(attempt, "request_failed", detail=verdict.reason)
    run.request_failures[sid] += 1
    k = run.request_failures[sid]
    if k > run.conf.server_retries and not unanswered:
        _give_up_requests(run, sid, verdict.reason)
    delay = backoff.exponential(run.conf.server_retry_delay, k,
                                run.conf.retry_backoff_max)
    why = " (checked before it is sent again: Nova may have taken it)"
    if unanswered:
        delay = max(delay, run.conf.unanswered_request_wait)
        why = (" (no answer: the request may still reach Nova, so it "
               "is checked and sent again only after [evacuation] "
               "unanswered_request_wait)")
    run.outcome.retried[sid] = run.retries[sid] + k
    run.todo.append((sid, run.ctx.clock() + delay, attempt))
    LOG.warning("evacuation_retry", host=run.host, server=sid,
                request_failures=k, delay=round(delay, 2),
                reason=verdict.reason + why)


def drop_todo(run: Run, reason: str) -> None:
    """Send nothing more: every server still to send fails with
    ``reason``; the row of a request that got no answer is closed."""
    for sid, _, check in run.todo:
        run.outcome.failed[sid] = reason
        if check is not None and check.unanswered:
            run.close_unanswered(check, "not checked again: " + reason)
    run.todo.clear()


def _give_up_requests(run: Run, sid: str, reason: str) -> NoReturn:
    raise base.ComputeError(
        "the evacuate request of server %s failed %d times in a row: %s"
        % (sid, run.request_failures[sid], reason))


def _not_retried(run: Run, sid: str) -> None:
    """The request that seemed to fail was taken by Nova: it is not
    counted as sent again."""
    run.request_failures[sid] = 0
    if run.retries[sid] > 0:
        run.outcome.retried[sid] = run.retries[sid]
    else:
        run.outcome.retried.pop(sid, None)


def settle(run: Run, attempt: Attempt, verdict: failures.Verdict,
           request_failed: bool = False) -> None:
    """An attempt that will not finish: journal it; send the server
    again later if a retry may cure it and the budget allows."""
    sid = attempt.server_id
    run.inflight.pop(sid, None)
    if verdict.status == "gone":
        run.finish(attempt, "gone", detail=verdict.reason)
        run.outcome.skipped[sid] = verdict.reason
        return
    if verdict.status == "no_capacity":
        run.finish(attempt, "no_capacity", detail=verdict.reason)
        run.outcome.no_capacity[sid] = verdict.reason
        return
    if not verdict.retryable:
        run.finish(attempt, verdict.status, detail=verdict.reason)
        run.outcome.failed[sid] = verdict.reason
        LOG.error("evacuation_failed", host=run.host, server=sid,
                  outcome=verdict.status, reason=verdict.reason)
        return
    if request_failed:
        _request_failed(run, attempt, verdict)
        return
    run.finish(attempt, "retry", detail=verdict.reason)
    # Sent again without a target: the scheduler picks a live host.
    run.targets.pop(sid, None)
    if verdict.suspects:
        # The given-up rebuild may wait in those hosts' queues and run
        # when they return: checked then (actions.check_cleanup).
        run.ctx.journal.stale_rebuild_suspected(
            sid, run.record.id, run.host, verdict.suspects,
            run.ctx.clock())
    run.retries[sid] += 1
    n = run.retries[sid]
    if n > run.conf.server_retries:
        reason = "gave up after %d failed attempts ([evacuation] " \
            "server_retries = %d): %s" % (n, run.conf.server_retries,
                                          verdict.reason)
        run.outcome.failed[sid] = reason
        LOG.error("evacuation_failed", host=run.host, server=sid,
                  outcome="retries_exhausted", reason=reason)
        return
    # A failed rebuild waits, doubling each time.
    delay = backoff.exponential(run.conf.server_retry_delay, n,
                                run.conf.retry_backoff_max)
    run.outcome.retried[sid] = n + run.request_failures[sid]
    run.todo.append((sid, run.ctx.clock() + delay, None))
    LOG.warning("evacuation_retry", host=run.host, server=sid,
                retry=n, of=run.conf.server_retries,
                delay=round(delay, 2), reason=verdict.reason)
