"""One host's evacuation run: the servers to send, the attempts in flight,
the per-server retry budget, and their journal rows (this recovery's rows
are those above the record's evac_floor; retries spent and requests left
open by a stopped process are read back from them).

Run by the EVACUATE action's passes (engine.evacuator); sending it is
engine.evac_send's job, judging engine.evac_judge's: both take the run.
Idempotent: a server already rebuilt elsewhere is not on the host any
more; one whose evacuation is still in flight (task state rebuilding, or
an unfinished migration) is waited for, not evacuated again. Completion is a migration
of the server reaching ``done`` (Nova has rebuilt it on its destination),
not the server's task state, which can read ACTIVE on the old host right
after the request.
"""

from __future__ import annotations

import collections
from typing import (TYPE_CHECKING, AbstractSet, Counter, Deque, Dict,
                    FrozenSet, Mapping, Optional, Sequence, Set, Tuple)

import structlog

from instanceha.drivers.compute import base
from instanceha.engine.evac_state import Attempt, Outcome
from instanceha.fsm.record import HostRecord
from instanceha.policy import instance_repair_groups as groups_policy
from instanceha.policy import order, power

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.evac_groups import Groups

#: the services read, {host: its service}, and their unschedulable hosts
#: (engine.evac_send)
ServicesMemo = Tuple[Sequence[base.ComputeService],
                     Dict[str, base.ComputeService], FrozenSet[str]]

LOG = structlog.get_logger("instanceha.evacuator")

