"""The guards of the transition table: ``(record, event, policy) -> bool``.

:data:`GUARDS` maps each guard name used in :mod:`instanceha.fsm.table` to
its predicate; the helpers above it say when fencing is due, whether a
dump is running or proves death, whether the host really came back.
Pure: time comes from ``event.at`` (or the ``now`` given), settings from
:class:`instanceha.fsm.settings.Policy`.
"""

import dataclasses
from typing import Callable, Dict, Optional

from instanceha.events import (Event, EvacuationSummary, Fenced,
                               ServiceReport)
from instanceha.fsm import agent, table
from instanceha.fsm.record import HostRecord
from instanceha.fsm.settings import Policy

#: A guard: does the rule apply to this record, event and policy?
Guard = Callable[[HostRecord, Event, Policy], bool]


def fence_at(r: HostRecord, p: Policy) -> Optional[float]:
    """When fencing becomes due: the grace period after the loss, or after
    the end of a resumed host's boot time (``hold_until``)."""
    if r.lost_at is None:
        return None
    delay = agent.grace(r, p)
    if p.kdump_enabled:
        delay = max(delay, p.kdump_fence_delay)
    if _power_proof(r, p):
        delay = 0.0          # no late heartbeat, no dump from a host Off
    start = r.lost_at
    if r.hold_until is not None:
        start = max(start, r.hold_until)
    return start + delay


def _dump_seen(r: HostRecord, p: Policy) -> bool:
    """A kdump message arrived after the host was last seen alive."""
    return (p.kdump_enabled and r.kdump_at is not None
            and (r.ok_at is None or r.kdump_at > r.ok_at))


def dumping(r: HostRecord, now: float, p: Policy) -> bool:
    """The host is running its dump kernel: a message came after it was
    last seen alive, less than kdump_timeout before ``now``."""
    kdump_at = r.kdump_at       # not None once a dump is seen
    return (_dump_seen(r, p) and kdump_at is not None
            and now - kdump_at < p.kdump_timeout)


def _dump_overdue(r: HostRecord, now: float, p: Policy) -> bool:
    """The dump has run longer than [kdump] max_dump_time."""
    first = r.kdump_first_at if r.kdump_first_at is not None else r.kdump_at
    return first is not None and now - first >= p.kdump_max_dump


def dump_holds(r: HostRecord, now: float, p: Policy) -> bool:
    """A dump in progress holds the power-off (it would destroy the dump),
    but never longer than max_dump_time."""
    return dumping(r, now, p) and not _dump_overdue(r, now, p)


def kdump_proof(r: HostRecord, p: Policy, now: float) -> bool:
    """Only with [kdump] action = evacuate (a trusted kdump network): a
    kdump message that arrived after the heartbeat was lost (and after the
    host was last seen alive), not longer than kdump_timeout before
    ``now``, counts as proof of death without a power-off."""
    return (p.kdump_enabled and p.kdump_action == "evacuate"
            and not r.heartbeat_ok and r.lost_at is not None
            and r.kdump_at is not None and r.kdump_at >= r.lost_at
            and (r.ok_at is None or r.kdump_at > r.ok_at)
            and now - r.kdump_at <= p.kdump_timeout)


def _power_proof(r: HostRecord, p: Policy) -> bool:
    """Two independent witnesses of death: Nova's heartbeat is lost and
    the host's BMC reports power Off. Either alone is not enough: a BMC
    entry may point at another machine (the audit flags that), and a lost
    heartbeat may come back within the grace period."""
    return (p.power_evidence and r.power_off_at is not None
            and not r.heartbeat_ok and r.lost_at is not None)


def _fence_due(r: HostRecord, ev: Event, p: Policy) -> bool:
    due = fence_at(r, p)
    if due is None or ev.at < due or r.heartbeat_ok:
        return False
    return _power_proof(r, p) or not dump_holds(r, ev.at, p)


def agent_fence_due(r: HostRecord, ev: Event, p: Policy) -> bool:
    """Suspect on its agent's silence alone (Nova still says up): the
    grace period is over and the silence is corroborated."""
    due = fence_at(r, p)
    return (agent.silent_suspect(r) and due is not None and ev.at >= due
            and agent.corroborated(r, p)
            and not dump_holds(r, ev.at, p))


def _within_grace(r: HostRecord, ev: Event, p: Policy) -> bool:
    """A heartbeat back before fencing would have been due: within the
    grace period (or a dump's delay, a resumed host's boot time) counted
    from the loss (the report has cleared ``lost_at`` unless the agent's
    silence set it: then from the moment the host turned suspect)."""
    start = r.lost_at if r.lost_at is not None else r.since
    due = fence_at(dataclasses.replace(r, lost_at=start), p)
    return due is None or ev.at < due


def _flapping(r: HostRecord, ev: Event, p: Policy) -> bool:
    """Lost flap_count times within flap_window (this loss included)."""
    return p.flap_count > 0 and sum(
        1 for t in r.losses if ev.at - t <= p.flap_window) >= p.flap_count


def _disabled_hold(r: HostRecord, p: Policy) -> bool:
    return not p.recover_disabled_hosts and r.operator_disabled is not None


def _retry_due(r: HostRecord, ev: Event) -> bool:
    return not r.busy and r.retry_at is not None and ev.at >= r.retry_at


def _decision_due(r: HostRecord, ev: Event, p: Policy) -> bool:
    return (_fence_due(r, ev, p) or kdump_proof(r, p, ev.at)
            or agent_fence_due(r, ev, p))


