"""Host states, and the actions: each declared once (:data:`ACTIONS`)."""

from __future__ import annotations

import dataclasses
import enum
from typing import (TYPE_CHECKING, Callable, Dict, FrozenSet, Optional,
                    Tuple)

from instanceha.events import EventKind as E
from instanceha.fsm import agent

if TYPE_CHECKING:
    # For annotations only: the record and the settings import this module.
    from instanceha.fsm.record import HostRecord
    from instanceha.fsm.settings import Policy


class State(str, enum.Enum):
    ACTIVE = "active"            # enabled, heartbeating
    SUSPECT = "suspect"          # heartbeat lost; grace period, kdump window open
    FENCING = "fencing"          # power-off requested; waiting for BMC Off
    FENCED = "fenced"            # proven dead (BMC Off or kdump); isolating in Nova
    EVACUATING = "evacuating"    # forced down + disabled; evacuations in flight
    EVACUATED = "evacuated"      # every evacuable server rebuilt elsewhere
    PENDING = "pending"          # evacuation waits for capacity; retried later
    FAILED = "failed"            # needs an operator; nothing automatic happens
    RECOVERING = "recovering"    # host back; waiting for Nova's cleanup to complete
    MAINTENANCE = "maintenance"  # operator: planned work; heartbeat loss ignored
    SUSPENDED = "suspended"      # operator: hands off (optionally until a time)
    DRAINING = "draining"        # operator: live host disabled, servers migrating off
    UNDRAINING = "undraining"    # drain cancelled or ended: aborting, re-enabling
    DECOMMISSIONING = "decommissioning"  # drained: service deleted, aggregates left
    DECOMMISSIONED = "decommissioned"  # drained for good; heartbeat loss ignored
    FAILING_BACK = "failing_back"  # back in service: the drained servers move back


class Action(str, enum.Enum):
    FENCE = "fence"                  # power off through the BMC, confirm Off
    ISOLATE = "isolate"              # force the service down and disable it
    EVACUATE = "evacuate"            # rebuild every evacuable server elsewhere
    CHECK_CLEANUP = "check_cleanup"  # migrations completed? then put host back
    DRAIN = "drain"                  # migrate every server off a live host
    UNDRAIN = "undrain"              # abort its migrations, re-enable it
    DECOMMISSION = "decommission"    # delete its compute service, leave aggregates
    FAIL_BACK = "fail_back"          # migrate the drained servers back to it
    REPAIR = "instance_repair"       # one server broken on a healthy host
    RESTART_COMPUTE = "restart_compute"  # ask a vetoed host's agent (soft fence)
    FAILOVER_CAPACITY = "failover_capacity"  # measure it (reads only)


#: States of a host being proven dead or having its servers moved: reads
#: of every BMC in the background (the fencing audit) give way to them.
URGENT_STATES = frozenset({State.SUSPECT, State.FENCING, State.FENCED,
                           State.EVACUATING})

#: States of a host instanceha leaves running untouched: its BMC reporting
#: Off while Nova reports the compute up says the inventory entry may point
#: at another machine. In every other state (being proven dead, fenced,
#: evacuated, failed, in maintenance ...) an Off may be instanceha's or an
#: operator's doing, and proves nothing about the entry (the audit).
RUNNING_STATES = frozenset({State.ACTIVE, State.DRAINING, State.UNDRAINING,
                            State.FAILING_BACK})

#: States of a host being proven dead: its events (and an active host's
#: news other than ROUTINE_NEWS) go ahead of evacuation passes, cleanup
#: checks and routine heartbeats in the engine's work queue.
PROVING_STATES = frozenset({State.SUSPECT, State.FENCING, State.FENCED})

#: What an active host hears that cannot start a proof of death: "still
#: heartbeating" (Nova's or its agent's) and "capacity appeared".
ROUTINE_NEWS = frozenset({E.HEARTBEAT_OK, E.AGENT_BEATING, E.CAPACITY})


def urgent(state: Optional[State], kind: E) -> bool:
    """Whether news of ``kind`` for a host in ``state`` (None: a host not
    known yet) goes in the work queue's urgent lane."""
    return (state is None or state in PROVING_STATES
            or (state is State.ACTIVE and kind not in ROUTINE_NEWS))

