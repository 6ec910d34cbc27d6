"""Apply one event to one host's record: ``step(record, event, policy)``.

Pure: the result depends only on the arguments. Time comes from
``event.at``; settings from :class:`Policy`. Returns the new record and the
actions to start, in order. The caller persists the new record before it
starts any action.

The record (:mod:`instanceha.fsm.record`), the settings
(:mod:`instanceha.fsm.settings`) and the guards (:mod:`instanceha.fsm.guards`)
live in modules of their own; their public names stay importable from here.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from instanceha.events import EventKind as E
from instanceha.events import (
    AgentSilence, DrainRequest, Event, DrainSummary, Fenced, Isolated,
    PowerReading, ResumeRequest, ServiceReport, Suspension)
from instanceha.fsm import agent, table
from instanceha.fsm.guards import (
    GUARDS, dump_holds, dumping, fence_at, kdump_proof, reported_after_fencing)
# Re-exported: the engine and the tests reach them through this module.
from instanceha.fsm.guards import (  # noqa: F401 (re-exported)
    reported_after, returned_floor)
from instanceha.fsm.record import HostRecord  # noqa: F401 (re-exported)
from instanceha.fsm.settings import Policy  # noqa: F401 (re-exported)
from instanceha.fsm.table import Rule
from instanceha.fsm.states import (ENTRY_ACTION, Action, ISOLATED_STATES,
                                   RESULT_KINDS, RESULT_STATES, State,
                                   entered)
from instanceha.util import backoff, marker


class UndeclaredTransition(LookupError):
    """A (state, event) pair the table neither handles nor ignores."""


#: (state, kind) -> the table's rules for it, in order
_INDEX: Dict[Tuple[State, E], List[Rule]] = {}
for _rule in table.RULES:
    _INDEX.setdefault((_rule[0], _rule[1]), []).append(_rule)


def rules_for(state: State, kind: E) -> List[Rule]:
    return _INDEX.get((state, kind), [])


# -- the step ------------------------------------------------------------------



def _operator_disabled(r: HostRecord, ev: Event) -> Optional[str]:
    """The service's disabled state as the event reports it: the reason
    of someone else's disable, None when enabled; unchanged when the event
    does not say, or when the reason is instanceha's own marker."""
    report = ev.payload
    if not isinstance(report, ServiceReport):
        return r.operator_disabled
    disabled = report.says_disabled()
    if disabled is None:
        return r.operator_disabled
    if not disabled:
        return None
    reason = report.disabled_reason or ""
    if marker.is_ours(reason):
        return r.operator_disabled
    return reason or "no reason given"


def _observe(r: HostRecord, ev: Event, p: Policy) -> HostRecord:
    """Facts every event updates whatever the state."""
    changes: Dict[str, Any] = {}
    if ev.kind is E.HEARTBEAT_OK:
        changes.update(heartbeat_ok=True, ok_at=ev.at)
        if not (r.state is State.SUSPECT and r.agent == agent.SILENT):
            # (a suspect on its agent's silence keeps the moment of it)
            changes["lost_at"] = None
        if r.isolated:
            changes["returned"] = (r.returned
                                   or reported_after_fencing(r, ev, None))
    elif ev.kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN):
        changes["heartbeat_ok"] = False
        changes["returned"] = False
        if r.lost_at is None:
            changes["lost_at"] = ev.at
    elif ev.kind is E.POWER_OFF:
        # Only from a BMC that may prove this host dead (seen On for it,
        # never Off while it was up: instanceha.policy.proof); the engine
        # says so in the event.
        if (r.power_off_at is None and isinstance(ev.payload, PowerReading)
                and ev.payload.vouched):
            changes["power_off_at"] = ev.at
    elif ev.kind is E.POWER_ON:
        if r.power_off_at is not None:
            changes["power_off_at"] = None
    elif ev.kind is E.KDUMP:
        changes["kdump_at"] = ev.at
        if not dumping(r, ev.at, p) or r.kdump_first_at is None:
            changes["kdump_first_at"] = ev.at      # a new dump
    if ev.kind in _OBSERVATIONS:
        disabled = _operator_disabled(r, ev)
        if disabled != r.operator_disabled:
            changes["operator_disabled"] = disabled
            if disabled is None:
                # The operator gave the host back: like a resume, a fresh
                # observation with boot time (it may be booting).
                changes.update(hold_until=ev.at + p.resume_boot_time,
                               lost_at=None if ev.kind is E.HEARTBEAT_OK
                               else ev.at)
    if ev.kind in RESULT_KINDS and r.state in RESULT_STATES.get(ev.kind, ()):
        changes["busy"] = False
    agent.observe(r, ev, changes)
    if ev.name and not r.name:
        changes["name"] = ev.name
    if isinstance(ev.payload, ServiceReport):
        zone = ev.payload.zone
        if zone and zone != r.zone:
            changes["zone"] = zone
        aggregates = ev.payload.aggregates
        if aggregates is not None and tuple(aggregates) != r.aggregates:
            changes["aggregates"] = tuple(aggregates)
    return dataclasses.replace(r, **changes) if changes else r


