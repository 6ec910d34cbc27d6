"""Evacuate every evacuable server of one fenced host, K at a time.

Called by the EVACUATE action. Idempotent: a server already rebuilt
elsewhere is not on the host any more; one whose evacuation is still in
flight (task state rebuilding, or an unfinished migration) is waited for,
not evacuated again. Completion is a migration of the server reaching
``done`` (Nova has rebuilt it on its destination), not the server's task
state, which can read ACTIVE on the old host right after the request.

Each request is judged by the migrations of its server that changed since
it was sent: Nova's conductor works on the server's *oldest* ``accepted``
migration, so after a stuck evacuation the migration that moves is not the
newest one.

A failure is classified (:mod:`instanceha.engine.failures`). A server
whose destination died during the rebuild is sent again, with back-off and
at most ``[evacuation] server_retries`` times, but only once Nova cannot
still be rebuilding it: the destination is forced down (instanceha fences
that host through its own state machine). Nova 34 would accept a second
evacuation of a server still rebuilding; this rule is what keeps a server
from running on two hosts.
"""

import collections
import dataclasses
from typing import Dict, Optional

import structlog

from instanceha import failpoints
from instanceha.drivers.compute import base
from instanceha.engine import admission, failures, proof, reserve, selection
from instanceha.fsm import machine as fsm_machine
from instanceha.policy import capacity, power, reserved
from instanceha.util import backoff

LOG = structlog.get_logger("instanceha.evacuator")

#: vm_states Nova accepts for evacuate (check_instance_state in nova's API).
EVACUABLE_VM_STATES = power.EVACUABLE_VM_STATES
REBUILD_TASK_STATES = {"rebuilding", "rebuild_block_device_mapping",
                       "rebuild_spawning"}
IN_FLIGHT = {"accepted", "pre-migrating", "migrating", "queued", "preparing",
             "running", "post-migrating"}
SUCCEEDED = {"done", "completed"}
FAILED = {"error", "failed", "cancelled"}


class Outcome:
    def __init__(self, total):
        self.total = total
        self.done = {}          # server_id -> dest host
        self.failed = {}        # server_id -> reason
        self.no_capacity = {}   # server_id -> reason
        self.skipped = {}       # server_id -> why not evacuable
        self.retried = {}       # server_id -> times sent again
        self.returned = False   # stopped: the host reported back
        self.stopped = 0        # servers not sent: an operator suspended
        #: the capacity preflight's line when it held servers back
        self.capacity = ""
        #: reserved hosts brought in for the host, as a line (or "")
        self.reserved = ""
        #: servers an earlier attempt of this recovery (or an earlier
        #: process) already rebuilt elsewhere: no longer listed on the host
        self.earlier = 0
        #: why the host was not proven dead when servers were to be sent
        #: (nothing more was sent), else None
        self.unproven = None


@dataclasses.dataclass
class _Attempt:
    """One evacuate request of one server, until Nova settles it."""
    server_id: str
    started: float                      # local clock, when it was sent
    evac_id: Optional[int]              # its journal row
    before: Dict[str, str]              # migration id -> status when sent
    candidates: frozenset = frozenset()  # hosts schedulable when sent
    waiting: Optional[str] = None       # why it is waited for, if unusual
    #: its request got no answer (or its process stopped while it was
    #: being sent): the journal row stays open ('requested') until Nova is
    #: seen to have taken it, or not after unanswered_request_wait
    unanswered: bool = False
    #: journalled by a previous process, which stopped while sending it
    inherited: bool = False


def _by_server(migrations):
    out = collections.defaultdict(list)
    for m in migrations:
        out[m.server_id].append(m)
    return out


def _schedulable(services, source):
    return frozenset(s.host for s in services
                     if s.host != source and failures.alive(s)
                     and s.status == "enabled")


