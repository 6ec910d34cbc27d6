"""The function that runs each action.

Everything else about an action (what starts it, its results, its lane,
whether it runs in passes, its journal name) is declared once in
:data:`instanceha.fsm.states.ACTIONS`; this binds each declared action to
its runner: ``(ctx, record) -> Event``, or for one that runs in passes
``(ctx, record, carry) -> Event | Requeue``
(:mod:`instanceha.engine.passes`).
"""

from typing import Any, Callable, Dict

from instanceha.engine import (actions, drain, evacuator, failover, putback,
                               repair, soft_fence)
from instanceha.fsm.states import ACTIONS, Action, ActionSpec

#: Action -> its runner.
RUNNERS: Dict[Action, Callable[..., Any]] = {
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


def run(action, ctx, record, carry=None):
    """Run one action (one pass of it): its result event, or a Requeue."""
    if carry is not None:
        return RUNNERS[action](ctx, record, carry)
    return RUNNERS[action](ctx, record)