#: States in which instanceha has forced the compute service down.
ISOLATED_STATES = frozenset({State.EVACUATING, State.EVACUATED,
                             State.PENDING, State.RECOVERING})


def in_agent_veto(r: HostRecord) -> bool:
    """The agent's veto (fsm.agent): suspect because Nova lost
    nova-compute's heartbeat while the host's agent beats, so only
    nova-compute is down (never fenced while it lasts)."""
    return (r.state is State.SUSPECT and agent.vetoes(r)
            and not r.heartbeat_ok)


#: An action's attempts are journalled as the engine's action rows ...
ACTION_ROWS = "actions"
#: ... or as instance repair rows, one per request its pass sends.
REPAIR_ROWS = "instance_repairs"
#: no journal rows (work that reads and changes nothing)
NO_ROWS = "none"


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """One action, declared once: what starts it, its results, its lane,
    whether it runs in passes, its journal. The state machine and the
    engine read this; the engine binds each action to the function that
    runs it (engine.registry), and nothing else describes an action."""
    action: Action
    #: the state whose entry starts it. Re-entering the state (a retry,
    #: or a restart finding the host in it in the journal) starts it
    #: again, so every action is idempotent. None: work no host state
    #: starts: a condition of a host's record entered (``within``), or
    #: news about a server, whose subject travels in its carry (a retry
    #: goes on with that carry).
    started_by: Optional[State]
    #: the result event kinds it answers with; a result is the starting
    #: state's, in any other state it is stale
    results: Tuple[E, ...]
    #: its definitive answer when it keeps raising (None: it never gives
    #: up; it is retried with the key's back-off)
    gave_up: Optional[E]
    #: runs in the work queue's ordinary lane (long passes and checks),
    #: even for a host whose last news came through the urgent lane
    ordinary: bool = False
    #: runs in passes: called again with the carry of its last Requeue,
    #: also once the host has left the state that started it (so that
    #: what Nova already has is followed to the end and journalled)
    passes: bool = False
    #: the journal rows of its attempts: ACTION_ROWS (the engine writes
    #: one per attempt, with the transition that starts it) or
    #: REPAIR_ROWS (the pass writes one per request it sends)
    journal: str = ACTION_ROWS
    #: a condition of a host's record (with ``started_by`` None): the
    #: action starts on a transition into it (the new record satisfies
    #: it, the one before did not), not on entering a state; it is
    #: dropped when the condition no longer holds before it runs
    within: Optional[Callable[[HostRecord], bool]] = None
    #: the Policy flag (an option) without which it is never started
    enabled_by: Optional[str] = None
    #: it reads and changes nothing anywhere: the engine runs it whether
    #: this member may act or not, and the pass itself decides what a
    #: member that may not act does (a standby measures nothing)
    reads_only: bool = False

    @property
    def of_host(self) -> bool:
        """Its subject is a host's record (the engine's), not its carry:
        a state's entry or a condition of a host's record starts it."""
        return self.started_by is not None or self.within is not None

    @property
    def journal_kind(self) -> str:
        """Its name in the journal's action rows, its failpoints
        (before_action:<name>) and its log lines."""
        return self.action.value


