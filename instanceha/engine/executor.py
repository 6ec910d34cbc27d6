"""Run one attempt of an action (one pass of it) and say what comes next.

The engine decides *whether* an action runs (its state still asks for
it, this process may act, the attempt has its journal row); this module
runs it and turns what happened into one of four answers, which the
engine applies to the host's inbox and the work queue:

* :class:`Finished` -- a result event for the state machine (the action's
  own, or the definitive answer for one that kept raising), with the
  journal update that finishes the attempt (None: already journalled);
  its event None for work that ends without one (an instance repair
  case closed, a soft fencing request: its row finished here);
* :class:`Again` -- the action is not finished (a Requeue): its next pass
  after a delay, sooner when news of a server it waits for comes;
* :class:`Retry` -- it raised something a retry may cure: run again after
  the key's back-off (given up after ``[DEFAULT] action_retries`` for an
  action with a give-up answer, never for one without);
* :class:`Held` -- the fencing gate closed between the decision and the
  power-off: nothing was powered off; run again after a tick without
  using up the retry budget.
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Callable, Counter, FrozenSet,
                    NamedTuple, Optional, Tuple, Union)

import structlog

from instanceha import failpoints
from instanceha.engine import actions as actions_mod
from instanceha.engine.passes import Done, Requeue
from instanceha.events import Event
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import ACTIONS, Action

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.inbox import Finish
    from instanceha.engine.journal_health import JournalHealth
    from instanceha.engine.passes import Carry
    from instanceha.engine.registry import Outcome, Subject

LOG = structlog.get_logger("instanceha.engine")

class Finished(NamedTuple):
    event: Optional[Event]
    finish: Optional[Finish]


class Again(NamedTuple):
    after: float
    carry: Optional[Carry]
    waits_for: Optional[FrozenSet[str]]


class Retry(NamedTuple):
    error: Exception


class Held(NamedTuple):
    delay: float
    why: str


#: what :func:`attempt` answers
Answer = Union[Finished, Again, Retry, Held]


def attempt(ctx: Context, conf: Any, stats: Counter[Tuple[str, ...]],
            journal_health: JournalHealth, rec: Subject, action: Action,
            action_id: Optional[int], started: float,
            carry: Optional[Carry], failures: int,
            run: Callable[[Action, Context, Subject, Optional[Carry]],
                          Outcome]) -> Answer:
    """Run ``action`` for ``rec`` with ``run(action, ctx, rec, carry)``
    (engine.registry.run; ``rec``: the host's record, or for work no
    host state starts its carry; ``carry``: the previous pass's, None for
    a first pass; ``failures``: how many attempts in a row raised before
    this one). Returns Finished (its event None: work that ended without
    a result for the state machine), Again, Retry or Held."""
    spec = ACTIONS[action]
    try:
        failpoints.hit("before_action:" + spec.journal_kind)
        result = run(action, ctx, rec, carry)
        if isinstance(result, Requeue):
            return Again(result.after, result.carry, result.waits_for)
        failpoints.hit("after_action:" + spec.journal_kind)
    except actions_mod.FenceHeld as e:
        why = str(e)
        stats[("action", action.value, "held")] += 1
        finish(ctx, journal_health, rec, action, action_id, "held", why)
        delay = max(conf.detection.tick_interval, 1.0)
        LOG.warning("fence_held", host=rec.name, action=action.value,
                    retry_in=delay, reason=why)
        return Held(delay, why)
    except Exception as e:
        stats[("action", action.value, "error")] += 1
        error = "%s: %s" % (type(e).__name__, e)
        finish(ctx, journal_health, rec, action, action_id, "error", error)
        if spec.gave_up is not None and failures + 1 >= conf.action_retries:
            # Bounded: give the state machine a definitive answer.
            LOG.error("action_given_up", host=rec.name, action=action.value,
                      attempts=conf.action_retries, reason=error)
            # Only an action a host's state starts has a give-up answer.
            assert isinstance(rec, HostRecord)
            return Finished(actions_mod.give_up(ctx, rec, action, error,
                                                conf.action_retries), None)
        return Retry(e)
    if result is None:
        stats[("action", action.value, "done")] += 1
        return Finished(None, None)
    if isinstance(result, Done):
        # Nothing for the state machine: its row is finished here.
        stats[("action", action.value, result.outcome)] += 1
        finish(ctx, journal_health, rec, action, action_id, result.outcome,
               result.detail)
        LOG.info("action_finished", host=rec.name, action=action.value,
                 outcome=result.outcome,
                 seconds=round(ctx.clock() - started, 3),
                 reason=result.detail)
        return Finished(None, None)
    stats[("action", action.value, result.kind.value)] += 1
    LOG.info("action_finished", host=rec.name, action=action.value,
             outcome=result.kind.value,
             seconds=round(ctx.clock() - started, 3), reason=result.reason)
    # Its finish is journalled with the transition it causes.
    return Finished(result, (action_id, ctx.clock(), result.kind.value,
                             result.reason))


def finish(ctx: Context, journal_health: JournalHealth, rec: Subject,
           action: Action, action_id: Optional[int], outcome: str,
           text: str) -> None:
    """Journal an attempt's end; a failed write is logged and marks the
    journal degraded, it never hides the action's own outcome. An
    action with no row of its own (its pass journals its requests) has
    nothing to finish."""
    if action_id is None:
        return
    try:
        ctx.journal.action_finished(action_id, ctx.clock(), outcome, text)
    except Exception as je:
        LOG.error("journal_write_failed", host=rec.name,
                  action=action.value, reason=str(je))
        journal_health.note(je)
