"""Resume and adoption: the record a host starts with after a restart, a
replica's takeover, or when Nova shows a host instanceha isolated that the
journal does not know. Pure functions of the record, the time and the
policy; the engine journals and adopts what they return.

What the journal says about a heartbeat is as old as the downtime: a host
that was suspect (or being fenced) is watched afresh, with a full grace
period from its next observed loss, and a host that was being proven dead
again is held in pending for a grace period, so one that came back
meanwhile is not powered off. No fencing decision is taken before the
first poll of Nova (fencing_gate.Readiness).
"""

import dataclasses
from typing import Any, Mapping, Optional

from instanceha import fsm
from instanceha.events import Event, EventKind as E
from instanceha.events import ServiceReport
from instanceha.fsm.record import HostRecord
from instanceha.fsm.settings import Policy
from instanceha.fsm.states import State
from instanceha.util import marker

_FIELDS = frozenset(f.name for f in dataclasses.fields(fsm.HostRecord))


def from_journal(data: Mapping[str, Any]) -> HostRecord:
    """The HostRecord a journal row holds (no action in flight)."""
    data = {k: v for k, v in data.items() if k in _FIELDS}
    data["state"] = State(data["state"])
    data["busy"] = False
    data["losses"] = tuple(data.get("losses") or ())
    data["aggregates"] = tuple(data.get("aggregates") or ())
    data["storage_protects"] = tuple(data.get("storage_protects") or ())
    # What the host's agent said before the restart is not evidence now
    # (a beating agent would veto the fencing of a host that died while
    # instanceha was down): unheard until its next beat.
    data.update(agent="", agent_compute=None, agent_silent_at=None,
                peers_watching=0, peers_unheard=0, peers_heard=0)
    return fsm.HostRecord(**data)


def observe_afresh(rec: HostRecord, now: float, policy: Policy
                   ) -> HostRecord:
    """The record to resume with (``rec`` itself when unchanged)."""
    # (watched afresh: heartbeat_ok=True, lost_at=None, since=now)
    if rec.state is State.SUSPECT:
        return dataclasses.replace(
            rec, reason="instanceha restarted: watching the host afresh "
                        "(full grace period from its next loss)",
            heartbeat_ok=True, lost_at=None, since=now)
    if rec.state is State.FENCING and not rec.isolated:
        return dataclasses.replace(
            rec, state=State.SUSPECT,
            reason="instanceha restarted while fencing: watching the "
                   "host afresh before fencing it",
            heartbeat_ok=True, lost_at=None, since=now)
    if rec.state is State.FENCING:
        return dataclasses.replace(
            rec, state=State.PENDING, since=now,
            retry_at=now + policy.grace_period,
            reason="instanceha restarted while re-proving the host dead: "
                   "giving it a grace period to report first")
    # 'since' is on the clock of the process that wrote it (another
    # replica's after a takeover). A recovering host's old rebuilds
    # get their whole wait from now (a clock that ran behind ours
    # would end it early); no state was entered in our future (one
    # that ran ahead would stretch a storm window past it).
    if rec.state is State.RECOVERING or rec.since > now:
        return dataclasses.replace(rec, since=now)
    return rec


def isolated_by_us(event: Event) -> Optional[str]:
    """Does Nova's word ``event`` say instanceha isolated this host (its
    marker in disabled_reason, forced down)? Returns that reason or None."""
    report = event.payload
    if not isinstance(report, ServiceReport):
        return None
    reason = report.disabled_reason
    if report.forced_down and marker.is_ours(reason):
        return reason
    return None


def adopted_from_nova(rec: HostRecord, event: Event, reason: str,
                      policy: Policy) -> HostRecord:
    """Nova says instanceha isolated this host, but the journal does not
    know it (lost, wiped, a new machine). Its real state is unknown: it
    may be dead, or back, or booting (nova-compute cleans up before its
    first heartbeat). So it is held in PENDING for its boot time and a
    grace period: a heartbeat newer than what Nova shows now (which may
    be instanceha's own last write: Nova bumps updated_at on every PUT)
    proves it back (cleanup check only); otherwise it is proven dead
    again before anything more is evacuated."""
    report = event.payload
    seen = (report.updated_at if isinstance(report, ServiceReport)
            else None)
    ok = event.kind is E.HEARTBEAT_OK
    wait = policy.resume_boot_time + policy.grace_period
    return dataclasses.replace(
        rec, state=State.PENDING, isolated=True, heartbeat_ok=ok,
        ok_at=event.at if ok else None, lost_at=None if ok else event.at,
        written_at=float(seen) if seen is not None else None,
        retry_at=event.at + wait,
        reason="found isolated by instanceha (%r) with no journal: "
               "waiting %.0fs for a new heartbeat (back: cleanup check "
               "only) before re-proving the host dead" % (reason, wait))
