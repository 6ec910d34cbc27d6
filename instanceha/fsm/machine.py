"""Apply one event to one host's record: ``step(record, event, policy)``.

Pure: the result depends only on the arguments. Time comes from
``event.at``; settings from :class:`Policy`. Returns the new record and the
actions to start, in order. The caller persists the new record before it
starts any action.
"""

import dataclasses
from typing import Optional, Tuple

from instanceha.events import EventKind as E
from instanceha.fsm import table
from instanceha.fsm.states import ENTRY_ACTION, ISOLATED_STATES, State
from instanceha.util import backoff, marker


class UndeclaredTransition(LookupError):
    """A (state, event) pair the table neither handles nor ignores."""


@dataclasses.dataclass(frozen=True)
class Policy:
    grace_period: float = 10.0
    kdump_enabled: bool = False
    # fence_after_dump: a dump delays the power-off (up to kdump_max_dump),
    # never replaces it. evacuate: a kdump message counts as fenced (opt-in
    # for a trusted kdump network).
    kdump_action: str = "fence_after_dump"
    kdump_fence_delay: float = 0.0      # wait this long for a dump to begin
    kdump_timeout: float = 60.0         # a host is dumping this long after a message
    kdump_max_dump: float = 600.0       # power off after this long dumping anyway
    recover_disabled_hosts: bool = False  # recover services an operator disabled
    resume_boot_time: float = 300.0     # after a resume: time to boot and report
    flap_count: int = 3                 # losses within flap_window: held (0: off)
    flap_window: float = 600.0
    retry_backoff: float = 30.0
    retry_backoff_max: float = 600.0
    max_attempts: int = 5
    cleanup_check_interval: float = 5.0
    #: a BMC read reporting Off, with the heartbeat lost, skips the grace
    power_evidence: bool = True

    @classmethod
    def from_conf(cls, conf):
        kdump = getattr(conf, "kdump", None)
        kw = dict(
            grace_period=conf.detection.grace_period,
            recover_disabled_hosts=conf.policy.recover_disabled_hosts,
            resume_boot_time=conf.policy.resume_boot_time,
            flap_count=conf.policy.flap_count,
            flap_window=conf.policy.flap_window,
            retry_backoff=conf.evacuation.retry_backoff,
            retry_backoff_max=conf.evacuation.retry_backoff_max,
            max_attempts=conf.evacuation.max_attempts,
            cleanup_check_interval=conf.evacuation.cleanup_check_interval,
            power_evidence=conf.fencing.power_evidence,
        )
        if kdump is not None:
            action = kdump.action
            if action == "wait":            # the old name of the same thing
                action = "fence_after_dump"
            kw.update(kdump_enabled=kdump.enabled, kdump_action=action,
                      kdump_fence_delay=kdump.fence_delay,
                      kdump_timeout=kdump.timeout,
                      kdump_max_dump=kdump.max_dump_time)
        return cls(**kw)


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
    #: confirmed Off) or "kdump" ([kdump] action = evacuate)
    proven_by: str = ""
    #: id of the host's last evacuation journal row written before it
    #: entered FENCED (set by the engine, which reads the journal): rows
    #: above it are this recovery's. Row ids, not a stamp compared with
    #: fenced_at: the two may be written on different replicas' clocks.
    evac_floor: Optional[int] = None

    @property
    def loss_count(self):
        return len(self.losses)

    @property
    def attempts_next(self):
        return self.attempts + 1

    def to_dict(self):
        d = {f: getattr(self, f) for f in _FIELDS}
        d["state"] = self.state.value
        return d


_FIELDS = tuple(f.name for f in dataclasses.fields(HostRecord))


# -- guards: (record, event, policy) -> bool ---------------------------------

def _fence_at(r, p):
    """When fencing becomes due: the grace period after the loss, or after
    the end of a resumed host's boot time (``hold_until``)."""
    if r.lost_at is None:
        return None
    delay = p.grace_period
    if p.kdump_enabled:
        delay = max(delay, p.kdump_fence_delay)
    if _power_proof(r, p):
        delay = 0.0          # no late heartbeat, no dump from a host Off
    start = r.lost_at
    if r.hold_until is not None:
        start = max(start, r.hold_until)
    return start + delay


def _dump_seen(r, p):
    """A kdump message arrived after the host was last seen alive."""
    return (p.kdump_enabled and r.kdump_at is not None
            and (r.ok_at is None or r.kdump_at > r.ok_at))


def _dumping(r, now, p):
    """The host is running its dump kernel: a message came after it was
    last seen alive, less than kdump_timeout before ``now``."""
    return _dump_seen(r, p) and now - r.kdump_at < p.kdump_timeout