class _Run:
    """The evacuation of one host: servers waiting to be sent, attempts in
    flight, and the per-server retry budget (kept across restarts through
    the journal)."""

    def __init__(self, ctx, record, outcome, migrations):
        self.ctx = ctx
        self.migs = migrations              # server_id -> [Migration]
        self.conf = ctx.conf.evacuation
        self.record = record
        self.host = record.name
        self.outcome = outcome
        #: (server_id, not_before, a retry expecting it rebuilding)
        self.todo = collections.deque()
        self.inflight = {}                  # server_id -> _Attempt
        self.retries = collections.Counter()
        #: server_id -> evacuate requests Nova's API failed, in a row
        self.request_failures = collections.Counter()
        self.open_rows = {}                 # server_id -> (row id, at)
        self.sent = 0
        self.services = []
        #: server_id -> power.Plan, from the listing (its power state)
        self.plans = {}
        self.skips_recorded = set()
        #: server id -> the status of its last journal row in this
        #: recovery ("done": rebuilt by an earlier attempt or process)
        self.last_status = {}
        #: server id -> order.sort_key, from the recovery policies
        self.keys = {}
        #: server id -> the reserved host its evacuation is aimed at
        self.targets = {}
        self.held_logged = 0
        #: {server id: why the gate holds it} at the last pass
        self.held = {}
        #: when the host was last proven dead (proof.reprove)
        self.proved_at = None
        #: the next pass judges what is in flight (this one waited on it)
        self.judging = False
        #: when Nova's migrations were last read for the judging
        self.last_poll = ctx.clock()
        self._read_journal()

    def status_text(self):
        """Where the evacuation stands, in a few words (status)."""
        outcome = self.outcome
        waiting = sum(1 for a in self.inflight.values() if a.waiting)
        text = ("%d of %d servers sent, %d in flight, %d done"
                % (self.sent, outcome.total, len(self.inflight),
                   len(outcome.done)))
        if outcome.retried or waiting:
            text += ", %d retried, %d waiting on a dead destination" % (
                len(outcome.retried), waiting)
        if self.held:
            text += ", %d held (%s)" % (len(self.held),
                                        next(iter(self.held.values())))
        return text

    def close(self):
        """The run is over (or abandoned): it neither waits at the gate
        nor holds a slot there, nor shows in status."""
        self.ctx.gate.release(self.host)
        if self.ctx.runs.get(self.record.id) is self:
            del self.ctx.runs[self.record.id]

    # -- journal ------------------------------------------------------------
    def _read_journal(self):
        """Retries already spent in this recovery, and rows a previous
        process left open (its requests still in flight). This recovery's
        rows are those above the record's evac_floor (row ids: a stamp
        and fenced_at may come from two replicas' clocks)."""
        since = self.record.fenced_at
        floor = self.record.evac_floor
        seen = self.ctx.rows_seen
        now = self.ctx.clock()
        for row in self.ctx.journal.evacuations(self.record.id):
            if row["status"] != "requested":
                seen.pop(row["id"], None)
            if floor is not None:
                if row["id"] <= floor:
                    continue      # an earlier recovery's
            elif since is not None and row["requested_at"] < since:
                # A record journalled before evac_floor existed.
                continue
            sid = row["server_id"]
            if row["status"] == "skipped":
                self.skips_recorded.add(sid)
            if row["status"] == "retry":
                self.retries[sid] += 1
            if row["status"] == "requested":
                # Stamped on the clock of whoever wrote it (another
                # replica's may run behind ours): a row this process did
                # not write counts from when it first read it.
                at = max(row["requested_at"], seen.setdefault(row["id"], now))
                self.open_rows[sid] = (row["id"], at)
            else:
                self.open_rows.pop(sid, None)
            self.last_status[sid] = row["status"]

    def record_skips(self):
        """Each server left on the host, and why, once per recovery in the
        journal (evacuations, status ``skipped``)."""
        now = self.ctx.clock()
        for sid, why in sorted(self.outcome.skipped.items()):
            if sid in self.skips_recorded:
                continue
            row = self.ctx.journal.evacuation_requested(
                self.record.id, self.host, sid, now)
            self.ctx.journal.evacuation_finished(row, now, "skipped",
                                                 detail=why)
            self.skips_recorded.add(sid)

    def close_finished(self, listed, migrations):
        """Servers an earlier attempt (or process) of this recovery sent
        and did not see finish (it stopped, or its request was answered
        with an error Nova had applied anyway) that have left the host
        with a ``done`` migration (this recovery's: an older one would be
        ``completed``): journalled as done now."""
        now = self.ctx.clock()
        for sid, status in sorted(self.last_status.items()):
            if sid in listed or status in ("done", "skipped"):
                continue
            ok = [m for m in migrations.get(sid, ()) if m.status == "done"]
            if not ok:
                continue
            row = self.open_rows.pop(sid, (None, None))[0]
            if row is None:
                row = self.ctx.journal.evacuation_requested(
                    self.record.id, self.host, sid, now)
            self.ctx.journal.evacuation_finished(
                row, now, "done", ok[-1].dest_host, "rebuilt; seen by a "
                "later attempt of this recovery")
            self.last_status[sid] = "done"

    def record_waiting(self, held):
        """Each server the capacity preflight held back, and why: a
        journal row (status ``no_capacity``) per server and attempt."""
        now = self.ctx.clock()
        for sid, why in held.items():
            row = self.ctx.journal.evacuation_requested(
                self.record.id, self.host, sid, now)
            self.ctx.journal.evacuation_finished(row, now, "no_capacity",
                                                 detail="preflight: " + why)

    def finish(self, attempt, status, dest=None, detail=""):
        if attempt.evac_id is not None:
            self.ctx.rows_seen.pop(attempt.evac_id, None)
            self.ctx.journal.evacuation_finished(
                attempt.evac_id, self.ctx.clock(), status, dest, detail)

    def close_unanswered(self, attempt, what):
        """Close the row an unanswered request left open: who left it
        (this process, or one that stopped while sending it) and what
        became of it (``what``)."""
        if attempt.inherited:
            self.finish(attempt, "interrupted", detail="instanceha stopped "
                        "while sending this request; " + what)
        else:
            self.finish(attempt, "request_failed", detail="no answer; " + what)

    def key(self, sid):
        return self.keys.get(sid) or (0, True, 0.0, sid)

    def priority(self, sid):
        return -self.key(sid)[0]

    # -- sending --------------------------------------------------------------
    def resume(self, server, now):
        """A request a previous run (or process) left in Nova: wait for it.
        Its in-flight migrations count as its own; finished ones do not."""
        row, at = self.open_rows.pop(server.id, (None, now))
        before = {m.id: m.status for m in self.migs.get(server.id, [])
                  if m.status not in IN_FLIGHT}
        self.inflight[server.id] = _Attempt(server.id, min(at, now), row,
                                            before)

    def unsettled(self, sid, now):
        """A request of ``sid`` a previous process journalled and stopped
        before Nova answered (nothing of it in flight or done in Nova), less
        than ``unanswered_request_wait`` ago: it may still reach nova-api.
        Returns the to-do entry that checks the server and sends it again
        only after that wait, or None."""
        row = self.open_rows.get(sid)
        if row is None or row[1] + self.conf.unanswered_request_wait <= now:
            return None
        self.open_rows.pop(sid)
        at = row[1] + self.conf.unanswered_request_wait
        LOG.warning("evacuation_request_unsettled", host=self.host,
                    server=sid, wait=round(at - now, 1),
                    reason="a previous process journalled this request and "
                           "stopped before Nova answered: it may still "
                           "reach nova-api, so the server is checked and "
                           "sent again only after [evacuation] "
                           "unanswered_request_wait")
        return (sid, at, _Attempt(sid, row[1], row[0], {}, unanswered=True,
                                  inherited=True))

    def send(self, sid, now, check=None):
        """``check``: the failed attempt, for a retry after a failed
        request; Nova may have taken that request after all (a 5xx from a
        proxy, a timeout): a server found rebuilding is waited for, one
        found rebuilt on another host is done; neither is sent twice."""
        ctx = self.ctx
        if check is not None:
            try:
                server = ctx.compute.get_server(sid)
            except base.NotFound:
                if check.unanswered:
                    self.finish(check, "gone", detail="server deleted")
                self.outcome.skipped[sid] = "server deleted"
                return
            if (server.task_state or "") in REBUILD_TASK_STATES:
                LOG.warning("evacuation_request_taken", host=self.host,
                            server=sid, reason="the failed request was "
                            "taken by Nova after all: waiting for it")
                self._not_retried(sid)
                self.inflight[sid] = _Attempt(
                    sid, now, check.evac_id, {m.id: m.status for m in
                                              self.migs.get(sid, [])
                                              if m.status not in IN_FLIGHT},
                    _schedulable(self.services, self.host))
                return
            if server.host not in (None, self.host) and \
                    (server.vm_state or "") in ("active", "stopped"):
                why = ("the failed request was taken by Nova after all: "
                       "rebuilt on %s" % server.host)
                LOG.warning("evacuation_request_taken", host=self.host,
                            server=sid, dest=server.host, reason=why)
                self._not_retried(sid)
                self.done(check, server.host, why)
                return
            if check.unanswered:
                # Its row was left open for this check.
                self.close_unanswered(
                    check, "Nova had not taken it %.0fs later: sent again"
                    % (now - check.started))
        if check is not None and \
                self.request_failures[sid] > self.conf.server_retries:
            # The last of them went unanswered and has now been waited
            # for: not taken, so the budget is spent.
            self._give_up_requests(sid, "the last one got no answer and "
                                   "Nova did not take it")
        prior = self.open_rows.pop(sid, None)
        if prior is not None:
            # A previous process journalled a request of this server and
            # stopped; Nova shows none of it in flight and the server is
            # still here: that row is closed before the server is sent.
            ctx.journal.evacuation_finished(
                prior[0], now, "interrupted",
                detail="instanceha stopped before Nova showed this request "
                       "(no evacuation of the server in flight or done): "
                       "sent again")
        evac_id = ctx.journal.evacuation_requested(self.record.id, self.host,
                                                   sid, now)
        ctx.rows_seen[evac_id] = now
        attempt = _Attempt(sid, now, evac_id,
                           {m.id: m.status for m in self.migs.get(sid, [])},
                           _schedulable(self.services, self.host))
        target = self.targets.get(sid)
        failpoints.hit("before_evacuate_request")
        try:
            if target:
                # Nova's scheduler still validates the host (never forced).
                ctx.compute.evacuate(sid, host=target)
            else:
                ctx.compute.evacuate(sid)
        except base.ComputeError as e:
            verdict = failures.request_error(e)
            LOG.warning("evacuation_request_failed", host=self.host,
                        server=sid, outcome=verdict.status,
                        unanswered=e.unanswered, reason=verdict.reason)
            attempt.unanswered = e.unanswered
            self.settle(attempt, verdict, request_failed=True)
            return
        failpoints.hit("after_evacuate_request")
        self.inflight[sid] = attempt
        self.sent += 1

    def _request_failed(self, attempt, verdict):
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
            self.finish(attempt, "request_failed", detail=verdict.reason)
        self.request_failures[sid] += 1
        k = self.request_failures[sid]
        if k > self.conf.server_retries and not unanswered:
            self._give_up_requests(sid, verdict.reason)
        delay = backoff.exponential(self.conf.server_retry_delay, k,
                                    self.conf.retry_backoff_max)
        why = " (checked before it is sent again: Nova may have taken it)"
        if unanswered:
            delay = max(delay, self.conf.unanswered_request_wait)
            why = (" (no answer: the request may still reach Nova, so it "
                   "is checked and sent again only after [evacuation] "
                   "unanswered_request_wait)")
        self.outcome.retried[sid] = self.retries[sid] + k
        self.todo.append((sid, self.ctx.clock() + delay, attempt))
        LOG.warning("evacuation_retry", host=self.host, server=sid,
                    request_failures=k, delay=round(delay, 2),
                    reason=verdict.reason + why)

    def drop_todo(self, reason):
        """Send nothing more: every server still to send fails with
        ``reason``; the row of a request that got no answer is closed."""
        for sid, _, check in self.todo:
            self.outcome.failed[sid] = reason
            if check is not None and check.unanswered:
                self.close_unanswered(check, "not checked again: " + reason)
        self.todo.clear()

    def _give_up_requests(self, sid, reason):
        raise base.ComputeError(
            "the evacuate request of server %s failed %d times in a row: %s"
            % (sid, self.request_failures[sid], reason))

    def _not_retried(self, sid):
        """The request that seemed to fail was taken by Nova: it is not
        counted as sent again."""
        self.request_failures[sid] = 0
        if self.retries[sid] > 0:
            self.outcome.retried[sid] = self.retries[sid]
        else:
            self.outcome.retried.pop(sid, None)

    def settle(self, attempt, verdict, request_failed=False):
        """An attempt that will not finish: journal it; send the server
        again later if a retry may cure it and the budget allows."""
        sid = attempt.server_id
        self.inflight.pop(sid, None)
        if verdict.status == "gone":
            self.finish(attempt, "gone", detail=verdict.reason)
            self.outcome.skipped[sid] = verdict.reason
            return
        if verdict.status == "no_capacity":
            self.finish(attempt, "no_capacity", detail=verdict.reason)
            self.outcome.no_capacity[sid] = verdict.reason
            return
        if not verdict.retryable:
            self.finish(attempt, verdict.status, detail=verdict.reason)
            self.outcome.failed[sid] = verdict.reason
            LOG.error("evacuation_failed", host=self.host, server=sid,
                      outcome=verdict.status, reason=verdict.reason)
            return
        if request_failed:
            self._request_failed(attempt, verdict)
            return
        self.finish(attempt, "retry", detail=verdict.reason)
        # Sent again without a target: the scheduler picks a live host.
        self.targets.pop(sid, None)
        if verdict.suspects:
            # The given-up rebuild may wait in those hosts' queues and run
            # when they return: checked then (actions.check_cleanup).
            self.ctx.journal.stale_rebuild_suspected(
                sid, self.record.id, self.host, verdict.suspects,
                self.ctx.clock())
        self.retries[sid] += 1
        n = self.retries[sid]
        if n > self.conf.server_retries:
            reason = "gave up after %d failed attempts ([evacuation] " \
                "server_retries = %d): %s" % (n, self.conf.server_retries,
                                              verdict.reason)
            self.outcome.failed[sid] = reason
            LOG.error("evacuation_failed", host=self.host, server=sid,
                      outcome="retries_exhausted", reason=reason)
            return
        # A failed rebuild waits, doubling each time.
        delay = backoff.exponential(self.conf.server_retry_delay, n,
                                    self.conf.retry_backoff_max)
        self.outcome.retried[sid] = n + self.request_failures[sid]
        self.todo.append((sid, self.ctx.clock() + delay, None))
        LOG.warning("evacuation_retry", host=self.host, server=sid,
                    retry=n, of=self.conf.server_retries,
                    delay=round(delay, 2), reason=verdict.reason)

    # -- judging ----------------------------------------------------------------
    def done(self, attempt, dest, detail=""):
        self.inflight.pop(attempt.server_id, None)
        self.outcome.done[attempt.server_id] = dest
        self.finish(attempt, "done", dest, detail)
        self.ctx.progress(self.record, len(self.outcome.done),
                          self.outcome.total)
        _keep_powered_off(self.ctx, self.host, attempt.server_id,
                          self.plans.get(attempt.server_id))

    def judge(self, attempt, now):
        """Decide one in-flight attempt from Nova's migrations (read into
        ``self.migs``) and services."""
        sid = attempt.server_id
        changed = [m for m in self.migs.get(sid, [])
                   if attempt.before.get(m.id) != m.status]
        ok = [m for m in changed if m.status in SUCCEEDED]
        if ok:
            self.done(attempt, ok[-1].dest_host)
            return
        bad = [m for m in changed if m.status in FAILED]
        if bad:
            if self._failed(attempt, bad):
                return
        dest = next((m.dest_host for m in changed
                     if m.status in IN_FLIGHT and m.dest_host), None)
        via = "migration"
        if dest is None:
            dest = failures.destination_from_notification(
                self.ctx.board.facts(sid), attempt.started)
            via = "notification"
        age = now - attempt.started
        events = None
        if dest is None and age >= self.conf.stall_timeout:
            try:
                events = self.ctx.compute.rebuild_events(sid)
            except base.ComputeError as e:
                LOG.warning("rebuild_events_unavailable", server=sid,
                            reason=str(e))
        verdict, waiting = failures.in_flight(
            self.host, dest, via, {s.host: s for s in self.services},
            attempt.candidates, events, age, self.conf.stall_timeout)
        if waiting != attempt.waiting and waiting:
            LOG.warning("evacuation_stalled", host=self.host, server=sid,
                        reason=waiting)
        attempt.waiting = waiting
        if verdict is not None:
            self.settle(attempt, verdict)
        elif age > self.conf.server_timeout:
            status = ", ".join(sorted({m.status for m in changed})) or "none"
            reason = "migration still %s after %.0fs" % (
                status, self.conf.server_timeout)
            if waiting:
                reason += " (%s)" % waiting
            self.inflight.pop(sid, None)
            self.outcome.failed[sid] = reason
            self.finish(attempt, "timeout", detail=reason)

    def _failed(self, attempt, bad):
        """A migration of this server failed since the request. Believed
        only if the server is not rebuilding any more: a returning host can
        fail an old migration while a newer request still runs."""
        sid = attempt.server_id
        try:
            server = self.ctx.compute.get_server(sid)
        except base.NotFound:
            self.settle(attempt, failures.Verdict("gone", "server deleted"))
            return True
        except base.ComputeError:
            return False
        if (server.task_state or "") in REBUILD_TASK_STATES:
            for m in bad:
                attempt.before[m.id] = m.status
            return False
        if server.host not in (None, self.host) and \
                (server.vm_state or "") in ("active", "stopped"):
            self.done(attempt, server.host, "rebuilt; an older migration "
                                            "failed")
            return True
        dest = next((m.dest_host for m in bad if m.dest_host), None)
        svc = next((s for s in self.services if s.host == dest), None)
        fault = server.fault or "migration %s, server %s" % (
            bad[-1].status, server.status)
        self.settle(attempt, failures.rebuild_failed(fault, dest, svc))
        return True


