"""The service's event sources: which are on, each built with the narrow
port it hands its events to (its sink and the few engine reads it needs),
started, stopped and asked alike (sources.base.Source)."""

from typing import Any, Callable, NamedTuple

from instanceha.sources.audit import FencingAudit
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.sources.heartbeat import HeartbeatSource
from instanceha.sources.kdump import KdumpSource
from instanceha.sources.reconciler import Reconciler

#: The sources' names, as the status shows their health.
RECONCILER = "reconciler"
CONTROL_PLANE = "control_plane"
AUDIT = "audit"
NOTIFICATIONS = "notifications"
REPAIR_SWEEP = "repair_sweep"
KDUMP = "kdump"
HEARTBEAT = "agent_heartbeat"


def _on(conf, group):
    options = getattr(conf, group, None)
    return options is not None and options.enabled


def enabled(conf):
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
    submit: Callable[..., None]
    #: the same for the listeners a standby binds too (kdump, the agents'
    #: beats): dropped while this process does not act
    submit_acting: Callable[..., None]
    #: does this process act now?
    acting: Callable[[], bool]
    known_hosts: Callable[[], Any]
    wants_every_report: Callable[[], Any]
    #: hosts became schedulable: capacity may have appeared
    capacity_appeared: Callable[[Any], Any]
    #: the audit gives way while hosts are being proven dead
    urgent: Callable[[], bool]
    #: the audit leaves alone a host the engine handles
    handled: Callable[[str], bool]
    #: instance repair (engine.repair): news of broken servers
    repair: Any
    #: the BMC of a host, and the fencing drivers (engine.ctx)
    bmc_for: Callable[..., Any]
    fencer: Callable[..., Any]
    #: the "wake these hosts" signal notifications give
    board: Any


class Sources:
    """The sources ``conf`` turns on (:func:`enabled`), reading ``compute``
    on ``clock`` and handing what they observe to ``ports``. Each is an
    attribute (None when off), and iterating gives them all in order."""

    def __init__(self, conf, compute, clock, ports):
        names = enabled(conf)
        self.audit = self.notifications = self.repair_sweep = None
        self.kdump = self.heartbeat = None
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
        self._by_name = {
            RECONCILER: self.reconciler, CONTROL_PLANE: self.control_plane,
            AUDIT: self.audit, NOTIFICATIONS: self.notifications,
            REPAIR_SWEEP: self.repair_sweep, KDUMP: self.kdump,
            HEARTBEAT: self.heartbeat}
        self._list = [self._by_name[name] for name in names]

    def __iter__(self):
        return iter(list(self._list))

    def __contains__(self, source):
        return source in self._list

    def health(self, name):
        """The health of source ``name``."""
        return self._by_name[name].health()

    def bound_at_start(self):
        """The sources started (their sockets bound) by the service's
        start itself, on every member: the kdump and agent heartbeat
        listeners."""
        return [src for src in (self.kdump, self.heartbeat)
                if src is not None]

    # -- what the engine reads of them ---------------------------------------
    def world_seen(self):
        """The reconciler completed a pass since start."""
        return self.reconciler.passes > 0

    def agent_cliff(self):
        return self.heartbeat.cliff() if self.heartbeat is not None else None

    def powered_off(self):
        """Hosts the audit's power watch saw go Off (none without it)."""
        return self.audit.powered_off() if self.audit is not None else set()

    def unprotected(self):
        """{host: why it could not be fenced now} (the audit's)."""
        return self.audit.unprotected() if self.audit is not None else {}

    def events_healthy(self):
        """True while the notification stream reliably reports evacuation
        progress (connected and not quiet)."""
        if self.notifications is None:
            return False
        h = self.notifications.health()
        return bool(h.get("connected")) and not h.get("quiet")


def _audit(conf, compute, clock, ports):
    """Could each host be fenced now? Checked before any recovery could be
    needed, then every [audit] interval."""
    return FencingAudit(conf, compute, ports.bmc_for, ports.fencer, clock,
                        sink=ports.submit, give_way=ports.urgent,
                        handled=ports.handled)


def _notifications(conf, clock, ports):
    # Imported here: oslo.messaging is loaded only when notifications are
    # enabled.
    from instanceha.sources.notifications import NotificationSource
    repair_sink = None
    if conf.instance_repair.enabled:
        repair_sink = ports.repair.from_notification
    return NotificationSource(conf, ports.submit, clock, ports.board,
                              repair_sink=repair_sink)


def _repair_sweep(conf, compute, clock, ports):
    """Instance repair's fallback: Nova's broken servers, read."""
    from instanceha.sources.repair_sweep import RepairSweep
    return RepairSweep(conf, compute, ports.repair.from_sweep, clock,
                       watched=ports.repair.set_watched,
                       skip=ports.repair.sweep_skips)


def _heartbeat(conf, clock, ports):
    """Bound at start like kdump's socket; a standby hears the beats and
    acts on none of them."""
    guest_sink = None
    if conf.instance_repair.enabled:
        def guest_sink(event, at):
            # The agents' guest events: news for instance repair (a
            # standby hears them and acts on none).
            if ports.acting():
                ports.repair.from_agent(event, at)
    return HeartbeatSource(conf, ports.submit_acting, clock,
                           ports.known_hosts, guest_sink=guest_sink)