def _dump_overdue(r, now, p):
    """The dump has run longer than [kdump] max_dump_time."""
    first = r.kdump_first_at if r.kdump_first_at is not None else r.kdump_at
    return first is not None and now - first >= p.kdump_max_dump


def _dump_holds(r, now, p):
    """A dump in progress holds the power-off (it would destroy the dump),
    but never longer than max_dump_time."""
    return _dumping(r, now, p) and not _dump_overdue(r, now, p)


def _kdump_proof(r, p, now):
    """Only with [kdump] action = evacuate (a trusted kdump network): a
    kdump message that arrived after the heartbeat was lost (and after the
    host was last seen alive), not longer than kdump_timeout before
    ``now``, counts as proof of death without a power-off."""
    return (p.kdump_enabled and p.kdump_action == "evacuate"
            and not r.heartbeat_ok and r.lost_at is not None
            and r.kdump_at is not None and r.kdump_at >= r.lost_at
            and (r.ok_at is None or r.kdump_at > r.ok_at)
            and now - r.kdump_at <= p.kdump_timeout)


def _power_proof(r, p):
    """Two independent witnesses of death: Nova's heartbeat is lost and
    the host's BMC reports power Off. Either alone is not enough: a BMC
    entry may point at another machine (the audit flags that), and a lost
    heartbeat may come back within the grace period."""
    return (p.power_evidence and r.power_off_at is not None
            and not r.heartbeat_ok and r.lost_at is not None)


def _fence_due(r, ev, p):
    due = _fence_at(r, p)
    if due is None or ev.at < due or r.heartbeat_ok:
        return False
    return _power_proof(r, p) or not _dump_holds(r, ev.at, p)


def _flapping(r, ev, p):
    """Lost flap_count times within flap_window (this loss included)."""
    return p.flap_count > 0 and sum(
        1 for t in r.losses if ev.at - t <= p.flap_window) >= p.flap_count


def _disabled_hold(r, p):
    return not p.recover_disabled_hosts and r.operator_disabled is not None


def fencing_due(r, ev, p):
    """A TICK at ``ev.at`` would start fencing ``r`` unless the cluster is
    held (threshold, storm, rate limit): what the engine asks before it
    spends a fencing token."""
    if r.state is State.SUSPECT:
        return (_decision_due(r, ev, p) and not _disabled_hold(r, p)
                and not _flapping(r, ev, p))
    if r.state is State.PENDING:
        return _retry_due(r, ev) and not (r.isolated and r.returned
                                          and r.heartbeat_ok)
    return False


def _retry_due(r, ev):
    return not r.busy and r.retry_at is not None and ev.at >= r.retry_at


def _decision_due(r, ev, p):
    return _fence_due(r, ev, p) or _kdump_proof(r, p, ev.at)


def _reported_after_fencing(r, ev, p):
    """The heartbeat is newer than the fencing and than instanceha's own
    write to the service: the host really came back.

    Right after a fast fence (kdump, external force-down) Nova's updated_at
    is still fresh from before the death, and Nova bumps updated_at on every
    PUT, our force-down included; neither must count as a return. The
    write's updated_at comes from Nova's own answer, on Nova's clock like
    the heartbeat, so no clock skew enters; it is cleared when a new
    fencing starts. Only before that write is the local fencing time used.
    """
    reported = (ev.detail or {}).get("updated_at")
    if reported is None:
        return False            # no timestamp: not a proof of return
    return reported > returned_floor(r)


def returned_floor(r):
    """The Nova updated_at a heartbeat must pass to prove a return."""
    if r.written_at is not None:
        return r.written_at
    return r.fenced_at if r.fenced_at is not None else float("-inf")


GUARDS = {
    table.ALWAYS: lambda r, ev, p: True,
    "kdump_enabled": lambda r, ev, p: p.kdump_enabled,
    "kdump_proves_dead": lambda r, ev, p: _kdump_proof(r, p, ev.at),
    "kdump_waits": lambda r, ev, p: (p.kdump_action != "evacuate"
                                     and _dumping(r, ev.at, p)),
    "fence_due": _fence_due,
    "power_off_due": lambda r, ev, p: (_fence_due(r, ev, p)
                                       and _power_proof(r, p)),
    "dump_overdue": lambda r, ev, p: (_fence_due(r, ev, p)
                                      and _dumping(r, ev.at, p)),
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
    "stopped_for_operator": lambda r, ev, p: bool(
        (ev.detail or {}).get("stopped_for_operator")),
    "isolated": lambda r, ev, p: r.isolated,
    "returned": lambda r, ev, p: r.isolated and r.returned and r.heartbeat_ok,
    "not_isolated": lambda r, ev, p: not r.isolated,
    "suspension_expired": lambda r, ev, p: (r.until is not None
                                            and ev.at >= r.until),
    "suspension_expired_returned": lambda r, ev, p: (
        r.until is not None and ev.at >= r.until and r.isolated
        and r.returned and r.heartbeat_ok),
    "suspension_expired_isolated": lambda r, ev, p: (
        r.until is not None and ev.at >= r.until and r.isolated),
}