def close_open_rows(ctx, record, why):
    """Close the evacuate request rows of this recovery still open
    ('requested': sent by a process that stopped before Nova answered)
    once nothing more will be sent for them (the host is put back: Nova
    refuses to evacuate from a service that is up). Returns how many."""
    run = _Run(ctx, record, Outcome(total=0), {})
    now = ctx.clock()
    for sid, (row, _) in sorted(run.open_rows.items()):
        ctx.journal.evacuation_finished(
            row, now, "interrupted",
            detail="instanceha stopped while sending this request; not "
                   "sent again: " + why)
        ctx.rows_seen.pop(row, None)
        LOG.info("evacuation_row_closed", host=record.name, server=sid,
                 reason=why)
    return len(run.open_rows)


class Requeue:
    """A pass that is not finished: the engine runs the next pass of the
    same action after ``after`` seconds (sooner when woken: a
    notification about a server), handing ``carry`` back."""

    __slots__ = ("after", "carry")

    def __init__(self, after, carry):
        self.after = after
        self.carry = carry

    def close(self):
        """The work is abandoned (the action raised, the engine stops)."""
        if self.carry is not None:
            self.carry.close()


def evacuate_pass(ctx, record, run=None):
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
        run = _start(ctx, record)
        if isinstance(run, Outcome):
            return run
    try:
        return _step(ctx, record, run)
    except BaseException:
        run.close()
        raise


