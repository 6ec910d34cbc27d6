"""The engine: per-host inboxes, a keyed work queue, a worker pool, a ticker.

Everything that happens to a host arrives as an Event in that host's inbox
(:meth:`Engine.submit`). A worker takes the host's key from the queue (so a
host is never processed by two workers at once), applies each event to the
state machine, persists the transition in the journal, and only then runs
the action the transition asked for. The action's result is put at the
front of the inbox and processed next. An action that raises is retried
with per-host exponential back-off.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Counter, Dict, Hashable,
                    List, Mapping, NoReturn, Optional, Sequence, Set, Tuple,
                    cast)

import structlog

from instanceha.engine.context import Context
from instanceha.engine.fencing_gate import FencingGate
from instanceha.engine import evidence, executor, registry, resume, status
from instanceha.engine import drain as drain_mod
from instanceha.engine.hosts import HostTable
from instanceha.engine.inbox import Finish, Inboxes, Pending, Result
from instanceha.engine.journal_health import JournalHealth
from instanceha.engine.probes import Probes
from instanceha.engine.progress import ProgressBoard
from instanceha.engine import failover as failover_mod
from instanceha.engine import repair as repair_mod
from instanceha.engine.runner import Runner
from instanceha.engine.workqueue import WorkQueue
from instanceha.events import DrainRequest, Event, EventKind as E
from instanceha import failpoints
from instanceha import fsm
from instanceha.fsm import agent as fsm_agent
from instanceha.policy import storm
from instanceha.fsm.states import (ACTION_ROWS, ENTRY_ACTION,
                                   ISOLATED_STATES, ORDINARY_ACTIONS,
                                   PASS_ACTIONS, Action, State, urgent,
                                   wanted)
from instanceha.fsm.record import HostRecord
from instanceha.journal import Journal

if TYPE_CHECKING:
    from instanceha.engine.passes import Carry
    from instanceha.engine.registry import Subject

LOG = structlog.get_logger("instanceha.engine")

#: fn(old_record, new_record, event) after every persisted change
Listener = Callable[[HostRecord, HostRecord, Event], object]


class _Retry(Exception):
    pass


class Engine:

    def __init__(self, conf: Any, context: Context, journal: Journal,
                 clock: Callable[[], float] = time.time,
                 health: Optional[Mapping[str, Callable[[], object]]] = None,
                 unprotected: Optional[Callable[[], Mapping[str, str]]] = None,
                 status_extra: Optional[Callable[[], Mapping[str, object]]]
                 = None) -> None:
        """``health``: {source name: callable returning its health dict}
        (status); ``unprotected()``: {host: why it could not be fenced
        now} (the readiness audit); ``status_extra()``: what the status
        shows beside the engine's own (the service's group, its start)."""
        self.conf = conf
        self.ctx = context
        self.journal = journal
        self.clock = clock
        self.policy = fsm.Policy.from_conf(conf)
        self.unprotected: Callable[[], Mapping[str, str]] = (
            unprotected or dict)
        self.status_extra: Callable[[], Mapping[str, object]] = (
            status_extra or dict)
        # A quarter of the workers (at least one) kept for hosts being
        # proven dead: evacuation passes never hold them all.
        self.queue = WorkQueue(clock, base_delay=1.0, max_delay=60.0,
                               ordinary_limit=max(1, conf.workers - max(
                                   1, conf.workers // 4)))
        self._lock = threading.RLock()
        #: each host's record (engine.hosts), under the engine's lock: a
        #: record and its inbox change together
        self.hosts = HostTable(self._lock, context)
        #: what waits for each host (engine.inbox)
        self._inbox = Inboxes()
        #: are journal writes failing (status: degraded)?
        self.journal_health = JournalHealth(clock)
        self._listeners: List[Listener] = []
        #: the engine's threads
        self._runner = Runner(self, conf)
        #: BMC reads of hosts whose heartbeat was just lost
        #: BMC and Nova reads of hosts being suspected (engine.probes)
        self._probes = Probes(context, self.submit)
        self.health = dict(health or {})   # name -> callable -> dict
        #: (what, ...) -> count, read by /metrics
        self.stats: Counter[Tuple[str, ...]] = collections.Counter()
        #: storm threshold, acknowledgements and fencing rate
        self.fencing = FencingGate(conf, clock, context.readiness,
                                   self.hosts.view)
        self.started_at = clock()
        #: instance repair (issue 25): each case is work of its own on
        #: this queue (Action.REPAIR passes), run like the hosts' actions
        self.repair = repair_mod.InstanceRepair(
            conf, context, self.start_work, self.find,
            cluster_ok=self.cluster_status)
        #: failover capacity (issue 38): a measure on this queue every
        #: [failover_capacity] interval
        self.failover = failover_mod.FailoverCapacity(conf, context,
                                                      self.start_work)
        # A notification about a server may settle a move: the passes
        # waiting for that server take their next pass now.
        context.board.subscribe(self._wake_passes)

    # -- wiring --------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        """fn(old_record, new_record, event) after every persisted change."""
        self._listeners.append(fn)

    def drain_preflight(self, rec: HostRecord, request: DrainRequest
                        ) -> Dict[str, Any]:
        """The drain plan of host ``rec`` for ``request`` (DrainRequest),
        read from Nova now, as JSON; nothing is changed."""
        return drain_mod.preflight(
            self.ctx, rec.name, force=request.force,
            concurrency=request.concurrency).as_dict()

    def running_work(self, host_id: str) -> Optional[str]:
        """What is still running for a host, in a few words, or None."""
        return status.running_work(self.ctx, self.hosts.get(host_id))

    def _wake_passes(self, server_id: Optional[str] = None) -> None:
        """The passes waiting for news of ``server_id`` take their next
        pass now (every waiting pass when None)."""
        with self._lock:
            keys = self._inbox.wake_passes(self.clock(), server_id)
        for k in keys:
            self.queue.add(k)

    def start_work(self, key: Hashable, pending: Pending) -> None:
        """Work no host state starts (an instance repair case): its first
        pass now, or its waiting pass at once. Runs on the workers like a
        host's action: the may-act check, the executor, the back-off."""
        with self._lock:
            self._inbox.start_or_wake(key, pending, self.clock())
        self.queue.add(key)

    # -- events ----------------------------------------------------------------
    def settled(self) -> bool:
        """Every event handed over so far has been applied (timers and
        back-offs still to come aside)."""
        return self.queue.settled()

    def submit(self, event: Event) -> None:
        """Hand an event to the host's inbox. Thread-safe, never blocks long."""
        with self._lock:
            self._inbox.put(event)
            rec = self.hosts.get(event.host)
        self.queue.add(event.host, urgent=urgent(
            None if rec is None else rec.state, event.kind))

    def process(self, host_id: Hashable) -> None:
        """Drain one host's inbox. Called by exactly one worker at a time."""
        while True:
            if self.queue.holding(host_id):
                return          # backing off: the queue brings it back
            with self._lock:
                item = self._inbox.take(host_id, self.clock())
            if item is None:
                return
            if isinstance(item, Event):
                self._apply(item)
            elif isinstance(item, Result):
                self._apply(item.event, item.finish)
            elif (item.action in ORDINARY_ACTIONS
                  and self.queue.taken_urgent(host_id)):
                # Proven dead by this worker, taken from the urgent lane:
                # its evacuation (minutes of passes) waits its turn in the
                # ordinary lane, so the workers kept for hosts being
                # proven dead stay free for them.
                with self._lock:
                    self._inbox.put_front(host_id, item)
                self.queue.add(host_id)
                return
            else:
                self._run(host_id, item)

    def _apply(self, event: Event, finish: Optional[Finish] = None) -> None:
        """Step the state machine; journal the action that produced the
        event (``finish``), the transition and the actions it starts in one
        transaction, before any of those actions runs."""
        rec: Optional[HostRecord]
        with self._lock:
            known = self.hosts.get(event.host)
            if known is None and event.kind in (E.POWER_ON, E.POWER_OFF):
                # A BMC read (the audit's, at start) for a host Nova's
                # first word has not reached yet: kept as evidence only;
                # the record is made from Nova's view (which may say the
                # host is one instanceha isolated: rule 3).
                known = fsm.HostRecord(id=event.host, name=event.name)
                rec = None
            else:
                rec = self._record_for(event)
        if rec is None:
            if known is not None:
                evidence.note(self.ctx, known, event)
            return
        event = evidence.note(self.ctx, rec, event)
        try:
            event, new, actions = self._step_then_admit(rec, event)
        except fsm.UndeclaredTransition as e:
            LOG.error("undeclared_transition", host=rec.name,
                      state=rec.state.value, trigger=event.kind.value,
                      reason=str(e))
            return
        if new.state is State.FENCED and rec.state is not State.FENCED:
            new = self._with_evac_floor(new, event, finish)
        changed = new.state is not rec.state or new.reason != rec.reason
        ids = self._journal_step(rec, new, event, changed, actions, finish)
        if changed:
            failpoints.hit("after_transition:" + new.state.value)
            LOG.info("transition", host=new.name, host_id=new.id,
                     src=rec.state.value, state=new.state.value,
                     trigger=event.kind.value, source=event.source,
                     reason=new.reason,
                     action=",".join(a.value for a in actions) or None)
        elif self.conf.debug:
            LOG.debug("event_ignored", host=rec.name, state=rec.state.value,
                      trigger=event.kind.value, source=event.source)
        due: Optional[Event] = None
        if event.kind is not E.TICK and not [
                a for a in actions if registry.spec(a).within is None]:
            # A deadline already passed (grace_period 0, a kdump proof):
            # decide now instead of at the next tick. Never after a TICK,
            # so a held decision (threshold) cannot spin.
            when = fsm.machine.next_wakeup(new, self.policy)
            if when is not None and when <= event.at:
                ok, why = self.cluster_status_with(new)
                due = Event(E.TICK, new.id, event.at, name=new.name,
                            source="timer", cluster_ok=ok, reason=why)
        with self._lock:
            if changed:
                self.stats[("transition", new.state.value)] += 1
            self._keep(new)
            for action, action_id in reversed(list(zip(actions, ids))):
                self._inbox.put_front(new.id, Pending(action, action_id))
            if due is not None:
                self._inbox.put_front(new.id, due)
        if (self.policy.power_evidence and new.state is State.SUSPECT
                and rec.heartbeat_ok and not new.heartbeat_ok):
            self._probes.power(new)
        if fsm_agent.wants_nova_read(new, event.at, self.policy):
            self._probes.nova(new)
        if changed:
            for fn in self._listeners:
                fn(rec, new, event)

    def _journal_step(self, rec: HostRecord, new: HostRecord, event: Event,
                      changed: bool, actions: Sequence[Action],
                      finish: Optional[Finish]) -> List[int]:
        """Journal the step (transition, actions started, the action
        finished) in one transaction, before any of it takes effect;
        returns the started actions' ids. A failed write puts the event
        back at the front of the host's inbox and retries it."""
        if not (changed or actions or finish):
            return []
        try:
            ids = self.journal.record(rec, new, event, transition=changed,
                                      start=actions, finish=finish)
        except Exception as e:
            self._journal_failed("journal_write_failed", rec, event, finish,
                                 e)
        self.journal_health.note(None)
        return ids

    def _journal_failed(self, what: str, rec: HostRecord, event: Event,
                        finish: Optional[Finish], error: BaseException
                        ) -> NoReturn:
        """The journal could not be written or read for this step: said,
        noted in the journal's health, and the event put back at the front
        of the host's inbox to be retried."""
        LOG.error(what, host=rec.name, reason=str(error))
        self.journal_health.note(error)
        with self._lock:
            self._inbox.put_front(
                event.host, Result(event, finish) if finish else event)
        raise _Retry()

    def _step_then_admit(self, rec: HostRecord, event: Event
                         ) -> Tuple[Event, HostRecord, List[Action]]:
        """Step the state machine first; ask the fencing gate (start-up,
        control plane, storm threshold, rate limit) only when the step
        would start proving the host dead (into fencing, or fenced by a
        kdump proof), and step again with its refusal. Returns (the event
        as stepped, the new record, its actions)."""
        if event.kind is not E.TICK:
            return (event,) + fsm.step(rec, event, self.policy)
        # A TICK may have waited in the queue while other hosts died: the
        # gate is judged as it stands now, not when the TICK was sent.
        trial = dataclasses.replace(event, cluster_ok=True, reason="")
        new, actions = fsm.step(rec, trial, self.policy)
        if not fsm.machine.starts_proof(rec, new):
            return (trial, new, actions)
        ok, why = self.hold_for(rec, event.at)
        if ok:
            # The fencing it starts takes a token of the rate.
            ok, why = self.fencing.take_token(rec, event.at)
        if ok:
            return (trial, new, actions)
        held = dataclasses.replace(event, cluster_ok=False, reason=why)
        return (held,) + fsm.step(rec, held, self.policy)

    def _run(self, host_id: Hashable, pending: Pending) -> None:
        action = pending.action
        spec = registry.spec(action)
        rec: Subject
        #: the host's record, for an action of a host
        host: Optional[HostRecord] = None
        if not spec.of_host:
            # Work no host starts (an instance repair case, the failover
            # capacity measure): its subject is its carry.
            assert pending.carry is not None, pending
            rec = cast("Subject", pending.carry)
        else:
            # A host's action is keyed by its host's id, and queued only
            # once the host's record is kept.
            assert isinstance(host_id, str), host_id
            host = self.hosts.get(host_id)
            assert host is not None, host_id
            rec = host
        following = (pending.carry is not None
                     and action in PASS_ACTIONS)
        if pending.carry is None:
            self._replace_pass(host_id, rec, action)
        if not following and host is not None and not wanted(action, host):
            LOG.info("action_dropped", host=host.name, action=action.value,
                     state=host.state.value,
                     reason="state changed before the action started")
            if pending.action_id is not None:
                self.journal.action_finished(pending.action_id, self.clock(),
                                             "dropped", "state changed")
            return
        why = None if spec.reads_only else self.ctx.may_act()
        if why is not None:
            # Not ours to act on now (another member of the group acts, or
            # this one lost its coordination lease): the action waits.
            LOG.warning("action_deferred", host=rec.name,
                        action=action.value, reason=why)
            with self._lock:
                if pending.carry is not None:
                    self._inbox.set_pass(host_id, pending, self.clock())
                else:
                    self._inbox.put_front(host_id, pending)
            raise _Retry()
        started = self.clock()
        action_id = pending.action_id
        if action_id is None and spec.journal == ACTION_ROWS:
            # a retry or a resume: a new attempt row
            try:
                action_id = self.journal.action_started(rec, action, started)
            except Exception as e:
                LOG.error("journal_write_failed", host=rec.name,
                          action=action.value, reason=str(e))
                self.journal_health.note(e)
                with self._lock:
                    self._inbox.put_front(host_id, pending)
                raise _Retry()
        if pending.carry is None:
            LOG.info("action_started", host=rec.name, action=action.value,
                     state=None if host is None else host.state.value)
        self._execute(host_id, rec, action, action_id, started,
                      pending.carry)

    def _replace_pass(self, host_id: Hashable, rec: Subject, action: Action
                      ) -> None:
        """A new attempt of an action run in passes: the unfinished one of
        an earlier attempt (still following what Nova had after an
        operator stepped in) is abandoned; the new one reads the world
        afresh and follows what is still in flight."""
        with self._lock:
            old = self._inbox.pop_pass(host_id, action)
        if old is None:
            return
        if old.pending.carry is not None:
            old.pending.carry.close()
        LOG.info("action_pass_abandoned", host=rec.name, action=action.value,
                 reason="a new attempt starts: it reads Nova afresh and "
                        "follows what is still in flight")

    def _execute(self, host_id: Hashable, rec: Subject, action: Action,
                 action_id: Optional[int], started: float,
                 carry: Optional[Carry]) -> None:
        """Run the action (one pass of it, engine.executor) and queue what
        comes next: its result, its next pass, or its retry."""
        out = executor.attempt(self.ctx, self.conf, self.stats,
                               self.journal_health, rec, action, action_id,
                               started, carry, self.queue.failures(host_id),
                               registry.run)
        if isinstance(out, executor.Again):
            # Not finished: the next pass after its delay, or sooner when
            # woken. The host's key is free meanwhile (its events are
            # applied as they come); its record stays busy.
            with self._lock:
                self._inbox.set_pass(host_id,
                                     Pending(action, action_id, out.carry),
                                     self.clock() + out.after, out.waits_for)
            if out.after > 0:
                self.queue.add_after(host_id, out.after)
            else:
                self.queue.add(host_id)
            return
        if isinstance(out, executor.Finished):
            self.queue.forget(host_id)
            with self._lock:
                self._inbox.clear_error(host_id)
                if out.event is not None:
                    self._inbox.put_front(host_id,
                                          Result(out.event, out.finish))
            return
        # Retry or Held: a new attempt later, the key held back. Work no
        # host state starts goes on with its carry (its subject).
        again = None if registry.spec(action).of_host else carry
        with self._lock:
            self._inbox.put_front(host_id, Pending(action, None, again))
        if isinstance(out, executor.Held):
            self.queue.hold(host_id, out.delay)
            error = "%s held, nothing powered off: %s" % (action.value,
                                                          out.why)
        else:
            delay = self.queue.add_rate_limited(host_id)
            e = out.error
            error = "%s failed (%s: %s); retry %d" % (
                action.value, type(e).__name__, e,
                self.queue.failures(host_id))
            LOG.warning("action_error", host=rec.name, action=action.value,
                        retry_in=round(delay, 2),
                        reason="%s: %s" % (type(e).__name__, e))
        with self._lock:
            self._inbox.note_error(host_id, error)

    def _with_evac_floor(self, new: HostRecord, event: Event,
                         finish: Optional[Finish]) -> HostRecord:
        """``new`` (entering FENCED) with the id of the host's last
        evacuation row so far: the rows of this recovery are those above
        it (journal order, whichever replica's clock stamped them)."""
        try:
            rows = self.journal.evacuations(new.id)
        except Exception as e:
            self._journal_failed("journal_read_failed", new, event, finish, e)
        floor = max((r["id"] for r in rows), default=0)
        return dataclasses.replace(new, evac_floor=floor)

    # -- the host records (engine.hosts) -----------------------------------
    def records(self) -> Dict[str, HostRecord]:
        return self.hosts.records()

    def find(self, name_or_id: str) -> Optional[HostRecord]:
        """The record whose host name or service UUID is ``name_or_id``."""
        return self.hosts.find(name_or_id)

    def known_hosts(self) -> List[Tuple[str, str]]:
        return self.hosts.known_hosts()

    def urgent(self) -> Optional[str]:
        """Why background reads of every BMC should wait now, or None
        (HostTable.urgent)."""
        return self.hosts.urgent()

    def handled(self, name: str) -> bool:
        """Is host ``name`` (or a BMC mate) not left running untouched
        (HostTable.handled)?"""
        return self.hosts.handled(name)

    def wants_every_report(self) -> Tuple[Set[str], Set[str]]:
        """(host ids, host names) whose every row of Nova the reconciler
        hands over, changed or not: hosts not quietly active, and hosts a
        BMC reported Off while Nova said they were up."""
        return self.hosts.watched(), self.ctx.evidence.suspected()

    def _keep(self, rec: HostRecord) -> None:
        """Store ``rec`` as its host's record; the fencing gate counts it."""
        with self._lock:
            self.hosts.keep(rec)
            self.fencing.note(rec)

    def resume_from_journal(self) -> int:
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

    def _adopt(self, rec: HostRecord, origin: str) -> None:
        action = ENTRY_ACTION.get(rec.state)
        with self._lock:
            if action is not None:
                rec = dataclasses.replace(rec, busy=True)
                self._inbox.append(rec.id, Pending(action, None))
            self._keep(rec)
        LOG.info("host_resumed", host=rec.name, host_id=rec.id,
                 state=rec.state.value, origin=origin,
                 action=action.value if action else None,
                 reason="resuming %s found in %s: %s" % (
                     rec.state.value, origin, rec.reason))
        if action is not None:
            self.queue.add(rec.id)

    def _record_for(self, event: Event) -> Optional[HostRecord]:
        """The host's record, made for a host first seen (None: a host
        Nova shows instanceha isolated, adopted with its action)."""
        rec = self.hosts.get(event.host)
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
        return rec

    def capacity_appeared(self, hosts: Sequence[str]) -> int:
        """Compute hosts became schedulable: each host waiting for capacity
        retries at the next tick instead of after its back-off."""
        now = self.clock()
        waiting = self.hosts.waiting_for_capacity()
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

    def tick(self) -> int:
        """Send TICK to every host whose timer is due. Returns count."""
        now = self.clock()
        ok, why = self.cluster_status()
        due: List[HostRecord] = []
        # Only records that may have a timer: a few of a large cloud
        # (all 20,000 were looked at every tick_interval).
        for rec in self.hosts.timed():
            when = fsm.machine.next_wakeup(rec, self.policy)
            if when is not None and now >= when:
                due.append(rec)
        for rec in due:
            self.submit(Event(E.TICK, rec.id, now, name=rec.name,
                              source="timer", cluster_ok=ok, reason=why))
        return len(due)

    # -- the fencing gate ---------------------------------------------------
    @property
    def storm(self) -> storm.Settings:
        """The storm settings in use."""
        return self.fencing.settings

    def reload_settings(self) -> None:
        """Options changed (SIGHUP): what the engine derived from them."""
        self.policy = fsm.Policy.from_conf(self.conf)
        self.fencing.settings = storm.Settings.from_conf(self.conf)
        self.repair.reload_settings()
        self.failover.reload_settings()

    def hold_for(self, rec: HostRecord, at: float,
                 pending: Optional[HostRecord] = None) -> Tuple[bool, str]:
        """(ok, reason): may ``rec`` be fenced now, as far as the cloud is
        concerned (start-up, control plane, storm threshold)?"""
        return self.fencing.hold_for(rec, at, pending)

    def acknowledge_storm(self, reason: str = "") -> Dict[str, int]:
        """Operator ``resume --storm``: lift the storm hold for the hosts
        lost now; more losses in a scope bring it back."""
        held = self.fencing.acknowledge()
        LOG.warning("storm_hold_lifted", scopes=",".join(sorted(held)) or None,
                    lost=sum(held.values()), reason=reason or
                    "operator: resume --storm")
        return held

    def cluster_status(self) -> Tuple[bool, str]:
        """(ok, reason) of the whole cloud for status and metrics: False
        while a gate or the global storm hold stops new fencing."""
        return self.fencing.cluster_status()

    def cluster_status_with(self, pending: HostRecord) -> Tuple[bool, str]:
        """cluster_status() as it will be once ``pending`` is recorded."""
        return self.hold_for(pending, self.clock(), pending)

    # -- threads ---------------------------------------------------------------
    def work(self, key: Hashable) -> None:
        """Process one key taken from the queue, as a worker does."""
        try:
            self.process(key)
        except _Retry:
            self.queue.add_rate_limited(key)
        except Exception:
            LOG.exception("worker_error", host_id=key)
            self.queue.add_rate_limited(key)
        finally:
            self.queue.done(key)

    def start(self) -> None:
        """Workers, the work queue's delayer and the ticker (engine.runner)."""
        self._probes.start()
        self._runner.start()
        self.failover.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._runner.stop(timeout)
        with self._lock:
            passes = self._inbox.pop_all_passes()
        for p in passes:
            if p.pending.carry is not None:
                p.pending.carry.close()
        self._probes.shutdown()

    # -- status ------------------------------------------------------------
    def snapshot(self) -> Dict[str, object]:
        """Everything status shows (engine.status)."""
        with self._lock:
            hosts = self.hosts.sorted()
            errors = self._inbox.errors()
        return status.snapshot(self, hosts, errors)

    def threads(self) -> List[threading.Thread]:
        """The engine's threads (the watchdog checks they are alive)."""
        return self._runner.threads()


def new_board() -> ProgressBoard:
    return ProgressBoard()


__all__ = ["Engine", "Context", "Action", "ISOLATED_STATES", "new_board"]
