"""Typed events: the only thing sources, action results and operators hand to
the engine.

A source (reconciler, notification listener, fence_kdump socket, operator
command) turns what it saw into an :class:`Event` for one host key. Time
always arrives inside the event (``at``, seconds since the epoch, read from
the source's injected clock); the state machine never reads a clock.

The host key is the compute service's UUID as Nova reports it from
microversion 2.53 on; ``name`` is the service's ``host`` field, kept for
logs and for drivers that address hosts by name.

What an event carries beyond that is its *payload*: one small frozen
dataclass per family of kinds (:data:`PAYLOADS`), read by attribute.
``Event(..., detail={...})`` is still accepted (the dict becomes the
kind's payload; an unknown key is refused), and ``event.detail`` gives
the payload as a dict (the fields the source gave, ``None`` left out).
"""

import dataclasses
import enum
from typing import Any, Dict, Mapping, Optional, Tuple, Type, Union


class EventKind(str, enum.Enum):
    # Observations of the compute service (reconciler, notifications).
    HEARTBEAT_OK = "heartbeat_ok"          # nova-compute is reporting in
    HEARTBEAT_LOST = "heartbeat_lost"      # reported down, or updated_at too old
    FORCED_DOWN = "forced_down"            # another actor forced the service down
    TICK = "tick"                          # time passed; carries cluster_ok
    KDUMP = "kdump"                        # fence_kdump message from the host
    # A read of the host's BMC (not our action): its power state now.
    POWER_OFF = "power_off"
    POWER_ON = "power_on"
    # A compute host became schedulable (enabled and up): a host waiting
    # for capacity may try again now rather than at its back-off time.
    CAPACITY = "capacity"
    # The host's heartbeat agent (instanceha-agent, optional per host):
    # heard (first beat, beats back, or its report changed), or silent on
    # every path for [agent] silence_timeout.
    AGENT_BEATING = "agent_beating"
    AGENT_SILENT = "agent_silent"
    # While silent: its peers' word on it changed (how many of the agents
    # watching it freshly report that they do not / do hear it).
    AGENT_PEERS = "agent_peers"
    # Results of actions (engine workers).
    FENCE_OK = "fence_ok"
    FENCE_FAILED = "fence_failed"
    ISOLATE_OK = "isolate_ok"              # forced down + disabled in Nova
    ISOLATE_FAILED = "isolate_failed"
    EVACUATE_OK = "evacuate_ok"            # every evacuable server rebuilt elsewhere
    EVACUATE_NO_CAPACITY = "evacuate_no_capacity"
    EVACUATE_FAILED = "evacuate_failed"
    # The evacuation pass found the host not dead now (the BMC reports On
    # or did not answer, or Nova recorded a heartbeat since the fence):
    # nothing was sent; the host is watched again.
    REPROOF_FAILED = "reproof_failed"
    CLEANUP_CONFIRMED = "cleanup_confirmed"  # migrations completed; host put back
    CLEANUP_PENDING = "cleanup_pending"
    # A planned drain: every server moved off a live host (migrations).
    DRAIN_OK = "drain_ok"                  # what can move has moved
    DRAIN_FAILED = "drain_failed"          # refused or stopped: see reason
    #: the host left draining (an operator's resume, its loss): the pass
    #: stops; stale in any state, journalled as what happened
    DRAIN_CANCELLED = "drain_cancelled"
    UNDRAIN_OK = "undrain_ok"              # migrations aborted, host enabled
    UNDRAIN_FAILED = "undrain_failed"
    DECOMMISSION_OK = "decommission_ok"    # service deleted, out of aggregates
    DECOMMISSION_FAILED = "decommission_failed"
    FAIL_BACK_OK = "fail_back_ok"          # the drained servers moved back
    FAIL_BACK_FAILED = "fail_back_failed"
    FAIL_BACK_CANCELLED = "fail_back_cancelled"  # the host left failing back
    # Operator commands.
    OPERATOR_SUSPEND = "operator_suspend"
    OPERATOR_MAINTENANCE = "operator_maintenance"
    OPERATOR_RESUME = "operator_resume"
    OPERATOR_DRAIN = "operator_drain"


# -- payloads: what an event of each kind carries ----------------------------