def heartbeat_since_loss(r: HostRecord, ev: Event) -> bool:
    """The report's heartbeat is newer than the newest Nova showed when
    the host was lost: a row read before Nova noticed the loss (still
    fresh on the agent's or a kdump's word) does not bring it back."""
    report = ev.payload
    updated = (report.updated_at if isinstance(report, ServiceReport)
               else None)
    if r.lost_updated is None:
        return True
    return updated is not None and updated > r.lost_updated


def reported_after_fencing(r: HostRecord, ev: Event,
                           p: Optional[Policy]) -> bool:
    """The heartbeat is newer than the fencing and than instanceha's own
    write to the service: the host really came back.

    Right after a fast fence (kdump, external force-down) Nova's updated_at
    is still fresh from before the death, and Nova bumps updated_at on every
    PUT, our force-down included; neither must count as a return. The
    write's updated_at comes from Nova's own answer, on Nova's clock like
    the heartbeat, so no clock skew enters; it is cleared when a new
    fencing starts. Only before that write is the local fencing time used.
    """
    report = ev.payload
    return reported_after(r, report.updated_at
                          if isinstance(report, ServiceReport) else None)


def reported_after(r: HostRecord, updated_at: Optional[float]) -> bool:
    """Does a compute service's ``updated_at`` (on Nova's clock) prove the
    host came back after it was fenced? The one answer to "has the host
    returned?": the state machine asks it of each heartbeat, an
    evacuation pass of the service list it just read."""
    if updated_at is None:
        return False            # no timestamp: not a proof of return
    return updated_at > returned_floor(r)


def returned_floor(r: HostRecord) -> float:
    """The Nova updated_at a heartbeat must pass to prove a return."""
    if r.written_at is not None:
        return r.written_at
    return r.fenced_at if r.fenced_at is not None else float("-inf")


GUARDS: Dict[str, Guard] = {
    table.ALWAYS: lambda r, ev, p: True,
    "kdump_enabled": lambda r, ev, p: p.kdump_enabled,
    "storage_fenced": lambda r, ev, p: (isinstance(ev.payload, Fenced)
                                        and ev.payload.scope == "storage"),
    # proven dead otherwise than by a BMC's Off (a watchdog's deadline):
    # the method's own words say how
    "fenced_without_power": lambda r, ev, p: (
        isinstance(ev.payload, Fenced) and bool(ev.payload.how)),
    "kdump_proves_dead": lambda r, ev, p: kdump_proof(r, p, ev.at),
    "kdump_waits": lambda r, ev, p: (p.kdump_action != "evacuate"
                                     and dumping(r, ev.at, p)),
    "fence_due": _fence_due,
    "agent_fence_due": agent_fence_due,
    "agent_fence_due_by_peers": lambda r, ev, p: (
        agent_fence_due(r, ev, p) and agent.peers_corroborate(r, p)
        and not agent.refuted(r, p)),
    "agent_vetoes": lambda r, ev, p: (agent.vetoes(r)
                                      and _decision_due(r, ev, p)),
    "agent_beating": lambda r, ev, p: agent.vetoes(r),
    "within_grace": lambda r, ev, p: _within_grace(r, ev, p),
    "agent_refuted": lambda r, ev, p: agent.refuted(r, p),
    "agent_silent_suspect": lambda r, ev, p: agent.silent_suspect(r),
    "nova_ok": lambda r, ev, p: r.heartbeat_ok,
    "power_off_due": lambda r, ev, p: (_fence_due(r, ev, p)
                                       and _power_proof(r, p)),
    "dump_overdue": lambda r, ev, p: (_fence_due(r, ev, p)
                                      and dumping(r, ev.at, p)),
    "dump_over": lambda r, ev, p: (_fence_due(r, ev, p)
                                   and _dump_seen(r, p)),
    "decision_due_but_threshold": lambda r, ev, p: (
        not ev.cluster_ok and _decision_due(r, ev, p)),
    "decision_due_but_disabled_by_operator": lambda r, ev, p: (
        _disabled_hold(r, p) and _decision_due(r, ev, p)),
    "decision_due_but_flapping": lambda r, ev, p: (
        _flapping(r, ev, p) and _decision_due(r, ev, p)),
    "attempts_left": lambda r, ev, p: r.attempts < p.max_attempts,
    "retry_due": lambda r, ev, p: _retry_due(r, ev),
    "waits_for_capacity": lambda r, ev, p: (
        r.waits_for_capacity and not r.busy and r.retry_at is not None
        and r.retry_at > ev.at),
    "retry_due_but_threshold": lambda r, ev, p: (not ev.cluster_ok
                                                 and _retry_due(r, ev)),
    "stopped_for_operator": lambda r, ev, p: (
        isinstance(ev.payload, EvacuationSummary)
        and ev.payload.stopped_for_operator),
    "isolated": lambda r, ev, p: r.isolated,
    "drained": lambda r, ev, p: bool(r.drain_then),
    "drained_not_isolated": lambda r, ev, p: (bool(r.drain_then)
                                              and not r.isolated),
    "then_decommission": lambda r, ev, p: r.drain_then == "decommission",
    "fail_back": lambda r, ev, p: r.fail_back and bool(r.drain_moved),
    "returned": lambda r, ev, p: r.isolated and r.returned and r.heartbeat_ok,
    "back_not_isolated_undrained": lambda r, ev, p: (
        not r.isolated and not r.drain_then
        and heartbeat_since_loss(r, ev)),
    "suspension_expired": lambda r, ev, p: (r.until is not None
                                            and ev.at >= r.until),
    "suspension_expired_returned": lambda r, ev, p: (
        r.until is not None and ev.at >= r.until and r.isolated
        and r.returned and r.heartbeat_ok),
    "suspension_expired_isolated": lambda r, ev, p: (
        r.until is not None and ev.at >= r.until and r.isolated),
}
