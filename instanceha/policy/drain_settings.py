"""The drain's settings (:class:`Settings`, from ``[drain]``) and its
words; pure."""

import dataclasses
from typing import Any, Tuple

from instanceha.policy import order
from instanceha.policy.capacity_need import int_or_none

#: how a server leaves the host being drained (:class:`~instanceha.policy.
#: drain.Step`'s ``how``)
LIVE = "live"           # live-migrated (ACTIVE, PAUSED)
COLD = "cold"           # cold-migrated, then confirmed (SHUTOFF)
CONFIRM = "confirm"     # a resize/migration waiting to be confirmed
WAIT = "wait"           # a migration, resize or other task in progress
DEFER = "defer"         # ERROR: not moved, last, reported
LEAVE = "leave"         # not moved: opted out, cannot move, shutoff=leave
HOWS = (LIVE, COLD, CONFIRM, WAIT, DEFER, LEAVE)
#: the ``how`` that move a server off the host
MOVES = (LIVE, COLD, CONFIRM)

#: [drain] shutoff
MIGRATE = "migrate"
SHUTOFF_MODES = (MIGRATE, LEAVE)

#: [drain] stuck_action
ABORT = "abort"
FORCE_COMPLETE = "force_complete"
STUCK_ACTIONS = (ABORT, FORCE_COMPLETE)

#: [drain] live_blockers
PCI = "pci"
VGPU = "vgpu"
ACCELERATOR = "accelerator"
VTPM = "vtpm"
BLOCKERS = (PCI, VGPU, ACCELERATOR, VTPM)

DEFAULT_OPT_OUT_TAG = "instanceha:no-drain"


def _positive(name: str, value: object, low: int) -> None:
    n = int_or_none(value)
    if n is None or n < low:
        raise ValueError("%s must be an integer >= %d, not %r"
                         % (name, low, value))


@dataclasses.dataclass(frozen=True)
class Settings:
    #: migrations in flight per drained host
    concurrency: int = 2
    #: migrations in flight across every drained host
    max_concurrent: int = 4
    #: SHUTOFF servers: ``migrate`` (cold, then confirmed) or ``leave``
    shutoff: str = MIGRATE
    #: server tag (or metadata key set to true) that keeps a server put
    opt_out_tag: str = DEFAULT_OPT_OUT_TAG
    #: after the drain, the hosts left must absorb the loss of their N
    #: largest; 0: no HA admission check
    ha_reserve_hosts: int = 1
    #: seconds without progress before a migration is stuck
    stuck_timeout: int = 300
    #: ``abort`` or ``force_complete`` a stuck live migration
    stuck_action: str = ABORT
    #: tries again after a stuck migration before the server is left
    stuck_retries: int = 2
    #: what makes a running server not live-migratable, a subset of
    #: BLOCKERS
    live_blockers: Tuple[str, ...] = BLOCKERS
    #: the servers' priority ([recovery] priority_key, priority_sources)
    priority: order.Settings = order.Settings()
    #: seconds between two passes of a drain (the engine's)
    poll_interval: int = 5

    def __post_init__(self) -> None:
        _positive("concurrency", self.concurrency, 1)
        _positive("max_concurrent", self.max_concurrent, 1)
        _positive("ha_reserve_hosts", self.ha_reserve_hosts, 0)
        _positive("stuck_timeout", self.stuck_timeout, 1)
        _positive("stuck_retries", self.stuck_retries, 0)
        _positive("poll_interval", self.poll_interval, 1)
        if self.shutoff not in SHUTOFF_MODES:
            raise ValueError("shutoff must be one of %s, not %r" % (
                ", ".join(SHUTOFF_MODES), self.shutoff))
        if self.stuck_action not in STUCK_ACTIONS:
            raise ValueError("stuck_action must be one of %s, not %r" % (
                ", ".join(STUCK_ACTIONS), self.stuck_action))
        tag = self.opt_out_tag
        if not isinstance(tag, str) or not tag or tag != tag.strip() \
                or "/" in tag or "," in tag or len(tag) > 60:
            raise ValueError("opt_out_tag must be a Nova server tag (1 to "
                             "60 characters, no '/' or ',', no blanks "
                             "around it), not %r" % (tag,))
        unknown = [b for b in self.live_blockers if b not in BLOCKERS]
        if unknown:
            raise ValueError("unknown live blocker(s) %s; known: %s" % (
                ", ".join(map(repr, unknown)), ", ".join(BLOCKERS)))
        object.__setattr__(self, "live_blockers", tuple(
            b for b in BLOCKERS if b in self.live_blockers))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        """From ``[drain]``, with the priority of ``[recovery]``."""
        d = conf.drain
        return cls(concurrency=d.concurrency,
                   max_concurrent=d.max_concurrent, shutoff=d.shutoff,
                   opt_out_tag=d.opt_out_tag,
                   ha_reserve_hosts=d.ha_reserve_hosts,
                   stuck_timeout=d.stuck_timeout,
                   stuck_action=d.stuck_action,
                   stuck_retries=d.stuck_retries,
                   live_blockers=tuple(d.live_blockers),
                   priority=order.Settings.from_conf(conf),
                   poll_interval=d.poll_interval)