@dataclasses.dataclass(frozen=True)
class ServiceReport:
    """Nova's word about the compute service (HEARTBEAT_OK,
    HEARTBEAT_LOST, FORCED_DOWN), as the reconciler's poll of
    os-services gives it. ``None``: the source did not say."""

    forced_down: bool = False
    status: Optional[str] = None            # "enabled" | "disabled" (poll)
    disabled: Optional[bool] = None         # (notification)
    disabled_reason: Optional[str] = None
    # Nova's time of the last heartbeat (a notification's last_seen_up):
    # compared with the fencing time to tell a host that came back.
    updated_at: Optional[float] = None
    zone: Optional[str] = None
    aggregates: Optional[Tuple[str, ...]] = None   # None: not read
    # When the read of Nova that gave this started (engine's clock; a
    # poll or a read of the host's own row): Nova's answer is from no
    # earlier. None: not a read (a notification).
    read_at: Optional[float] = None

    def __post_init__(self) -> None:
        if self.aggregates is not None and type(self.aggregates) is not tuple:
            object.__setattr__(self, "aggregates", tuple(self.aggregates))

    def says_disabled(self) -> Optional[bool]:
        """Whether the service is disabled, None when the source did not
        say (a notification says ``disabled``, the poll ``status``)."""
        if self.disabled is not None:
            return bool(self.disabled)
        if self.status is not None:
            return self.status == "disabled"
        return None


@dataclasses.dataclass(frozen=True)
class ServiceNotice(ServiceReport):
    """A :class:`ServiceReport` from a service.update notification, with
    what the notification adds (for the logs; nothing decides on it).
    A class of its own so that the reconciler's report, made for every
    host on every poll, stays small."""

    last_seen_up: Optional[float] = None
    heartbeat_age: Optional[float] = None    # seconds, on our clock
    event_type: Optional[str] = None
    publisher_id: Optional[str] = None
    schema: Optional[str] = None             # "ServiceStatusPayload 1.1"


@dataclasses.dataclass(frozen=True)
class PowerReading:
    """A read of the host's BMC (POWER_ON, POWER_OFF): by the audit, the
    power watch, or the engine when a heartbeat is lost."""

    # (method key, "on" | "off") per fencing method read.
    readings: Tuple[Tuple[str, str], ...] = ()
    by: str = ""                    # who read it; "" -> the event's source
    nova_up: bool = False           # audit: Nova reported the service up
    # Audit: the service's (updated_at, status, disabled_reason) read
    # again after the BMC reads, or None.
    after: Optional[Tuple[Any, ...]] = None
    # Audit: (method key, what the BMC reported about its machine).
    identities: Tuple[Tuple[str, Any], ...] = ()
    # Set by the engine (engine/evidence.py): this Off comes from a BMC
    # that may prove the host dead (the second witness).
    vouched: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "readings",
                           tuple(tuple(r) for r in self.readings))
        object.__setattr__(self, "identities",
                           tuple(tuple(i) for i in self.identities))


@dataclasses.dataclass(frozen=True)
class Fenced:
    """FENCE_OK: the method of the inventory entry that powered the host
    off, and the ones that failed before it."""

    method: int                     # its place in the entry, from 1
    method_driver: str
    method_address: str
    methods: int = 1                # how many methods the entry has
    failed_methods: Tuple[Mapping[str, Any], ...] = ()
    #: the fencing level that succeeded, from 1 (None: the methods: form,
    #: each method a level, ``method`` says)
    level: Optional[int] = None
    levels: Optional[int] = None
    #: "driver address" of each method of that level
    level_methods: Tuple[str, ...] = ()
    #: "host" (the host is down) or "storage" (cut off its storage only)
    scope: str = "host"
    #: with scope "storage": what of its servers is on that storage
    #: ("volumes", "ephemeral")
    protects: Tuple[str, ...] = ()
    #: what proved the host dead when no BMC's Off did, in the method's
    #: own words ("self-fenced by watchdog, assumed at <time>"); "" else
    how: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "failed_methods",
                           tuple(self.failed_methods))
        object.__setattr__(self, "level_methods",
                           tuple(self.level_methods))
        object.__setattr__(self, "protects", tuple(self.protects))


@dataclasses.dataclass(frozen=True)
class Isolated:
    """ISOLATE_OK: Nova's updated_at after our force-down (Nova bumps it
    on every write), so that it is not taken for a heartbeat."""

    written_at: float


