"""The engine's host records: looking them up, resuming them from the
journal (or adopting a host Nova shows instanceha isolated), and the
events the engine makes for them itself (a timer due, capacity appeared).
The engine's half that keeps who is known and in what state
(instanceha.engine.engine.Engine); its controller loop is the other."""

import dataclasses
import threading
from typing import Any, Callable, Dict

import structlog

from instanceha import fsm
from instanceha.engine import resume
from instanceha.engine.inbox import Inboxes, Pending
from instanceha.engine.workqueue import WorkQueue
from instanceha.events import Event, EventKind as E
from instanceha.fsm.states import ENTRY_ACTION, RUNNING_STATES, \
    URGENT_STATES, State

LOG = structlog.get_logger("instanceha.engine")


class Hosts:
    """The records half of the engine."""

    # What this half uses of the engine, declared for the type checker
    # (set by Engine.__init__; the two callables are Engine's methods).
    _lock: threading.RLock
    _records: Dict[str, fsm.HostRecord]
    #: names of the hosts whose record is not in RUNNING_STATES
    _not_running: set
    #: ids of the records whose every Nova row matters (not quiet)
    _watched: set
    _timed: set                     # ids of records in fsm.machine.TIMED
    _version: int
    _inbox: Inboxes
    queue: WorkQueue
    clock: Callable[[], float]
    policy: fsm.Policy
    journal: Any
    fencing: Any                    # engine.fencing_gate.FencingGate
    ctx: Any                            # engine.context.Context
    submit: Callable[[Event], None]
    cluster_status: Callable[[], Any]
    #: (records version, urgent()'s answer then)
    _urgent_cache: Any = None
    #: (records version, inventory, the BMC mates of the hosts in
    #: _not_running then)
    _handled_cache: Any = None

    def records(self):
        with self._lock:
            return dict(self._records)

    def _keep(self, rec):
        """Store ``rec`` as its host's record (under the lock), noting
        whether each of Nova's rows for it matters, not only a change."""
        self._records[rec.id] = rec
        if rec.state in RUNNING_STATES:
            self._not_running.discard(rec.name)
        else:
            self._not_running.add(rec.name)
        self.fencing.note(rec)
        if rec.state in fsm.machine.TIMED:
            self._timed.add(rec.id)
        else:
            self._timed.discard(rec.id)
        if fsm.machine.wants_every_report(rec):
            self._watched.add(rec.id)
        else:
            self._watched.discard(rec.id)

    def wants_every_report(self):
        """(host ids, host names) whose every row of Nova the reconciler
        hands over, changed or not: hosts not quietly active, and hosts a
        BMC reported Off while Nova said they were up."""
        with self._lock:
            ids = set(self._watched)
        return ids, self.ctx.evidence.suspected()

    def find(self, name_or_id):
        """The record whose host name or service UUID is ``name_or_id``."""
        with self._lock:
            rec = self._records.get(name_or_id)
            if rec is None:
                rec = next((r for r in self._records.values()
                            if r.name == name_or_id), None)
            return rec

    def urgent(self):
        """Why background reads of every BMC should wait now (hosts being
        proven dead or evacuated, counted by state), or None. Counted
        again only when a record changed since the last answer."""
        with self._lock:
            version = self._version
            cached = self._urgent_cache
            if cached is not None and cached[0] == version:
                return cached[1]
            counts: Dict[str, int] = {}
            for r in self._records.values():
                if r.state in URGENT_STATES:
                    counts[r.state.value] = counts.get(r.state.value, 0) + 1
            why = None
            if counts:
                why = "%d host(s) in recovery (%s): fencing and evacuation " \
                      "come first" % (sum(counts.values()), ", ".join(
                          "%s %d" % kv for kv in sorted(counts.items())))
            self._urgent_cache = (version, why)
            return why

    def handled(self, name):
        """True when host ``name``, or a host whose inventory entry reaches
        the same BMC or machine, is not left running untouched (being
        proven dead, fenced, evacuated, failed, in maintenance ...): its
        BMC may report Off by instanceha's or an operator's doing, which
        says nothing about its inventory entry, and the fencing audit
        skips its BMC once its pause for recoveries has lasted [audit]
        max_pause. From the records and the BMC indexes: no I/O, no scan
        of every record."""
        with self._lock:
            if name in self._not_running:
                return True
            if not self._not_running:
                return False
            version, inv = self._version, self.ctx.inventory
            cached = self._handled_cache
            if cached is not None and cached[0] == version \
                    and cached[1] is inv:
                return name in cached[2]
            hosts = set(self._not_running)
        # Their BMC mates, made again once per change of the records (or
        # of the inventory): the power watch asks for every host.
        mates = set(self.ctx.mates_of(hosts))
        for host in hosts:
            bmc = inv.get(host)
            if bmc is not None:
                mates |= self.ctx.evidence.same_machine_hosts(bmc)
        with self._lock:
            self._handled_cache = (version, inv, frozenset(mates))
        return name in mates

    def known_hosts(self):
        with self._lock:
            return [(r.id, r.name) for r in self._records.values()]

    def resume_from_journal(self):
        """Load each host's last journalled record; restart in-flight work
        (engine.resume says how each state is resumed)."""
        resumed = 0
        now = self.clock()
        self.ctx.evidence.load()
        # Actions a stopped process left unfinished: each runs again (as a
        # new attempt row) where its state still asks for it.
        closed = self.journal.close_open_actions(
            now, "interrupted: the process stopped before it finished; run "
                 "again as a new attempt where still needed")
        if closed:
            LOG.warning("actions_interrupted", count=closed,
                        reason="left unfinished by a stopped process")
        for host_id, data in self.journal.latest().items():
            rec = resume.from_journal(data)
            # In memory only: start-up writes nothing before it finished
            # (the next change of the host is journalled as usual).
            self._adopt(resume.observe_afresh(rec, now, self.policy),
                        "journal")
            resumed += 1
        return resumed

    def _adopt(self, rec, origin):
        action = ENTRY_ACTION.get(rec.state)
        with self._lock:
            if action is not None:
                rec = dataclasses.replace(rec, busy=True)
                self._inbox.append(rec.id, Pending(action, None))
            self._keep(rec)
            self._version += 1
        LOG.info("host_resumed", host=rec.name, host_id=rec.id,
                 state=rec.state.value, origin=origin,
                 action=action.value if action else None,
                 reason="resuming %s found in %s: %s" % (
                     rec.state.value, origin, rec.reason))
        if action is not None:
            self.queue.add(rec.id)

    def _record_for(self, event):
        rec = self._records.get(event.host)
        if rec is not None:
            return rec
        rec = fsm.HostRecord(id=event.host, name=event.name,
                             since=event.at, reason="first seen")
        ours = resume.isolated_by_us(event)
        if ours is not None:
            rec = resume.adopted_from_nova(rec, event, ours, self.policy)
            self.journal.record_transition(
                fsm.HostRecord(id=rec.id, name=rec.name), rec, event)
            self._adopt(rec, "nova")
            return None
        self._keep(rec)
        self._version += 1
        return rec

    def capacity_appeared(self, hosts):
        """Compute hosts became schedulable: each host waiting for capacity
        retries at the next tick instead of after its back-off."""
        now = self.clock()
        with self._lock:
            waiting = [r for r in self._records.values()
                       if r.state is State.PENDING and r.waits_for_capacity]
        if not waiting:
            return 0
        text = "compute host(s) %s enabled and up" % ", ".join(hosts[:5])
        if len(hosts) > 5:
            text += " and %d more" % (len(hosts) - 5)
        LOG.info("capacity_appeared", hosts=list(hosts),
                 waiting=[r.name for r in waiting],
                 reason="hosts waiting for capacity try again now")
        for rec in waiting:
            self.submit(Event(E.CAPACITY, rec.id, now, name=rec.name,
                              source="reconciler", reason=text))
        return len(waiting)

    def tick(self):
        """Send TICK to every host whose timer is due. Returns count."""
        now = self.clock()
        ok, why = self.cluster_status()
        due = []
        with self._lock:
            # Only records that may have a timer: a few of a large cloud
            # (all 20,000 were looked at every tick_interval).
            for rec in [self._records[h] for h in self._timed]:
                when = fsm.machine.next_wakeup(rec, self.policy)
                if when is not None and now >= when:
                    due.append(rec)
        for rec in due:
            self.submit(Event(E.TICK, rec.id, now, name=rec.name,
                              source="timer", cluster_ok=ok, reason=why))
        return len(due)
