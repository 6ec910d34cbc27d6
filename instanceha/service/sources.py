"""The service's event sources: which are on, each built with the narrow
port it hands its events to (its sink and the few engine reads it needs),
started, stopped and asked alike (sources.base.Source)."""

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, \
    Mapping, NamedTuple, Optional, Protocol, Set, Union, cast

from instanceha.drivers.compute.base import ComputeDriver, Server
from instanceha.util.hardware import Health
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.heartbeat.guest import GuestEvent
from instanceha.sources.audit import Fencer, FencingAudit
from instanceha.sources.base import Sink
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.sources.heartbeat import DrainSink, GuestSink, \
    HeartbeatSource
from instanceha.sources.kdump import KdumpSource, KnownHosts
from instanceha.sources.reconciler import Reconciler, Watched
from instanceha.sources.repair_sweep import SweepSink

if TYPE_CHECKING:
    # (oslo.messaging is loaded only when notifications are enabled)
    from instanceha.sources.notifications import NotificationSource, \
        ProgressPort, RepairSink
    from instanceha.sources.repair_sweep import RepairSweep

#: The sources' names, as the status shows their health.
RECONCILER = "reconciler"
CONTROL_PLANE = "control_plane"
AUDIT = "audit"
NOTIFICATIONS = "notifications"
REPAIR_SWEEP = "repair_sweep"
KDUMP = "kdump"
HEARTBEAT = "agent_heartbeat"