def _start(ctx, record):
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
    migrations = _by_server(ctx.compute.list_evacuations(host))
    servers = ctx.compute.list_servers(host)
    outcome = Outcome(total=len(servers))
    run = _Run(ctx, record, outcome, migrations)
    # Where it stands, for status (Engine.running_work), while it runs.
    ctx.runs[record.id] = run
    try:
        _plan(ctx, record, run, servers, migrations)
    except BaseException:
        run.close()
        raise
    return run


def _plan(ctx, record, run, servers, migrations):
    host = record.name
    outcome = run.outcome
    listed = {s.id for s in servers}
    run.close_finished(listed, migrations)
    outcome.earlier = sum(1 for sid, status in run.last_status.items()
                          if status == "done" and sid not in listed)
    now = ctx.clock()
    mv = power.parse_microversion(ctx.conf.evacuation.microversion)
    candidates = []
    for s in servers:
        plan = run.plans[s.id] = power.plan(s.vm_state, s.power_state, mv,
                                            s.status)
        migs = migrations.get(s.id, [])
        if (s.task_state or "") in REBUILD_TASK_STATES \
                or any(m.status in IN_FLIGHT for m in migs):
            run.resume(s, now)
        elif plan.evacuate:
            candidates.append(s)
        else:
            outcome.skipped[s.id] = plan.reason
    if outcome.skipped:
        LOG.warning("servers_not_evacuable", host=host,
                    count=len(outcome.skipped), servers=dict(outcome.skipped),
                    reason="Nova evacuates only active, stopped or error "
                           "servers")
    # The recovery policies: which of them, in what order (priority).
    chosen = selection.select(ctx, host, candidates, now)
    outcome.skipped.update(chosen.skipped)
    run.record_skips()
    # The capacity preflight: servers no destination has room for wait
    # (the host goes pending) instead of being sent into NoValidHost.
    send, held, run.targets = _place(ctx, record,
                                     {s.id: s for s in candidates},
                                     chosen.ordered, outcome)
    for sid in send:
        run.todo.append(run.unsettled(sid, now) or (sid, now, None))
    run.keys = chosen.keys
    run.proved_at = ctx.clock()
    run.record_waiting(held)
    run.last_poll = ctx.clock()
    if run.inflight:
        LOG.info("evacuations_resumed", host=host, count=len(run.inflight))