_INDEX = {}
for _rule in table.RULES:
    _INDEX.setdefault((_rule[0], _rule[1]), []).append(_rule)


def rules_for(state, kind):
    return _INDEX.get((state, kind), [])


# -- the step ------------------------------------------------------------------

_RESULT_KINDS = {E.FENCE_OK, E.FENCE_FAILED, E.ISOLATE_OK, E.ISOLATE_FAILED,
                 E.EVACUATE_OK, E.EVACUATE_NO_CAPACITY, E.EVACUATE_FAILED,
                 E.REPROOF_FAILED, E.CLEANUP_CONFIRMED, E.CLEANUP_PENDING}


def _operator_disabled(r, ev):
    """The service's disabled state as the event reports it: the reason
    of someone else's disable, None when enabled; unchanged when the event
    does not say, or when the reason is instanceha's own marker."""
    d = ev.detail or {}
    if "disabled" in d:
        disabled = bool(d["disabled"])
    elif "status" in d:
        disabled = d["status"] == "disabled"
    else:
        return r.operator_disabled
    if not disabled:
        return None
    reason = d.get("disabled_reason") or ""
    if marker.is_ours(reason):
        return r.operator_disabled
    return reason or "no reason given"


def _observe(r, ev, p):
    """Facts every event updates whatever the state."""
    changes = {}
    if ev.kind is E.HEARTBEAT_OK:
        changes.update(heartbeat_ok=True, lost_at=None, ok_at=ev.at)
        if r.isolated:
            changes["returned"] = (r.returned
                                   or _reported_after_fencing(r, ev, None))
    elif ev.kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN):
        changes["heartbeat_ok"] = False
        changes["returned"] = False
        if r.lost_at is None:
            changes["lost_at"] = ev.at
    elif ev.kind is E.POWER_OFF:
        # Only from a BMC that may prove this host dead (seen On for it,
        # never Off while it was up: instanceha.policy.proof); the engine
        # says so in the event.
        if r.power_off_at is None and (ev.detail or {}).get("vouched"):
            changes["power_off_at"] = ev.at
    elif ev.kind is E.POWER_ON:
        if r.power_off_at is not None:
            changes["power_off_at"] = None
    elif ev.kind is E.KDUMP:
        changes["kdump_at"] = ev.at
        if not _dumping(r, ev.at, p) or r.kdump_first_at is None:
            changes["kdump_first_at"] = ev.at      # a new dump
    if ev.kind in _OBSERVATIONS:
        disabled = _operator_disabled(r, ev)
        if disabled != r.operator_disabled:
            changes["operator_disabled"] = disabled
            if disabled is None:
                # The operator gave the host back: like a resume, a fresh
                # observation with boot time (it may be booting).
                changes.update(hold_until=ev.at + p.resume_boot_time,
                               lost_at=None if ev.kind is E.HEARTBEAT_OK
                               else ev.at)
    if ev.kind in _RESULT_KINDS and r.state in _RESULT_STATE.get(ev.kind, ()):
        changes["busy"] = False
    if ev.name and not r.name:
        changes["name"] = ev.name
    zone = (ev.detail or {}).get("zone")
    if zone and zone != r.zone:
        changes["zone"] = zone
    aggregates = (ev.detail or {}).get("aggregates")
    if aggregates is not None and tuple(aggregates) != r.aggregates:
        changes["aggregates"] = tuple(aggregates)
    return dataclasses.replace(r, **changes) if changes else r


_OBSERVATIONS = {E.HEARTBEAT_OK, E.HEARTBEAT_LOST, E.FORCED_DOWN}


# Which state's action produces which results (a result in another state is
# stale and must not clear that state's busy flag).
_RESULT_STATE = {
    E.FENCE_OK: (State.FENCING,), E.FENCE_FAILED: (State.FENCING,),
    E.ISOLATE_OK: (State.FENCED,), E.ISOLATE_FAILED: (State.FENCED,),
    E.EVACUATE_OK: (State.EVACUATING,),
    E.EVACUATE_NO_CAPACITY: (State.EVACUATING,),
    E.EVACUATE_FAILED: (State.EVACUATING,),
    E.REPROOF_FAILED: (State.EVACUATING,),
    E.CLEANUP_CONFIRMED: (State.RECOVERING,),
    E.CLEANUP_PENDING: (State.RECOVERING,),
}


_HANDS_OFF = (State.FAILED, State.MAINTENANCE, State.SUSPENDED)