@dataclasses.dataclass(frozen=True)
class EvacuationSummary:
    """EVACUATE_OK, EVACUATE_NO_CAPACITY, EVACUATE_FAILED,
    REPROOF_FAILED: the servers of the recovery, counted."""

    done: int = 0
    total: int = 0
    skipped: int = 0
    failed: int = 0
    no_capacity: int = 0
    retried: int = 0
    # EVACUATE_FAILED: the operator's suspend stopped it (not a failure).
    stopped_for_operator: bool = False


@dataclasses.dataclass(frozen=True)
class Restored:
    """CLEANUP_CONFIRMED: forced_down unset; enabled, or left disabled."""

    enabled: bool


@dataclasses.dataclass(frozen=True)
class KdumpMessage:
    """KDUMP: a fence_kdump message from the host, and its dump so far."""

    address: str
    port: int
    count: int                      # messages of this dump
    first_at: float
    last_at: float
    byte_order: str                 # "little" | "big"


@dataclasses.dataclass(frozen=True)
class Suspension:
    """OPERATOR_SUSPEND: until when (None: until resumed)."""

    until: Optional[float] = None

    def __post_init__(self) -> None:
        if self.until is not None:
            object.__setattr__(self, "until", float(self.until))


@dataclasses.dataclass(frozen=True)
class AgentReport:
    """AGENT_BEATING: what the host's agent says, from its authenticated
    beats. ``paths``: the networks it is heard on now (each within
    silence_timeout); ``compute``, ``libvirt``: is the daemon running
    (None: the agent cannot tell); ``guests``: running domains (None:
    unknown); ``last_beat_at``: when its last beat arrived (engine's
    clock); ``system_uuid``: the machine's system UUID (DMI product_uuid,
    canonical text; None: not reported), matched against its BMCs'."""

    paths: Tuple[str, ...]
    boot_id: str
    last_beat_at: float
    compute: Optional[bool] = None
    libvirt: Optional[bool] = None
    guests: Optional[int] = None
    system_uuid: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class AgentSilence:
    """AGENT_SILENT: no authenticated beat on any path since
    ``last_beat_at`` (engine's clock); ``paths``: those it was heard on
    before. AGENT_PEERS, within the silence, whenever the peers' word
    on the host changes: the same payload. ``peers_watching`` agents
    list it as a peer;
    ``peers_unheard`` / ``peers_heard`` of them, beating, reported in a
    beat made after its last beat (their whole hearing window after it)
    that they do not / do hear it (:mod:`instanceha.sources.heartbeat_table`;
    judged by :func:`instanceha.fsm.agent.peers_corroborate`)."""

    last_beat_at: float
    paths: Tuple[str, ...] = ()
    peers_unheard: int = 0
    peers_heard: int = 0
    peers_watching: int = 0


@dataclasses.dataclass(frozen=True)
class DrainRequest:
    """OPERATOR_DRAIN: what follows the drain ("maintenance" or
    "decommission"), servers moved at once from this host (None: [drain]
    concurrency), and whether to drain what can be drained when the
    preflight refuses (``force``)."""

    then: str = "maintenance"
    concurrency: Optional[int] = None
    force: bool = False

    def __post_init__(self) -> None:
        if self.then not in ("maintenance", "decommission"):
            raise ValueError("then must be 'maintenance' or 'decommission', "
                             "not %r" % (self.then,))
        if self.concurrency is not None and int(self.concurrency) < 1:
            raise ValueError("concurrency must be at least 1, not %r"
                             % (self.concurrency,))


@dataclasses.dataclass(frozen=True)
class DrainSummary:
    """DRAIN_OK: the servers the drain moved off the host (for a later
    fail-back)."""

    moved: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ResumeRequest:
    """OPERATOR_RESUME: move the servers a drain moved back onto the host
    once it is back in service (fail-back); None: [maintenance]
    fail_back."""

    fail_back: Optional[bool] = None


Payload = Union[ServiceReport, PowerReading, Fenced, Isolated,
                EvacuationSummary, Restored, KdumpMessage, Suspension,
                AgentReport, AgentSilence, DrainRequest, DrainSummary,
                ResumeRequest]

