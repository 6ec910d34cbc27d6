"""The acting member's writes, guarded: every method that changes Nova,
Placement, a BMC, an agent or the journal asks
:meth:`instanceha.coordination.membership.Membership.may_act` right
before each call, so a member that was frozen for longer than its lease
does nothing when it wakes.

Which methods are writes is not a list kept here: each interface marks
its write methods (:func:`instanceha.util.writes.write`) and the guard
takes :func:`~instanceha.util.writes.writes_of` the interface and of the
object it wraps. tests/unit/test_guard_writes.py fails for a public
method of an interface that is neither marked nor named as a read.
"""

from instanceha.drivers.compute.base import ComputeDriver, ComputeError
from instanceha.drivers.fencing.base import FenceError, FencingDriver
from instanceha.journal import Journal
from instanceha.util.writes import writes_of

#: Compute driver methods that change the cloud (Nova, Placement).
COMPUTE_WRITES = writes_of(ComputeDriver)
#: Fencing driver methods that change a host's power.
FENCE_WRITES = writes_of(FencingDriver)
#: Journal methods that record a decision (the acting member's alone).
JOURNAL_WRITES = writes_of(Journal)


class NotActingCompute(ComputeError):
    """A compute write refused: this member may not act now."""


class NotActingFence(FenceError):
    """A power action refused: this member may not act now."""


class NotActingJournal(Exception):
    """A journal write refused: this member may not act now."""


class NotActingAgent(Exception):
    """A request to a host's agent refused: this member may not act
    now."""


class Guard:
    """Forward everything to ``target``; a method named in ``writes`` or
    marked as a write on ``target``'s class asks ``may_act()`` right
    before the call and raises ``error`` with its reason instead of
    calling."""

    def __init__(self, target, may_act, writes, error):
        self._target = target
        self._may_act = may_act
        # The interface's writes, and those of the object's own class (a
        # driver's method beyond the interface): a stand-in that is no
        # subclass (the Nova stand-in while the start waits) still has
        # the interface's.
        self._writes = frozenset(writes) | writes_of(type(target))
        self._error = error

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if name not in self._writes or not callable(value):
            return value
        may_act, error = self._may_act, self._error

        def guarded(*args, **kwargs):
            why = may_act()
            if why is not None:
                raise error("%s refused: %s" % (name, why))
            return value(*args, **kwargs)
        guarded.__name__ = name
        return guarded


def guard_compute(compute, may_act):
    return Guard(compute, may_act, COMPUTE_WRITES, NotActingCompute)


def guard_fencer(factory, may_act):
    """A fencer factory whose drivers' power actions are guarded."""
    def make(name):
        return Guard(factory(name), may_act, FENCE_WRITES, NotActingFence)
    return make


def guard_journal(journal, may_act):
    return Guard(journal, may_act, JOURNAL_WRITES, NotActingJournal)


def guard_agent_requests(sender, may_act):
    """The sender of requests to the hosts' agents (the heartbeat source:
    soft fencing's restart of nova-compute), its marked methods guarded."""
    return Guard(sender, may_act, (), NotActingAgent)