def _enter(r, dst, ev, p):
    """Field changes that come with entering ``dst`` (from another state)."""
    changes = dict(state=dst, since=ev.at, retry_at=None, busy=False,
                   waits_for_capacity=(dst is State.PENDING and ev.kind
                                       is E.EVACUATE_NO_CAPACITY))
    resumed = (r.state in _HANDS_OFF
               and ev.kind in (E.OPERATOR_RESUME, E.TICK))
    if dst is State.ACTIVE:
        changes.update(isolated=False, attempts=0, returned=False,
                       power_off_at=None)
        if resumed:
            # A fresh observation: what was seen while hands were off (a
            # heartbeat lost during maintenance, an old dump) does not
            # count, and the host gets its boot time and a full grace
            # period before any fencing.
            changes.update(heartbeat_ok=True, lost_at=None, kdump_at=None,
                           kdump_first_at=None,
                           hold_until=ev.at + p.resume_boot_time)
    if (dst is State.SUSPECT and r.state is State.ACTIVE
            and ev.kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN)):
        # Heartbeat losses only: kdump messages of a crashing host that
        # still looks fresh must not make it a flapping one.
        changes["losses"] = tuple(t for t in r.losses
                                  if ev.at - t <= p.flap_window) + (ev.at,)
    if dst in ISOLATED_STATES:
        changes["isolated"] = True
    if dst is State.EVACUATING:
        changes["attempts"] = r.attempts + 1
    if dst in (State.FENCING, State.FENCED):
        # A new proof of death: our last write to Nova is from before it.
        changes.update(written_at=None, returned=False)
    if dst is State.FENCED:
        changes["fenced_at"] = ev.at
        changes["proven_by"] = ("power" if ev.kind is E.FENCE_OK
                                else "kdump")
    written = (ev.detail or {}).get("written_at")
    if written is not None:
        changes["written_at"] = float(written)
    if dst is State.PENDING:
        if resumed or ev.kind is E.REPROOF_FAILED:
            # An isolated host that has not reported back (or one not
            # proven dead when its evacuation was to start: it may have
            # been powered on and be booting): give it time to boot and
            # report before proving it dead again.
            delay = p.resume_boot_time + p.grace_period
        else:
            delay = backoff.exponential(p.retry_backoff, r.attempts,
                                        p.retry_backoff_max)
        changes["retry_at"] = ev.at + delay
    if dst is State.SUSPENDED:
        changes["until"] = _until(ev)
    return changes


def _until(ev):
    until = ev.detail.get("until") if ev.detail else None
    return float(until) if until is not None else None


def step(record, event, policy):
    """Return ``(new_record, [actions])`` for one event."""
    r = _observe(record, event, policy)
    for src, kind, guard, dst, reason in rules_for(r.state, event.kind):
        if not GUARDS[guard](r, event, policy):
            continue
        if dst is r.state:
            changes = {"reason": reason.format(event=event, record=r)}
            if kind is E.OPERATOR_SUSPEND:
                changes["until"] = _until(event)
            if kind is E.OPERATOR_RESUME:
                changes["losses"] = ()
            actions = []
            if (src, kind) in table.REENTER:
                changes["retry_at"] = None
                actions = [ENTRY_ACTION[dst]] if dst in ENTRY_ACTION else []
            elif kind is E.CLEANUP_PENDING:
                changes["retry_at"] = event.at + policy.cleanup_check_interval
            elif kind is E.CAPACITY:
                changes["retry_at"] = event.at
            if actions:
                changes["busy"] = True
            return dataclasses.replace(r, **changes), actions
        changes = _enter(r, dst, event, policy)
        changes["reason"] = reason.format(
            event=event, record=dataclasses.replace(r, **changes))
        action = ENTRY_ACTION.get(dst)
        if action is not None:
            changes["busy"] = True
        return dataclasses.replace(r, **changes), [action] if action else []
    if (r.state, event.kind) in table.IGNORED or rules_for(r.state, event.kind):
        return r, []
    raise UndeclaredTransition("no rule for %s in state %s"
                               % (event.kind.value, r.state.value))


def next_wakeup(record, policy):
    """When a TICK could next change this record (None: no timer needed)."""
    if record.state is State.SUSPECT:
        if record.kdump_at is not None and _kdump_proof(record, policy,
                                                        record.kdump_at):
            return record.kdump_at
        due = _fence_at(record, policy)
        if due is not None and _dump_holds(record, due, policy):
            # The power-off waits for the dump: messages stop, or it has
            # run for max_dump_time.
            first = record.kdump_first_at or record.kdump_at
            due = min(record.kdump_at + policy.kdump_timeout,
                      first + policy.kdump_max_dump)
        return due
    if record.state in (State.PENDING, State.RECOVERING):
        return record.retry_at
    if record.state is State.SUSPENDED:
        return record.until
    return None