_OBSERVATIONS = {E.HEARTBEAT_OK, E.HEARTBEAT_LOST, E.FORCED_DOWN}


_HANDS_OFF = (State.FAILED, State.MAINTENANCE, State.SUSPENDED,
              State.DECOMMISSIONED)


def _enter(r: HostRecord, dst: State, ev: Event,
           p: Policy) -> Dict[str, Any]:
    """Field changes that come with entering ``dst`` (from another state)."""
    changes: Dict[str, Any] = dict(
        state=dst, since=ev.at, retry_at=None, busy=False,
        waits_for_capacity=(dst is State.PENDING
                            and ev.kind is E.EVACUATE_NO_CAPACITY))
    resumed = (r.state in _HANDS_OFF
               and ev.kind in (E.OPERATOR_RESUME, E.TICK))
    if dst is State.ACTIVE:
        changes.update(isolated=False, attempts=0, returned=False,
                       power_off_at=None)
        if resumed:
            # A fresh observation: what was seen while hands were off (a
            # heartbeat lost during maintenance, an old dump) does not
            # count, and the host gets its boot time and a full grace
            # period before any fencing.
            changes.update(heartbeat_ok=True, lost_at=None, kdump_at=None,
                           kdump_first_at=None,
                           hold_until=ev.at + p.resume_boot_time)
    if dst is State.SUSPECT and ev.kind is E.AGENT_SILENT:
        # Silent since its last beat: the grace period runs from there.
        changes["lost_at"] = (ev.payload.last_beat_at
                              if isinstance(ev.payload, AgentSilence)
                              else ev.at)
    if dst is State.ACTIVE and r.state is State.SUSPECT and r.heartbeat_ok:
        changes["lost_at"] = None       # the agent's silence is over
    if dst is State.SUSPECT and r.state in (State.ACTIVE, State.DRAINING):
        changes["lost_updated"] = r.nova_updated
    if (dst is State.SUSPECT and r.state is State.ACTIVE
            and ev.kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN)):
        # Heartbeat losses only: kdump messages of a crashing host that
        # still looks fresh, or an agent that restarts or loses its
        # network while Nova hears the host, must not make it a flapping
        # one.
        changes["losses"] = tuple(t for t in r.losses
                                  if ev.at - t <= p.flap_window) + (ev.at,)
    if dst in ISOLATED_STATES:
        changes["isolated"] = True
    if dst is State.EVACUATING:
        changes["attempts"] = r.attempts + 1
    if dst in (State.FENCING, State.FENCED):
        # A new proof of death: our last write to Nova is from before it.
        changes.update(written_at=None, returned=False)
    if dst is State.FENCED:
        changes["fenced_at"] = ev.at
        changes["proven_by"] = ("power" if ev.kind is E.FENCE_OK
                                else "kdump")
        changes.update(fenced_level=None, storage_protects=(),
                       fenced_how="")
        if isinstance(ev.payload, Fenced):
            changes["fenced_level"] = ev.payload.level or ev.payload.method
            changes["fenced_how"] = ev.payload.how
            if ev.payload.scope == "storage":
                changes.update(proven_by="storage",
                               storage_protects=ev.payload.protects)
    if isinstance(ev.payload, Isolated):
        changes["written_at"] = float(ev.payload.written_at)
    if dst is State.PENDING:
        if resumed or ev.kind is E.REPROOF_FAILED:
            # An isolated host that has not reported back (or one not
            # proven dead when its evacuation was to start: it may have
            # been powered on and be booting): give it time to boot and
            # report before proving it dead again.
            delay = p.resume_boot_time + p.grace_period
        else:
            delay = backoff.exponential(p.retry_backoff, r.attempts,
                                        p.retry_backoff_max)
        changes["retry_at"] = ev.at + delay
    if dst is State.SUSPENDED:
        changes["until"] = _until(ev)
    if dst is State.DRAINING and isinstance(ev.payload, DrainRequest):
        changes.update(drain_then=ev.payload.then,
                       drain_concurrency=ev.payload.concurrency,
                       drain_force=ev.payload.force)
    if isinstance(ev.payload, DrainSummary):
        changes["drain_moved"] = tuple(ev.payload.moved)
    if dst is State.UNDRAINING:
        changes["from_maintenance"] = r.state in (State.MAINTENANCE,
                                                  State.FAILED)
        changes["fail_back"] = bool(
            isinstance(ev.payload, ResumeRequest)
            and (ev.payload.fail_back if ev.payload.fail_back is not None
                 else p.fail_back))
    if dst is State.ACTIVE:
        changes.update(drain_then="", drain_concurrency=None,
                       drain_force=False, drain_moved=(), fail_back=False,
                       from_maintenance=False)
    return changes