#: Every action, once.
ACTIONS: Dict[Action, ActionSpec] = {s.action: s for s in (
    # In passes: a method that can only be waited for (a watchdog's
    # deadline) requeues the fencing instead of holding a worker.
    ActionSpec(Action.FENCE, State.FENCING,
               (E.FENCE_OK, E.FENCE_FAILED), E.FENCE_FAILED, passes=True),
    ActionSpec(Action.ISOLATE, State.FENCED,
               (E.ISOLATE_OK, E.ISOLATE_FAILED), E.ISOLATE_FAILED),
    ActionSpec(Action.EVACUATE, State.EVACUATING,
               (E.EVACUATE_OK, E.EVACUATE_NO_CAPACITY, E.EVACUATE_FAILED,
                E.REPROOF_FAILED), E.EVACUATE_FAILED,
               ordinary=True, passes=True),
    ActionSpec(Action.CHECK_CLEANUP, State.RECOVERING,
               (E.CLEANUP_CONFIRMED, E.CLEANUP_PENDING), E.CLEANUP_PENDING,
               ordinary=True),
    ActionSpec(Action.DRAIN, State.DRAINING,
               (E.DRAIN_OK, E.DRAIN_FAILED, E.DRAIN_CANCELLED),
               E.DRAIN_FAILED, ordinary=True, passes=True),
    ActionSpec(Action.UNDRAIN, State.UNDRAINING,
               (E.UNDRAIN_OK, E.UNDRAIN_FAILED), E.UNDRAIN_FAILED,
               ordinary=True, passes=True),
    ActionSpec(Action.DECOMMISSION, State.DECOMMISSIONING,
               (E.DECOMMISSION_OK, E.DECOMMISSION_FAILED),
               E.DECOMMISSION_FAILED, ordinary=True),
    ActionSpec(Action.FAIL_BACK, State.FAILING_BACK,
               (E.FAIL_BACK_OK, E.FAIL_BACK_FAILED, E.FAIL_BACK_CANCELLED),
               E.FAIL_BACK_FAILED, ordinary=True, passes=True),
    ActionSpec(Action.REPAIR, None, (), None, ordinary=True, passes=True,
               journal=REPAIR_ROWS),
    # Soft fencing: one signed request to the host's agent to restart
    # nova-compute, on entering the veto ([agent] restart_compute).
    ActionSpec(Action.RESTART_COMPUTE, None, (), None,
               within=in_agent_veto, enabled_by="restart_compute"),
    # Failover capacity (issue 38): a measure every [failover_capacity]
    # interval, reads only; started by the engine, its carry its subject.
    ActionSpec(Action.FAILOVER_CAPACITY, None, (), None, ordinary=True,
               passes=True, journal=NO_ROWS, reads_only=True),
)}

# What follows is read from ACTIONS, never written by hand.

#: The action a state starts on entry.
ENTRY_ACTION: Dict[State, Action] = {
    s.started_by: a for a, s in ACTIONS.items() if s.started_by is not None}

#: Actions started on a transition into a condition of a state.
WITHIN_ACTIONS: Tuple[ActionSpec, ...] = tuple(
    s for s in ACTIONS.values() if s.within is not None)

#: Actions that run in the work queue's ordinary lane.
ORDINARY_ACTIONS: FrozenSet[Action] = frozenset(
    a for a, s in ACTIONS.items() if s.ordinary)

#: Actions that run in passes.
PASS_ACTIONS: FrozenSet[Action] = frozenset(
    a for a, s in ACTIONS.items() if s.passes)

#: Action -> (its result kinds, its definitive answer when it keeps raising).
RESULTS: Dict[Action, Tuple[Tuple[E, ...], Optional[E]]] = {
    a: (s.results, s.gave_up) for a, s in ACTIONS.items()}

#: Every result kind.
RESULT_KINDS = frozenset(k for kinds, _ in RESULTS.values() for k in kinds)

#: Result kind -> the states whose entry action produces it.
RESULT_STATES = {
    kind: tuple(s for s, a in ENTRY_ACTION.items() if a is action)
    for action, (kinds, _) in RESULTS.items() for kind in kinds}


def gave_up_kind(action: Action) -> Optional[E]:
    """The result kind for an action that kept raising (None: it never
    gives up)."""
    return ACTIONS[action].gave_up


def entered(old: HostRecord, new: HostRecord,
            policy: Policy) -> Tuple[Action, ...]:
    """The actions a step from ``old`` to ``new`` (a change of state or
    reason) starts by entering a condition of a state (WITHIN_ACTIONS),
    each only while the Policy flag it is enabled by is set."""
    if new.state is old.state and new.reason == old.reason:
        return ()
    started = []
    for s in WITHIN_ACTIONS:
        cond = s.within
        if cond is None or (s.enabled_by is not None
                            and not getattr(policy, s.enabled_by)):
            continue
        if cond(new) and not cond(old):
            started.append(s.action)
    return tuple(started)


def wanted(action: Action, rec: HostRecord) -> bool:
    """Does ``rec`` still ask for ``action`` as it is about to run: its
    state's entry action, or the condition that started it still holds?"""
    cond = ACTIONS[action].within
    if cond is not None:
        return cond(rec)
    return ENTRY_ACTION.get(rec.state) is action
