"""The heartbeat agent's word in the state machine (pure).

A host whose agent falls silent on every path turns suspect at once, while
Nova still reports it up; it is fenced only once the silence is
corroborated -- Nova owes a heartbeat it has not recorded, or a BMC that
may prove the host dead reads Off -- and after the usual grace period and
gates. Nova recording a heartbeat after the silence means the host lives
(its agent or the agent's network failed): it is active again, never
fenced for the silence. While the agent's authenticated beats arrive, the
host lives whatever Nova says (only nova-compute is down): never fenced
(the veto).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from instanceha.events import (AgentReport, AgentSilence, Event,
                               EventKind as E, ServiceReport)
from instanceha.fsm.settings import Policy

if TYPE_CHECKING:
    # For annotations only: fsm.states reads this module (the agent's
    # veto starts soft fencing), and the record imports states.
    from instanceha.fsm.record import HostRecord

BEATING = "beating"
SILENT = "silent"

#: Seconds after Nova's heartbeat is due before its absence counts.
OWED_MARGIN = 1.0


def observe(r: HostRecord, ev: Event, changes: Dict[str, Any]) -> None:
    """The facts an agent's event, and Nova's updated_at in a report,
    change on the record (into ``changes``)."""
    if ev.kind is E.AGENT_BEATING and isinstance(ev.payload, AgentReport):
        changes.update(agent=BEATING, agent_compute=ev.payload.compute,
                       agent_silent_at=None)
    elif ev.kind is E.AGENT_SILENT and isinstance(ev.payload, AgentSilence):
        changes.update(agent=SILENT, agent_silent_at=ev.payload.last_beat_at)
    if isinstance(ev.payload, ServiceReport):
        read_at = ev.payload.read_at
        if read_at is not None and (r.nova_read_at is None
                                    or read_at > r.nova_read_at):
            changes["nova_read_at"] = read_at
        updated = ev.payload.updated_at
        if updated is not None and (r.nova_updated is None
                                    or updated > r.nova_updated):
            changes.update(nova_updated=updated, nova_seen_at=ev.at)
            if r.nova_updated is not None:
                changes["nova_step"] = updated - r.nova_updated


def vetoes(r: HostRecord) -> bool:
    """The agent's authenticated beats arrive: the host lives."""
    return r.agent == BEATING


def silent_suspect(r: HostRecord) -> bool:
    """Suspect on the agent's word alone: silent, Nova still says up."""
    return r.agent == SILENT and r.heartbeat_ok


def refuted(r: HostRecord, p: Policy) -> bool:
    """Nova recorded a heartbeat after the agent fell silent (seen later
    than a heartbeat from before the silence could be): the host lives."""
    return (r.agent == SILENT and r.agent_silent_at is not None
            and r.nova_seen_at is not None
            and r.nova_seen_at > r.agent_silent_at + p.nova_seen_lag)


def owed_at(r: HostRecord, p: Policy) -> float:
    """When Nova's next heartbeat from the host is overdue: a report
    interval (the configured one, or the step last seen between the
    host's heartbeats if longer) and a margin after the last one was seen
    (its write was no later), or after the silence began when none was
    seen lately."""
    interval = max(p.nova_report_interval, r.nova_step or 0.0)
    base = r.nova_seen_at
    if base is None or (r.agent_silent_at is not None
                        and base < r.agent_silent_at - interval):
        base = r.agent_silent_at if r.agent_silent_at is not None else 0.0
    return base + interval + OWED_MARGIN


def corroborated(r: HostRecord, p: Policy) -> bool:
    """A second witness of the silent host's death: a BMC that may prove
    it dead reads Off, or a read of Nova made after Nova owed a heartbeat
    found none recorded (time passing is not enough: a slow or failing
    read of Nova must not stand for one that found nothing)."""
    if r.agent != SILENT or refuted(r, p):
        return False
    if p.power_evidence and r.power_off_at is not None:
        return True
    return r.nova_read_at is not None and r.nova_read_at >= owed_at(r, p)


def wants_nova_read(r: HostRecord, now: float, p: Policy) -> bool:
    """A silent suspect whose owed heartbeat is due and not yet looked
    for: the engine reads the host's own row of Nova now instead of
    waiting for the next poll."""
    return (silent_suspect(r) and not refuted(r, p)
            and now >= owed_at(r, p)
            and (r.nova_read_at is None or r.nova_read_at < owed_at(r, p)))


def due_at(r: HostRecord, p: Policy, fence_at: float) -> float:
    """When fencing a silent suspect may become due (``fence_at``: the
    grace period's end)."""
    if p.power_evidence and r.power_off_at is not None:
        return fence_at
    return max(fence_at, owed_at(r, p))
