"""What the machine knows of one host (:class:`HostRecord`), as journaled."""

import dataclasses
from typing import Any, Dict, Optional, Tuple

from instanceha.fsm.states import State


@dataclasses.dataclass(frozen=True)
class HostRecord:
    id: str                              # compute service UUID
    name: str = ""
    state: State = State.ACTIVE
    since: float = 0.0                   # when the current state was entered
    reason: str = ""
    heartbeat_ok: bool = True            # last observation
    lost_at: Optional[float] = None      # first observation of the loss
    ok_at: Optional[float] = None        # last heartbeat-ok observation
    kdump_at: Optional[float] = None     # last kdump message
    kdump_first_at: Optional[float] = None  # first message of this dump
    fenced_at: Optional[float] = None    # when the host was proven dead
    written_at: Optional[float] = None   # service updated_at after our write
    returned: bool = False               # reported in after it was fenced
    isolated: bool = False               # instanceha forced the service down
    attempts: int = 0                    # evacuation attempts in this recovery
    retry_at: Optional[float] = None     # PENDING / RECOVERING: next try
    until: Optional[float] = None        # SUSPENDED: expiry (None = forever)
    busy: bool = False                   # an action is in flight
    #: The service is disabled by someone else: their reason (else None).
    operator_disabled: Optional[str] = None
    #: No fencing before this time: a resumed host may still be booting.
    hold_until: Optional[float] = None
    zone: Optional[str] = None           # availability zone, as Nova says
    #: host aggregates it belongs to (read only with threshold_per_aggregate)
    aggregates: Tuple[str, ...] = ()
    #: When the host was lost (left active), within [policy] flap_window.
    losses: Tuple[float, ...] = ()
    #: A read of its BMC reported power Off (cleared by a read of On)
    power_off_at: Optional[float] = None
    #: PENDING because servers found no capacity (not a resume's wait)
    waits_for_capacity: bool = False
    #: what proved the host dead when it entered FENCED: "power" (the BMC
    #: confirmed Off), "storage" (a level of storage fencing only cut it
    #: off its storage) or "kdump" ([kdump] action = evacuate)
    proven_by: str = ""
    #: the fencing level that fenced it (from 1; None: not fenced by a
    #: level, or the level was not recorded)
    fenced_level: Optional[int] = None
    #: proven_by "storage" (a level of storage fencing only: the host may
    #: still run): what of its servers is on the fenced storage
    #: ("volumes", "ephemeral"); only those are evacuated
    storage_protects: Tuple[str, ...] = ()
    #: what proved it dead in its fencing method's own words, when no
    #: BMC's Off did ("self-fenced by watchdog, assumed at <time>")
    fenced_how: str = ""
    #: id of the host's last evacuation journal row written before it
    #: entered FENCED (set by the engine, which reads the journal): rows
    #: above it are this recovery's. Row ids, not a stamp compared with
    #: fenced_at: the two may be written on different replicas' clocks.
    evac_floor: Optional[int] = None
    #: The host's heartbeat agent: "" never heard, "beating", "silent".
    agent: str = ""
    #: nova-compute running, as the agent last said (None: cannot tell)
    agent_compute: Optional[bool] = None
    #: when its last beat arrived, once silent on every path
    agent_silent_at: Optional[float] = None
    #: while silent: its peers' word (events.AgentSilence): agents
    #: listing it as a peer, and those of them, beating, whose fresh
    #: reports say they do not / do hear it
    peers_watching: int = 0
    peers_unheard: int = 0
    peers_heard: int = 0
    #: the newest updated_at Nova reported (Nova's clock), and when it
    #: was seen to advance (ours): is Nova owed a heartbeat?
    nova_updated: Optional[float] = None
    nova_seen_at: Optional[float] = None
    #: how far Nova's updated_at moved at its last advance seen (Nova's
    #: report interval as observed, or longer)
    nova_step: Optional[float] = None
    #: when the latest read of Nova that reported the host started (ours)
    nova_read_at: Optional[float] = None
    #: Nova's newest updated_at when the host was lost (left active):
    #: only a heartbeat newer than it shows the host back from a failure
    lost_updated: Optional[float] = None
    #: A planned drain asked by an operator: what follows it
    #: ("maintenance" or "decommission"; "" when none), servers moved at
    #: once (None: [drain] concurrency), drain what can be drained even
    #: when the preflight refuses. Kept until the host is active again.
    drain_then: str = ""
    drain_concurrency: Optional[int] = None
    drain_force: bool = False
    #: the servers the drain moved off the host (a fail-back moves them
    #: back), and whether the operator's resume asked for it
    drain_moved: Tuple[str, ...] = ()
    fail_back: bool = False
    #: put back from maintenance (not a drain cancelled or refused): the
    #: smoke test applies
    from_maintenance: bool = False

    @property
    def loss_count(self) -> int:
        return len(self.losses)

    @property
    def attempts_next(self) -> int:
        return self.attempts + 1

    def to_dict(self) -> Dict[str, Any]:
        d = {f: getattr(self, f) for f in _FIELDS}
        d["state"] = self.state.value
        return d


_FIELDS = tuple(f.name for f in dataclasses.fields(HostRecord))