def _step(ctx, record, run):
    """Judge what is in flight (when the previous pass waited on it), then
    send what may go; an Outcome when all is settled, else a Requeue."""
    conf = ctx.conf.evacuation
    if run.judging:
        _judge_all(ctx, run)
    if run.todo or run.inflight:
        _send_ready(ctx, record, run)
    if not run.inflight:
        run.judging = False
        if not run.todo:
            run.close()
            return run.outcome
        # Retries waiting for their back-off, or servers the gate holds
        # for other hosts' evacuations.
        wake = min(t[1] for t in run.todo)
        if run.held:
            wake = max(wake, ctx.clock() + conf.poll_interval)
        after = max(0.0, min(wake - ctx.clock(), conf.poll_interval))
    else:
        run.judging = True
        after = conf.poll_interval
    return Requeue(after, run)


def _send_ready(ctx, record, run):
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
        run.drop_todo("not evacuated: suspended by operator")
    now = ctx.clock()
    ready = [t for t in run.todo if t[1] <= now]
    if run.todo:
        run.services = ctx.compute.list_services()
    if run.todo and _host_returned(run.record, run.services):
        # A host that reports in again (a kdump reboot, someone powering
        # it on) may be running the servers not yet sent: stop here.
        outcome.returned = True
        run.drop_todo("not evacuated: the host reported back")
        ready = []
    if ready and now - run.proved_at > conf.proof_max_age:
        # A long wait (capacity, unanswered requests, the gate) since
        # the host was proven dead: proven again before more is sent.
        ok, why = proof.reprove(ctx, run.record)
        if ok:
            run.proved_at = ctx.clock()
        else:
            outcome.unproven = why
            LOG.warning("evacuation_stopped", host=host,
                        left=len(run.todo), in_flight=len(run.inflight),
                        reason="not proven dead any more: " + why)
            run.drop_todo("not evacuated: the host is not proven dead "
                          "now: " + why)
            ready = []
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
            run.migs = _by_server(ctx.compute.list_evacuations(host))
        by_id = {t[0]: t for t in ready}
        for sid in send:
            item = by_id[sid]
            run.todo.remove(item)
            run.send(sid, now, item[2])


