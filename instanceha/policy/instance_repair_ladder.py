"""Instance repair's action ladder, its limit and its success check; pure.

:func:`next_action` gives the next :class:`Action` for a broken server, or
a :class:`Refusal` saying why none; :func:`judge` says how one
:class:`Attempt` went (the action's timeout, then the minimum uptime).
``now`` is an argument; nothing reads a clock.
"""

import dataclasses
from typing import Callable, Iterable, List, Optional, Sequence, Union

from instanceha.policy.instance_repair_settings import (ACCEPTS, ACTIONS,
                                                        COLD_MIGRATE, DOES,
                                                        NEEDS, REBUILD,
                                                        Settings)
from instanceha.policy.repair import RepairDecision
from instanceha.policy.repair_values import AnyLevel, Ladder

# -- an attempt's outcome ----------------------------------------------------
RUNNING = "running"
SUCCESS = "success"
FAILURE = "failure"
TIMEOUT = "timeout"
OUTCOMES = (RUNNING, SUCCESS, FAILURE, TIMEOUT)

# -- why no action -----------------------------------------------------------
#: [instance_repair] enabled is off
DISABLED = "disabled"
#: a suspension marker applies (repair levels' suspensions)
SUSPENDED = "suspended"
#: an attempt is still running (``until``: when it times out)
IN_PROGRESS = "in_progress"
#: Nova has a task in progress on the server
BUSY = "busy"
#: the next action needs a higher repair level, or rebuild's opt-in
#: (Ganeti's "enoperm"): the result marker says "not permitted"
NOT_PERMITTED = "not_permitted"
#: no action of the ladder applies to the server's vm_state
NOT_APPLICABLE = "not_applicable"
#: max_repairs reached within the window, or every action tried, or the
#: server carries the failure marker: nothing more until an operator
#: clears it
FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One repair action sent for a server (a journal row)."""
    action: str
    started_at: float
    ended_at: Optional[float] = None
    outcome: str = RUNNING

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError("outcome %r is none of %s" % (
                self.outcome, ", ".join(OUTCOMES)))


#: how an attempt went, as the ladder counts it (see next_action)
Outcome = Callable[[Attempt], str]


@dataclasses.dataclass(frozen=True)
class Action:
    """What to do now."""
    name: str                    # start | hard_reboot | cold_migrate | rebuild
    #: its place in this episode (1: the first action since the server
    #: last recovered)
    step: int
    #: seconds for it to bring the server ACTIVE, then seconds ACTIVE
    #: before it counts as a success
    timeout: float
    min_uptime: float
    #: the repair level it needs
    needs: Ladder
    #: it needs room on another host (wait for capacity if none)
    moves: bool
    #: a running attempt past its deadline: record it as timed out first
    closes: Optional[Attempt]
    reason: str


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why no action now."""
    kind: str
    reason: str
    #: IN_PROGRESS: when the running attempt times out; SUSPENDED: when
    #: the suspension ends (None: until removed)
    until: Optional[float] = None
    #: NOT_PERMITTED: the action refused
    action: Optional[str] = None
    #: a running attempt past its deadline: record it as timed out
    closes: Optional[Attempt] = None


def deadline(attempt: Attempt, s: Settings) -> float:
    """When a running attempt counts as timed out: its action's timeout
    plus the minimum uptime."""
    return attempt.started_at + s.action_timeout + s.min_uptime


def judge(attempt: Attempt, status: Optional[str],
          active_since: Optional[float], now: float, s: Settings) -> str:
    """How a running attempt stands at ``now``, from the server's Nova
    status (ACTIVE, SHUTOFF, ERROR, HARD_REBOOT, VERIFY_RESIZE...) and
    when it was last seen becoming ACTIVE since the attempt started
    (None: not yet). SUCCESS once ACTIVE for ``min_uptime`` seconds;
    FAILURE when it is in ERROR, or went down again after being ACTIVE;
    TIMEOUT when it was not ACTIVE within ``action_timeout``; else
    RUNNING."""
    if attempt.outcome != RUNNING:
        return attempt.outcome
    if status == "ERROR":
        return FAILURE
    if status == "ACTIVE":
        # (ACTIVE without active_since: seen ACTIVE for the first time
        # now; the caller records when.)
        if active_since is not None and now - active_since >= s.min_uptime:
            return SUCCESS
        return RUNNING
    if active_since is not None and status in ("SHUTOFF", "PAUSED",
                                               "SUSPENDED"):
        return FAILURE                   # up, then down again
    if now - attempt.started_at > s.action_timeout:
        return TIMEOUT
    return RUNNING


def _level_of(level: Union[AnyLevel, int, RepairDecision]) -> int:
    if isinstance(level, RepairDecision):
        return int(level.level)
    return int(level)


def _label(rank: int) -> str:
    try:
        return Ladder(rank).label
    except ValueError:
        return str(rank)