#: The payload class of each kind that carries one.
PAYLOADS: Dict[EventKind, Type[Any]] = {
    EventKind.HEARTBEAT_OK: ServiceReport,
    EventKind.HEARTBEAT_LOST: ServiceReport,
    EventKind.FORCED_DOWN: ServiceReport,
    EventKind.KDUMP: KdumpMessage,
    EventKind.POWER_ON: PowerReading,
    EventKind.POWER_OFF: PowerReading,
    EventKind.FENCE_OK: Fenced,
    EventKind.ISOLATE_OK: Isolated,
    EventKind.EVACUATE_OK: EvacuationSummary,
    EventKind.EVACUATE_NO_CAPACITY: EvacuationSummary,
    EventKind.EVACUATE_FAILED: EvacuationSummary,
    EventKind.REPROOF_FAILED: EvacuationSummary,
    EventKind.CLEANUP_CONFIRMED: Restored,
    EventKind.OPERATOR_SUSPEND: Suspension,
    EventKind.OPERATOR_DRAIN: DrainRequest,
    EventKind.DRAIN_OK: DrainSummary,
    EventKind.OPERATOR_RESUME: ResumeRequest,
    EventKind.AGENT_BEATING: AgentReport,
    EventKind.AGENT_SILENT: AgentSilence,
    EventKind.AGENT_PEERS: AgentSilence,
}


def payload_from(kind: EventKind, detail: Mapping[str, Any]) -> Payload:
    """The payload of a ``kind`` event from a detail dict. Raises
    ValueError naming the first key the kind's payload does not have."""
    cls = PAYLOADS.get(kind)
    if cls is None:
        raise ValueError("a %s event carries no detail; got key %r"
                         % (kind.value, sorted(detail)[0]))
    # The kind's class, or the first subclass that has every key (a
    # ServiceNotice for a notification's keys).
    for klass in (cls,) + tuple(cls.__subclasses__()):
        known = {f.name for f in dataclasses.fields(klass)}
        if known.issuperset(detail):
            payload: Payload = klass(**detail)
            return payload
    unknown = sorted(k for k in detail if k not in known)
    raise ValueError("unknown detail key %r for a %s event (%s has: %s)"
                     % (unknown[0], kind.value, klass.__name__,
                        ", ".join(sorted(known))))


def as_detail(payload: Optional[Payload]) -> Dict[str, Any]:
    """A payload as a dict: its fields, those that are None left out."""
    if payload is None:
        return {}
    return {f.name: getattr(payload, f.name)
            for f in dataclasses.fields(payload)
            if getattr(payload, f.name) is not None}


# -- the event ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True, init=False)
class Event:
    kind: EventKind
    host: str                 # compute service UUID
    at: float                 # seconds since the epoch, from the source's clock
    name: str = ""            # compute host name (service.host)
    reason: str = ""          # human-readable: why the source says this
    source: str = ""          # reconciler | notification | kdump | operator | action
    cluster_ok: bool = True   # TICK only: False when the suspect threshold is exceeded
    payload: Optional[Payload] = None   # PAYLOADS[kind], or None

    def __init__(self, kind: EventKind, host: str, at: float,
                 name: str = "", reason: str = "", source: str = "",
                 cluster_ok: bool = True, payload: Optional[Payload] = None,
                 detail: Optional[Mapping[str, Any]] = None) -> None:
        if detail:
            if payload is not None:
                raise TypeError("give an event a payload or a detail, "
                                "not both")
            payload = payload_from(kind, detail)
        elif payload is not None and not isinstance(
                payload, PAYLOADS.get(kind, ())):
            raise TypeError("a %s event carries %s, not %s" % (
                kind.value, getattr(PAYLOADS.get(kind), "__name__",
                                    "no payload"),
                type(payload).__name__))
        # Frozen: set as the generated __init__ of a frozen dataclass does.
        setattr_ = object.__setattr__
        setattr_(self, "kind", kind)
        setattr_(self, "host", host)
        setattr_(self, "at", at)
        setattr_(self, "name", name)
        setattr_(self, "reason", reason)
        setattr_(self, "source", source)
        setattr_(self, "cluster_ok", cluster_ok)
        setattr_(self, "payload", payload)

    @property
    def detail(self) -> Dict[str, Any]:
        """The payload as a dict (a copy: see :func:`as_detail`)."""
        return as_detail(self.payload)

    def log_fields(self) -> Dict[str, Any]:
        # Not "event": structlog takes that key for the log line's name.
        return {"kind": self.kind.value, "host": self.name or self.host,
                "host_id": self.host, "source": self.source,
                "reason": self.reason}