def _judge_all(ctx, run):
    """Notifications first: a server Nova reports active on another host
    is rebuilt. Nova's migration list is read every poll_interval without
    events (or while a destination is in doubt), and only every
    event_fallback_interval while the notification stream is healthy
    (the safety net for lost events)."""
    conf = ctx.conf.evacuation
    now = ctx.clock()
    for sid, dest in _rebuilt_by_event(ctx, run.host, run.inflight).items():
        run.done(run.inflight[sid], dest, "seen in notifications")
    if not run.inflight:
        return
    doubtful = any(a.waiting or now - a.started >= conf.stall_timeout
                   for a in run.inflight.values())
    if (ctx.events_healthy() and not doubtful
            and now - run.last_poll < conf.event_fallback_interval):
        return
    run.last_poll = now
    run.migs = _by_server(ctx.compute.list_evacuations(run.host))
    run.services = ctx.compute.list_services()
    for attempt in list(run.inflight.values()):
        run.judge(attempt, now)


def _place(ctx, record, servers, ordered, outcome):
    """Where the servers may go, before any is sent: reserved hosts
    brought in (engine.reserve), then the capacity preflight
    (policy.capacity) on Placement's counts. Returns (server ids to send,
    in order; {id: why it waits}; {id: target host} when evacuations are
    aimed at reserved hosts). Counts that cannot be read hold nothing
    back: the scheduler alone decides (said in the log)."""
    host = record.name
    cs = capacity.Settings.from_conf(ctx.conf)
    rs = reserved.Settings.from_conf(ctx.conf)
    if not ordered or not (cs.enabled or rs.enabled):
        return list(ordered), {}, {}
    services = ctx.compute.list_services()
    try:
        capacities = ctx.compute.host_capacities()
    except (base.ComputeError, NotImplementedError) as e:
        capacities = None
        LOG.warning("capacity_unknown", host=host,
                    reason=str(e) or type(e).__name__,
                    effect="no capacity preflight: every server is sent and "
                           "Nova's scheduler decides")
    if capacities and capacity.VCPUS in cs.resources and any(
            c.source == "hypervisors" for c in capacities.values()):
        # os-hypervisors counts physical CPUs and knows no allocation
        # ratio: overcommitted hosts would look full. RAM and disk are
        # still checked (their ratios are 1.0 unless an operator chose
        # otherwise).
        cs = dataclasses.replace(cs, resources=tuple(
            r for r in cs.resources if r != capacity.VCPUS))
        LOG.warning("capacity_from_hypervisors", host=host,
                    reason="Placement cannot be read; os-hypervisors knows "
                           "no CPU allocation ratio", effect="vCPU not "
                           "checked by the capacity preflight")
    aggregates = ()
    if cs.scope == capacity.AGGREGATE or (
            rs.enabled and reserved.AGGREGATE in rs.match):
        aggregates = base.aggregates_or_none(
            ctx.compute, LOG, "the aggregate scope falls back to the lost "
            "host's zone", host=host) or ()
    needs = []
    for sid in ordered:
        need, problem = capacity.need_of(servers[sid].raw or {})
        if problem is not None:
            LOG.warning("server_size_unknown", host=host, server=sid,
                        reason=problem.message,
                        effect="sent without a capacity check")
        needs.append((sid, need))
    preflight = cs.enabled and capacities is not None
    pre = None
    if preflight:
        _, pre = capacity.check(host, needs, services, capacities,
                                aggregates, cs)
    targets = {}
    if rs.enabled:
        if rs.target:
            # Aimed at the reserved hosts: size them for every server.
            need = sum((n for _, n in needs if n is not None),
                       capacity.Need())
        else:
            need = pre.pending_need if pre is not None else None
        brought, text = reserve.bring_in(ctx, record, services, aggregates,
                                         capacities, need)
        outcome.reserved = text
        if brought:
            services = [dataclasses.replace(s, status="enabled",
                                            disabled_reason=None)
                        if s.host in brought else s for s in services]
            if preflight:
                _, pre = capacity.check(host, needs, services, capacities,
                                        aggregates, cs)
            if rs.target:
                targets = _aim(needs, brought, capacities, cs)
    if pre is None:
        return list(ordered), {}, targets
    if pre.pending:
        outcome.capacity = pre.text
        outcome.no_capacity.update(pre.pending)
        LOG.warning("capacity_preflight", host=host, send=len(pre.fits),
                    waiting=len(pre.pending), reason=pre.text)
    else:
        LOG.info("capacity_preflight", host=host, send=len(pre.fits),
                 reason=pre.text)
    return list(pre.fits), dict(pre.pending), targets