def _until(ev: Event) -> Optional[float]:
    if isinstance(ev.payload, Suspension):
        return ev.payload.until
    return None


def wants_every_report(r: HostRecord) -> bool:
    """Whether every read of Nova's row matters to the host's record, not
    only a changed verdict: anything but a quiet active host (heartbeating,
    no agent, no BMC reading Off, no kdump message). Its updated_at feeds
    the agent's corroboration, a return after fencing, a kdump's age."""
    return not (r.state is State.ACTIVE and r.heartbeat_ok and not r.agent
                and r.power_off_at is None and r.kdump_at is None)


def step(record: HostRecord, event: Event,
         policy: Policy) -> Tuple[HostRecord, List[Action]]:
    """Return ``(new_record, [actions])`` for one event: the actions its
    transition starts, then those a condition entered starts
    (states.entered: the agent's veto, soft fencing)."""
    new, actions = _transition(record, event, policy)
    return new, actions + list(entered(record, new, policy))


def _transition(record: HostRecord, event: Event,
                policy: Policy) -> Tuple[HostRecord, List[Action]]:
    r = _observe(record, event, policy)
    for src, kind, guard, dst, reason in rules_for(r.state, event.kind):
        if not GUARDS[guard](r, event, policy):
            continue
        if dst is r.state:
            changes: Dict[str, Any] = {
                "reason": reason.format(event=event, record=r)}
            if kind is E.OPERATOR_SUSPEND:
                changes["until"] = _until(event)
            if kind is E.OPERATOR_RESUME:
                changes["losses"] = ()
            actions: List[Action] = []
            if (src, kind) in table.REENTER:
                changes["retry_at"] = None
                actions = [ENTRY_ACTION[dst]] if dst in ENTRY_ACTION else []
            elif kind is E.CLEANUP_PENDING:
                changes["retry_at"] = event.at + policy.cleanup_check_interval
            elif kind is E.CAPACITY:
                changes["retry_at"] = event.at
            if actions:
                changes["busy"] = True
            return dataclasses.replace(r, **changes), actions
        changes = _enter(r, dst, event, policy)
        changes["reason"] = reason.format(
            event=event, record=dataclasses.replace(r, **changes))
        action = ENTRY_ACTION.get(dst)
        if action is not None:
            changes["busy"] = True
        return dataclasses.replace(r, **changes), [action] if action else []
    if (r.state, event.kind) in table.IGNORED or rules_for(r.state, event.kind):
        return r, []
    raise UndeclaredTransition("no rule for %s in state %s"
                               % (event.kind.value, r.state.value))


def fencing_due(record: HostRecord, event: Event, policy: Policy) -> bool:
    """Would this TICK start proving the host dead (into fencing, or
    fenced by a kdump proof) if the cloud allowed it? Read off the table:
    the step's answer with the fencing gate open."""
    if record.state not in (State.SUSPECT, State.PENDING):
        return False
    open_tick = dataclasses.replace(event, cluster_ok=True, reason="")
    new, _ = step(record, open_tick, policy)
    return starts_proof(record, new)


def starts_proof(old: HostRecord, new: HostRecord) -> bool:
    """Does the step from ``old`` to ``new`` start proving the host dead
    (into fencing, or fenced by a kdump proof)? What the fencing gate is
    asked about."""
    return new.state is not old.state and new.state in (State.FENCING,
                                                        State.FENCED)


#: The states in which a record may have a timer (next_wakeup is None in
#: every other state): the engine's tick looks at these records only.
TIMED = frozenset([State.SUSPECT, State.PENDING, State.RECOVERING,
                   State.SUSPENDED])


def next_wakeup(record: HostRecord, policy: Policy) -> Optional[float]:
    """When a TICK could next change this record (None: no timer needed;
    always None outside :data:`TIMED`)."""
    if record.state is State.SUSPECT:
        if record.kdump_at is not None and kdump_proof(record, policy,
                                                        record.kdump_at):
            return record.kdump_at
        due = fence_at(record, policy)
        if due is not None and agent.silent_suspect(record):
            if agent.refuted(record, policy):
                return None         # the next heartbeat settles it
            due = agent.due_at(record, policy, due)
        if due is not None and dump_holds(record, due, policy):
            # The power-off waits for the dump: messages stop, or it has
            # run for max_dump_time.
            kdump_at = record.kdump_at
            assert kdump_at is not None     # a dump holds: a message came
            first = record.kdump_first_at or kdump_at
            due = min(kdump_at + policy.kdump_timeout,
                      first + policy.kdump_max_dump)
        return due
    if record.state in (State.PENDING, State.RECOVERING):
        return record.retry_at
    if record.state is State.SUSPENDED:
        return record.until
    return None