def next_action(history: Iterable[Attempt], settings: Settings,
                level: Union[AnyLevel, int, RepairDecision], *, now: float,
                vm_state: Optional[str], task_state: Optional[str] = None,
                marked_failed: bool = False) -> Union[Action, Refusal]:
    """The next repair action for a broken server, or why none.

    ``history``: the server's attempts since an operator last cleared it
    (any order; those older than ``window`` are ignored). ``level``: its
    repair level, or the whole :class:`RepairDecision` (whose suspension
    then counts too). ``vm_state``/``task_state``: the server's now (the
    actions Nova accepts depend on them). ``marked_failed``: it carries
    the failure marker.

    The ladder: after the server's last success (or from the start of the
    window), each action that ended in failure or timeout moves it one
    step up ``settings.actions``; an action Nova would refuse in the
    server's vm_state is stepped over. At most ``max_repairs`` actions
    within ``window``; one more needed, or a ladder tried to its end,
    means FAILED.
    """
    s = settings
    refused = _standing_refusal(s, level, marked_failed)
    if refused is not None:
        return refused
    rank = _level_of(level)
    recent: List[Attempt] = sorted(
        (a for a in history if a.started_at > now - s.window),
        key=lambda a: a.started_at)
    closes = None
    running = [a for a in recent if a.outcome == RUNNING]
    if running:
        last = running[-1]
        if now < deadline(last, s):
            return Refusal(IN_PROGRESS, "%s sent at %.0f is still running"
                           % (last.action, last.started_at),
                           until=deadline(last, s))
        closes = last
    if task_state is not None:
        return Refusal(BUSY, "Nova has task %s in progress on the server"
                       % task_state, closes=closes)

    def outcome(a: Attempt) -> str:
        return TIMEOUT if a is closes else a.outcome

    if len(recent) >= s.max_repairs:
        return Refusal(FAILED, "%d repair action(s) within %.0f s (%s), "
                       "[instance_repair] max_repairs is %d: marked failed "
                       "until an operator clears it" % (
                           len(recent), s.window, _tried(recent, outcome),
                           s.max_repairs), closes=closes)
    successes = [i for i, a in enumerate(recent) if outcome(a) == SUCCESS]
    episode = recent[successes[-1] + 1:] if successes else recent
    failed = [a for a in episode if outcome(a) in (FAILURE, TIMEOUT)]
    floor = -1
    if failed:
        last_failed = failed[-1]
        floor = (ACTIONS.index(last_failed.action)
                 if last_failed.action in ACTIONS else len(ACTIONS))
    ahead = [a for a in s.actions if ACTIONS.index(a) > floor]
    fits = [a for a in ahead if vm_state in ACCEPTS[a]]
    if not fits:
        if failed:
            return Refusal(FAILED, "every action of the ladder (%s) was "
                           "tried: %s; marked failed until an operator "
                           "clears it" % (", ".join(s.actions),
                                          _tried(failed, outcome)),
                           closes=closes)
        return Refusal(NOT_APPLICABLE, "no action of the ladder (%s) applies "
                       "to a server in vm_state %s" % (
                           ", ".join(s.actions), vm_state), closes=closes)
    return _step(fits[0], rank, s, failed, ahead, vm_state, outcome, closes)


def _standing_refusal(s: Settings,
                      level: Union[AnyLevel, int, RepairDecision],
                      marked_failed: bool) -> Optional[Refusal]:
    """Why no action at all, whatever the history says, or None."""
    if not s.enabled:
        return Refusal(DISABLED, "instance repair is off ([instance_repair] "
                       "enabled = false)")
    if marked_failed:
        return Refusal(FAILED, "marked failed by an earlier repair; nothing "
                       "more until an operator clears it (instanceha repair "
                       "--clear SERVER)")
    if isinstance(level, RepairDecision) and level.suspended:
        return Refusal(SUSPENDED, level.reason, until=level.until)
    return None


def _tried(attempts: Iterable[Attempt], outcome: Outcome) -> str:
    return ", ".join("%s: %s" % (a.action, outcome(a)) for a in attempts)


def _step(name: str, rank: int, s: Settings, failed: Sequence[Attempt],
          ahead: List[str], vm_state: Optional[str], outcome: Outcome,
          closes: Optional[Attempt]) -> Union[Action, Refusal]:
    """The Action ``name``, the ladder's next step, or why the server's
    level or the settings do not permit it."""
    needs = NEEDS[name]
    if name == REBUILD and not s.allow_rebuild:
        return Refusal(NOT_PERMITTED, "rebuild needs [instance_repair] "
                       "allow_rebuild = true", action=name, closes=closes)
    if rank < needs:
        return Refusal(NOT_PERMITTED, "%s (%s) needs repair level %s; the "
                       "server's is %s" % (name, DOES[name], needs.label,
                                           _label(rank)), action=name,
                       closes=closes)
    if failed:
        why = "%s after %s" % (name, _tried(failed, outcome))
    else:
        why = "%s: first action" % name
    skipped = ahead[:ahead.index(name)]
    if skipped:
        why += " (%s not accepted by Nova in vm_state %s)" % (
            ", ".join(skipped), vm_state)
    return Action(name=name, step=len(failed) + 1, timeout=s.action_timeout,
                  min_uptime=s.min_uptime, needs=needs,
                  moves=name == COLD_MIGRATE, closes=closes, reason=why)