def _aim(needs, hosts, capacities, settings):
    """{server id: reserved host} for evacuations aimed at the reserved
    hosts: each server where the preflight's simulation on those hosts
    alone puts it (sizes unknown: in turn). A server with no room there
    gets no target (the scheduler picks)."""
    if capacities is None:
        return {sid: hosts[i % len(hosts)] for i, (sid, _) in
                enumerate(needs)}
    sim = capacity.preflight(
        needs, capacity.free_on(hosts, capacities, settings),
        dataclasses.replace(settings, enabled=True))
    aimed = dict(sim.placed)
    for i, sid in enumerate(sim.unknown):
        aimed[sid] = hosts[i % len(hosts)]
    return aimed


def _keep_powered_off(ctx, host, sid, plan):
    """A server that was powered off when its host was lost ends powered
    off (instanceha.policy.power): read once it has arrived, stopped if
    Nova started it. A failure is logged; the evacuation stands."""
    if plan is None or not plan.keep_off:
        return
    reason = None
    try:
        reason = power.stop_reason(plan, ctx.compute.get_server(sid), host)
        if reason:
            ctx.compute.stop_server(sid)
            LOG.warning("evacuated_server_stopped", host=host, server=sid,
                        reason=reason)
    except (base.ComputeError, NotImplementedError) as e:
        if isinstance(e, base.NotFound) and reason is None:
            return                      # deleted since it arrived
        LOG.error("evacuated_server_not_stopped", host=host, server=sid,
                  reason="it was powered off before its evacuation and may "
                         "be running now: %s" % (str(e) or type(e).__name__))


def _host_returned(record, services):
    """The compute service reported after it was fenced and isolated (on
    Nova's clock: compared with the updated_at of our own write)."""
    floor = fsm_machine.returned_floor(record)
    if floor == float("-inf"):
        return False
    svc = next((s for s in services if s.id == record.id), None)
    return bool(svc and svc.updated_at and svc.updated_at > floor)


def _rebuilt_by_event(ctx, host, inflight):
    """{server_id: dest} for in-flight servers that notifications show
    rebuilt: on another host, active or stopped, no task in progress, and
    recorded after the evacuation was requested (``inflight``: server id
    -> its _Attempt, or a tuple starting with the request time)."""
    done = {}
    for sid, attempt in inflight.items():
        started = attempt.started if isinstance(attempt, _Attempt) \
            else attempt[0]
        f = ctx.board.facts(sid)
        if (f.get("host") and f["host"] != host
                and f.get("state") in ("active", "stopped")
                and f.get("task_state") is None
                and f.get("at", 0) >= started):
            done[sid] = f["host"]
    return done