class Run:
    """The evacuation of one host: servers waiting to be sent, attempts in
    flight, and the per-server retry budget (kept across restarts through
    the journal). The state the evacuator's passes, the sender
    (engine.evac_send) and the judge (engine.evac_judge) take."""

    def __init__(self, ctx: Context, record: HostRecord, outcome: Outcome,
                 migrations: Mapping[str, Sequence[base.Migration]]
                 ) -> None:
        self.ctx = ctx
        #: server_id -> [Migration]
        self.migs: Mapping[str, Sequence[base.Migration]] = migrations
        self.conf = ctx.conf.evacuation
        self.record = record
        self.host = record.name
        self.outcome = outcome
        #: (server id, not before, the failed attempt to check or None)
        self.todo: Deque[Tuple[str, float, Optional[Attempt]]] = \
            collections.deque()
        self.inflight: Dict[str, Attempt] = {}
        #: server id -> failed rebuilds sent again in this recovery
        self.retries: Counter[str] = collections.Counter()
        #: server_id -> evacuate requests Nova's API failed, in a row
        self.request_failures: Counter[str] = collections.Counter()
        #: server id -> (row id, at) of a request left open
        self.open_rows: Dict[str, Tuple[int, float]] = {}
        self.sent = 0
        self.services: Sequence[base.ComputeService] = []
        #: (the services read, {host: its service}, unschedulable() of
        #: them): made once per read by the sender and shared by every
        #: request sent and judged on it (per request, at 20,000 hosts,
        #: they cost a large cloud's worth of memory and CPU each)
        self.services_memo: Optional[ServicesMemo] = None
        #: server_id -> power.Plan, from the listing (its power state)
        self.plans: Dict[str, power.Plan] = {}
        self.skips_recorded: Set[str] = set()
        #: server id -> the status of its last journal row in this
        #: recovery ("done": rebuilt by an earlier attempt or process)
        self.last_status: Dict[str, str] = {}
        #: server id -> order.sort_key, from the recovery policies
        self.keys: Dict[str, order.SortKey] = {}
        #: server id -> the reserved host its evacuation is aimed at
        self.targets: Dict[str, str] = {}
        #: server id -> (project, restart group), of the servers with one
        self.groups: Groups = {}
        #: {server id: why it waits for a lower restart group}, ready
        #: servers held back at the last pass (engine.evac_groups)
        self.group_waits: Dict[str, str] = {}
        #: {server id: the group it was last said to wait for} (the log)
        self.group_said: Dict[str, int] = {}
        #: this run's unsettled grouped servers as the other hosts' runs
        #: see them, replaced at the end of each pass (evac_groups.publish)
        self.group_members: Tuple[groups_policy.Member, ...] = ()
        self.held_logged = 0
        #: {server id: why the gate holds it} at the last pass
        self.held: Dict[str, str] = {}
        #: when the host was last proven dead (proof.reprove); None until
        #: the first pass has proven it
        self.proved_at: Optional[float] = None
        #: the next pass judges what is in flight (this one waited on it)
        self.judging = False
        #: run.services was read during this pass
        self.services_fresh = False
        #: when Nova's migrations were last read for the judging
        self.last_poll = ctx.clock()
        self._read_journal()

    def status_text(self) -> str:
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
        if self.group_waits:
            text += ", %d waiting for a lower restart group (%s)" % (
                len(self.group_waits), next(iter(self.group_waits.values())))
        return text

    def close(self) -> None:
        """The run is over (or abandoned): it neither waits at the gate
        nor holds a slot there, nor shows in status."""
        self.ctx.gate.release(self.host)
        if self.ctx.runs.get(self.record.id) is self:
            del self.ctx.runs[self.record.id]

    # -- journal ------------------------------------------------------------
    def _read_journal(self) -> None:
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

    def record_skips(self) -> None:
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

    def close_finished(self, listed: AbstractSet[str],
                       migrations: Mapping[str, Sequence[base.Migration]]
                       ) -> None:
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

    def record_waiting(self, held: Mapping[str, str]) -> None:
        """Each server the capacity preflight held back, and why: a
        journal row (status ``no_capacity``) per server and attempt."""
        now = self.ctx.clock()
        for sid, why in held.items():
            row = self.ctx.journal.evacuation_requested(
                self.record.id, self.host, sid, now)
            self.ctx.journal.evacuation_finished(row, now, "no_capacity",
                                                 detail="preflight: " + why)

    def finish(self, attempt: Attempt, status: str,
               dest: Optional[str] = None, detail: str = "") -> None:
        if attempt.evac_id is not None:
            self.ctx.rows_seen.pop(attempt.evac_id, None)
            self.ctx.journal.evacuation_finished(
                attempt.evac_id, self.ctx.clock(), status, dest, detail)

    def close_unanswered(self, attempt: Attempt, what: str) -> None:
        """Close the row an unanswered request left open: who left it
        (this process, or one that stopped while sending it) and what
        became of it (``what``)."""
        if attempt.inherited:
            self.finish(attempt, "interrupted", detail="instanceha stopped "
                        "while sending this request; " + what)
        else:
            self.finish(attempt, "request_failed", detail="no answer; " + what)

    def key(self, sid: str) -> order.SortKey:
        return self.keys.get(sid) or (0, True, 0.0, sid)

    def priority(self, sid: str) -> int:
        return -self.key(sid)[0]

    # -- judging ----------------------------------------------------------------
    def done(self, attempt: Attempt, dest: Optional[str], detail: str = ""
             ) -> None:
        self.inflight.pop(attempt.server_id, None)
        self.outcome.done[attempt.server_id] = dest
        self.finish(attempt, "done", dest, detail)
        self.ctx.progress(self.record, len(self.outcome.done),
                          self.outcome.total)
        keep_powered_off(self.ctx, self.host, attempt.server_id,
                          self.plans.get(attempt.server_id))

def close_open_rows(ctx: Context, record: HostRecord, why: str) -> int:
    """Close the evacuate request rows of this recovery still open
    ('requested': sent by a process that stopped before Nova answered)
    once nothing more will be sent for them (the host is put back: Nova
    refuses to evacuate from a service that is up). Returns how many."""
    run = Run(ctx, record, Outcome(total=0), {})
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



def keep_powered_off(ctx: Context, host: str, sid: str,
                     plan: Optional[power.Plan]) -> None:
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
