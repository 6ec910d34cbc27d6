"""The acting member's writes, guarded: the compute and fencing drivers'
methods that change the cloud and the journal's methods that record a
decision ask :meth:`instanceha.coordination.membership.Membership.may_act`
right before each call, so a member that was frozen for longer than its
lease does nothing when it wakes."""

from instanceha.drivers.compute.base import ComputeError
from instanceha.drivers.fencing.base import FenceError

#: Compute driver methods that change the cloud.
COMPUTE_WRITES = frozenset({
    "force_down", "restore", "evacuate", "stop_server", "reset_state",
    "enable_service", "disable_service", "delete_server_metadata",
    "unset_aggregate_metadata"})
#: Fencing driver methods that change a host's power.
FENCE_WRITES = frozenset({"power_off", "power_on"})
#: Journal methods that record a decision (the acting member's alone).
JOURNAL_WRITES = frozenset({
    "record", "record_transition", "action_started", "action_finished",
    "evacuation_requested", "evacuation_finished",
    "stale_rebuild_suspected", "stale_rebuild_resolved", "reserved_taken",
    "reserved_returned", "evidence_saved"})


class NotActingCompute(ComputeError):
    """A compute write refused: this member may not act now."""


class NotActingFence(FenceError):
    """A power action refused: this member may not act now."""


class NotActingJournal(Exception):
    """A journal write refused: this member may not act now."""


class Guard:
    """Forward everything to ``target``; a method named in ``writes`` asks
    ``may_act()`` right before the call and raises ``error`` with its
    reason instead of calling."""

    def __init__(self, target, may_act, writes, error):
        self._target = target
        self._may_act = may_act
        self._writes = writes
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