class Part(Protocol):
    """What the service does with each source: start it (with the sink it
    was built with), stop it, ask how it is doing."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def health(self) -> Mapping[str, Any]: ...


class RepairPort(Protocol):
    """Instance repair (the engine's), as the sources hand it news."""

    @property
    def from_notification(self) -> "RepairSink": ...

    @property
    def from_sweep(self) -> SweepSink: ...

    def from_agent(self, event: GuestEvent, at: float) -> object: ...

    def set_watched(self, count: int) -> object: ...

    def sweep_skips(self, server: Server) -> bool: ...


def _on(conf: Any, group: str) -> bool:
    options = getattr(conf, group, None)
    return options is not None and options.enabled


def enabled(conf: Any) -> List[str]:
    """The names of the sources ``conf`` turns on, in the order they are
    built and started."""
    on = {RECONCILER: True, CONTROL_PLANE: True,
          AUDIT: conf.audit.enabled,
          NOTIFICATIONS: _on(conf, "notifications"),
          REPAIR_SWEEP: conf.instance_repair.enabled,
          KDUMP: _on(conf, "kdump"),
          HEARTBEAT: getattr(conf, "agent", None) is not None
          and bool(conf.agent.listen_addresses)}
    return [name for name, yes in on.items() if yes]


class Ports(NamedTuple):
    """What the sources may do to the engine, each one call."""
    #: hand an event to the engine's inboxes
    submit: Sink
    #: the same for the listeners a standby binds too (kdump, the agents'
    #: beats): dropped while this process does not act
    submit_acting: Sink
    #: does this process act now?
    acting: Callable[[], bool]
    known_hosts: KnownHosts
    wants_every_report: Callable[[], Watched]
    #: hosts became schedulable: capacity may have appeared
    capacity_appeared: Callable[[List[str]], object]
    #: the audit gives way while hosts are being proven dead (why, or None)
    urgent: Callable[[], Optional[str]]
    #: the audit leaves alone a host the engine handles
    handled: Callable[[str], bool]
    #: instance repair (engine.repair): news of broken servers
    repair: RepairPort
    #: the BMC of a host, and the fencing drivers (engine.ctx)
    bmc_for: Callable[[str], Optional[BMC]]
    fencer: Fencer
    #: the "wake these hosts" signal notifications give
    board: "ProgressPort"
    #: an agent's "drain me" before its host's orderly shutdown
    #: (engine.shutdown_drain; the listener calls it while acting only)
    shutdown_drain: Optional[DrainSink] = None
    #: proactive HA: the hardware health each audit read ({host:
    #: Health}); None: the audit does not read it
    hardware_health: Optional[Callable[[Mapping[str, Health]], object]] \
        = None


class Sources:
    """The sources ``conf`` turns on (:func:`enabled`), reading ``compute``
    on ``clock`` and handing what they observe to ``ports``. Each is an
    attribute (None when off), and iterating gives them all in order."""

    def __init__(self, conf: Any, compute: ComputeDriver,
                 clock: Callable[[], float], ports: Ports) -> None:
        names = enabled(conf)
        self.audit: Optional[FencingAudit] = None
        self.notifications: Optional["NotificationSource"] = None
        self.repair_sweep: Optional["RepairSweep"] = None
        self.kdump: Optional[KdumpSource] = None
        self.heartbeat: Optional[HeartbeatSource] = None
        self.reconciler = Reconciler(
            conf, compute, ports.submit, clock,
            on_capacity=ports.capacity_appeared,
            powered_off=self.powered_off,
            wants_every_report=ports.wants_every_report)
        # No fencing while the control plane a recovery needs is not ready.
        self.control_plane = ControlPlaneMonitor(
            conf, compute, clock, reconciler_health=self.reconciler.health)
        if AUDIT in names:
            self.audit = _audit(conf, compute, clock, ports)
        if NOTIFICATIONS in names:
            self.notifications = _notifications(conf, clock, ports)
        if REPAIR_SWEEP in names:
            self.repair_sweep = _repair_sweep(conf, compute, clock, ports)
        if KDUMP in names:
            self.kdump = KdumpSource(conf, ports.submit_acting, clock,
                                     ports.known_hosts)
        if HEARTBEAT in names:
            self.heartbeat = _heartbeat(conf, clock, ports)
        self._by_name: Dict[str, Optional[Part]] = {
            RECONCILER: self.reconciler, CONTROL_PLANE: self.control_plane,
            AUDIT: self.audit, NOTIFICATIONS: self.notifications,
            REPAIR_SWEEP: self.repair_sweep, KDUMP: self.kdump,
            HEARTBEAT: self.heartbeat}
        # (an enabled source is built: never None)
        self._list = [cast(Part, self._by_name[name]) for name in names]

    def __iter__(self) -> Iterator[Part]:
        return iter(list(self._list))

    def __contains__(self, source: object) -> bool:
        return source in self._list

    def health(self, name: str) -> Mapping[str, Any]:
        """The health of source ``name`` (an enabled one)."""
        return cast(Part, self._by_name[name]).health()

    def bound_at_start(self) -> List[Union[KdumpSource, HeartbeatSource]]:
        """The sources started (their sockets bound) by the service's
        start itself, on every member: the kdump and agent heartbeat
        listeners."""
        return [src for src in (self.kdump, self.heartbeat)
                if src is not None]

    # -- what the engine reads of them ---------------------------------------
    def world_seen(self) -> bool:
        """The reconciler completed a pass since start."""
        return self.reconciler.passes > 0

    def agent_cliff(self) -> Optional[str]:
        return self.heartbeat.cliff() if self.heartbeat is not None else None

    def powered_off(self) -> Set[str]:
        """Hosts the audit's power watch saw go Off (none without it)."""
        return self.audit.powered_off() if self.audit is not None else set()

    def unprotected(self) -> Dict[str, str]:
        """{host: why it could not be fenced now} (the audit's)."""
        return self.audit.unprotected() if self.audit is not None else {}

    def events_healthy(self) -> bool:
        """True while the notification stream reliably reports evacuation
        progress (connected and not quiet)."""
        if self.notifications is None:
            return False
        h = self.notifications.health()
        return bool(h.get("connected")) and not h.get("quiet")


def _audit(conf: Any, compute: ComputeDriver, clock: Callable[[], float],
           ports: Ports) -> FencingAudit:
    """Could each host be fenced now? Checked before any recovery could be
    needed, then every [audit] interval."""
    return FencingAudit(conf, compute, ports.bmc_for, ports.fencer, clock,
                        sink=ports.submit, give_way=ports.urgent,
                        handled=ports.handled,
                        on_health=ports.hardware_health)


def _notifications(conf: Any, clock: Callable[[], float],
                   ports: Ports) -> "NotificationSource":
    # Imported here: oslo.messaging is loaded only when notifications are
    # enabled.
    from instanceha.sources.notifications import NotificationSource
    repair_sink: Optional["RepairSink"] = None
    if conf.instance_repair.enabled:
        repair_sink = ports.repair.from_notification
    return NotificationSource(conf, ports.submit, clock, ports.board,
                              repair_sink=repair_sink)


def _repair_sweep(conf: Any, compute: ComputeDriver,
                  clock: Callable[[], float], ports: Ports) -> "RepairSweep":
    """Instance repair's fallback: Nova's broken servers, read."""
    from instanceha.sources.repair_sweep import RepairSweep
    return RepairSweep(conf, compute, ports.repair.from_sweep, clock,
                       watched=ports.repair.set_watched,
                       skip=ports.repair.sweep_skips)


def _heartbeat(conf: Any, clock: Callable[[], float],
               ports: Ports) -> HeartbeatSource:
    """Bound at start like kdump's socket; a standby hears the beats and
    acts on none of them."""
    guest_sink: Optional[GuestSink] = None
    if conf.instance_repair.enabled:
        def guest_sink(event: GuestEvent, at: float) -> None:
            # The agents' guest events: news for instance repair (a
            # standby hears them and acts on none).
            if ports.acting():
                ports.repair.from_agent(event, at)
    return HeartbeatSource(conf, ports.submit_acting, clock,
                           ports.known_hosts, guest_sink=guest_sink,
                           acting=ports.acting,
                           drain_sink=ports.shutdown_drain)
