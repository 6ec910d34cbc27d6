"""The function that runs each action.

Everything else about an action (what starts it, its results, its lane,
whether it runs in passes, its journal name) is declared once in
:data:`instanceha.fsm.states.ACTIONS`; this binds each declared action to
its runner: ``(ctx, record) -> Event``, or for one that runs in passes
``(ctx, record, carry) -> Event | Requeue``
(:mod:`instanceha.engine.passes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Optional, Protocol, Union

from instanceha.engine import (actions, drain, evacuator, failover, putback,
                               repair, soft_fence)
from instanceha.fsm.states import ACTIONS, Action, ActionSpec

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.passes import Carry, Done, Requeue
    from instanceha.events import Event

    #: What one run (one pass) of an action answers: its result event,
    #: a Requeue (not finished), Done (finished with nothing for the
    #: state machine) or None (work that ended without a result).
    Outcome = Optional[Union[Event, Requeue, Done]]


class Subject(Protocol):
    """What an action runs for: a host's record, or for work no host
    state starts its carry (repair.CaseWork); log lines name it."""
    @property
    def name(self) -> str: ...


#: Action -> its runner: ``(ctx, record)`` or ``(ctx, record, carry)``,
#: their record and carry types each runner's own.
RUNNERS: Dict[Action, Callable[..., Outcome]] = {
    Action.FENCE: actions.fence,
    Action.ISOLATE: actions.isolate,
    Action.EVACUATE: evacuator.evacuate,
    Action.CHECK_CLEANUP: actions.check_cleanup,
    Action.DRAIN: drain.drain,
    Action.UNDRAIN: putback.undrain,
    Action.DECOMMISSION: putback.decommission,
    Action.FAIL_BACK: putback.fail_back,
    Action.REPAIR: repair.run_case,
    Action.RESTART_COMPUTE: soft_fence.restart_compute,
    Action.FAILOVER_CAPACITY: failover.run_pass,
}

if set(RUNNERS) != set(ACTIONS):      # pragma: no cover - a coding error
    raise ImportError("actions declared without a runner, or runners of "
                      "undeclared actions: %s" % sorted(
                          a.value for a in set(RUNNERS) ^ set(ACTIONS)))


def spec(action: Action) -> ActionSpec:
    """What is declared of ``action`` (fsm.states.ACTIONS)."""
    return ACTIONS[action]


def run(action: Action, ctx: Context, record: Subject,
        carry: Optional[Carry] = None) -> Outcome:
    """Run one action (one pass of it): its result event, or a Requeue."""
    if carry is not None:
        return RUNNERS[action](ctx, record, carry)
    return RUNNERS[action](ctx, record)
