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

Peer witnesses (issue 37, section 1): the agents that list the host as a
peer tell, in their beats, whether they hear it. When at least
``peer_witnesses`` of them, and a majority of all the agents listing it,
report fresh (beating, each report's whole hearing window after the
host's last beat: the source counts them) that they do not hear it, and
none that it does, the silence is corroborated at once: Nova's owed
heartbeat is not waited for, and the grace period is
``peer_grace``. This only brings the decision to fence (power off, or
the watchdog's deadline) sooner; the host is still proven dead before
any evacuation (doc/safety.md).
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
                       agent_silent_at=None, peers_watching=0,
                       peers_unheard=0, peers_heard=0)
    elif ev.kind is E.AGENT_SILENT and isinstance(ev.payload, AgentSilence):
        changes.update(agent=SILENT, agent_silent_at=ev.payload.last_beat_at,
                       peers_watching=ev.payload.peers_watching,
                       peers_unheard=ev.payload.peers_unheard,
                       peers_heard=ev.payload.peers_heard)
    elif (ev.kind is E.AGENT_PEERS and isinstance(ev.payload, AgentSilence)
          and r.agent == SILENT
          and r.agent_silent_at == ev.payload.last_beat_at):
        # the peers' word changed within the same silence
        changes.update(peers_watching=ev.payload.peers_watching,
                       peers_unheard=ev.payload.peers_unheard,
                       peers_heard=ev.payload.peers_heard)
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


def peers_corroborate(r: HostRecord, p: Policy) -> bool:
    """The silent host's peers do not hear it either: at least
    ``peer_witnesses`` fresh reports say so, they are a majority of the
    agents listing the host as a peer, and no fresh report hears it (a
    peer hearing it refutes: the host lives, or part of its network
    does)."""
    return (r.agent == SILENT and r.peers_heard == 0
            and r.peers_unheard >= max(p.peer_witnesses, 1)
            and r.peers_unheard >= r.peers_watching // 2 + 1)


def grace(r: HostRecord, p: Policy) -> float:
    """The grace period of the record's loss: ``peer_grace`` (if
    shorter) for a silence its peers corroborate."""
    if peers_corroborate(r, p):
        return min(p.grace_period, p.peer_grace)
    return p.grace_period


def corroborated(r: HostRecord, p: Policy) -> bool:
    """A second witness of the silent host's death: a BMC that may prove
    it dead reads Off, a majority of its peers do not hear it either
    (:func:`peers_corroborate`), or a read of Nova made after Nova owed a
    heartbeat found none recorded (time passing is not enough: a slow or
    failing read of Nova must not stand for one that found nothing)."""
    if r.agent != SILENT or refuted(r, p):
        return False
    if p.power_evidence and r.power_off_at is not None:
        return True
    if peers_corroborate(r, p):
        return True
    return r.nova_read_at is not None and r.nova_read_at >= owed_at(r, p)


def wants_nova_read(r: HostRecord, now: float, p: Policy) -> bool:
    """A silent suspect whose owed heartbeat is due and not yet looked
    for: the engine reads the host's own row of Nova now instead of
    waiting for the next poll."""
    return (silent_suspect(r) and not refuted(r, p)
            and not peers_corroborate(r, p)
            and now >= owed_at(r, p)
            and (r.nova_read_at is None or r.nova_read_at < owed_at(r, p)))


def due_at(r: HostRecord, p: Policy, fence_at: float) -> float:
    """When fencing a silent suspect may become due (``fence_at``: the
    grace period's end)."""
    if (p.power_evidence and r.power_off_at is not None) \
            or peers_corroborate(r, p):
        return fence_at
    return max(fence_at, owed_at(r, p))
