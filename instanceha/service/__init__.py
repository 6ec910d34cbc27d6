"""Assemble a running instanceha from configuration."""

import functools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, \
    Optional, Protocol, Tuple, TypeVar, cast

import structlog
import tenacity

from instanceha.api.server import OperatorAPI
from instanceha import sdnotify
from instanceha.log import mask_url
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute.base import ComputeDriver, ComputeError
from instanceha.conf.reload import Outcome
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.drivers.fencing.inventory import Reloaded
from instanceha.engine.context import Context
from instanceha.engine.engine import Engine
from instanceha.engine.fencing_gate import Readiness
from instanceha.engine.proactive import ProactiveHA
from instanceha.engine.progress import ProgressBoard
from instanceha.engine import shutdown_drain
# Re-exported: callers and tests name them as instanceha.service.*.
from instanceha.errors import ConfigError, StartupError  # noqa: F401
from instanceha.events import Event
from instanceha.service import sources as sources_mod
from instanceha.service.group import (
    Acting, Group, JournalPart, MembershipFactory, StartWait, elected,
    guard_agent_requests)
from instanceha.service.health import HealthView, StatusFile
from instanceha.service.inventory import (  # noqa: F401 - re-exported
    Inventory, check_inventory, load_inventory, warn_shared)
from instanceha.service.reloading import Reloader
from instanceha.service.startup import (  # noqa: F401 - re-exported
    EXTEND_SLACK, Awaited, AwaitedNova, Awaiting, StartInterrupted,
    cannot_bind, check_shared_journal, error_text, journal_is_local, journal_unreachable,
    nova_unreachable)
from instanceha.journal import Journal
from instanceha.sources.audit import Fencer, FencingAudit
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.drivers.fencing.watchdog import LazyWitness
from instanceha.sources import watchdog_book
from instanceha.sources.heartbeat import HeartbeatSource
from instanceha.sources.kdump import KdumpSource
from instanceha.sources.reconciler import Reconciler
from instanceha.watchdog import SystemdLink

if TYPE_CHECKING:
    # (oslo.messaging is loaded only when notifications are enabled)
    from instanceha.sources.notifications import NotificationSource

LOG = structlog.get_logger("instanceha.service")

#: what a start step returns
R = TypeVar("R")
class _Stops(Protocol):
    def stop(self) -> None: ...


#: the parts the start bound or started, stopped if it is abandoned
Started = List[_Stops]


class Service:
    """The engine plus its sources, drivers, journal and status file.

    Built in this order, each part with explicit arguments and nothing
    assigned to it afterwards: the backends (Nova, the journal, the BMC
    drivers; stand-ins for those the start must wait for), the group
    (several replicas: the membership, built with its election hooks, and
    the lease guards on every write), the engine, the sources (each with
    its port into the engine), what /healthz judges, the operator API, the
    status file, systemd's link and the reloader.

    The engine takes its sources' readings (the reconciler's first pass,
    the control plane, the agents' cliff, the audit's unprotected hosts,
    the notifications' health) at construction, before the sources that
    hand their events to it exist: it is given this service's methods,
    which answer from :class:`~instanceha.service.sources.Sources`."""

    def __init__(self, conf: Any, compute: Optional[ComputeDriver] = None,
                 clock: Callable[[], float] = time.time,
                 on_progress: Optional[Callable[..., object]] = None,
                 fencer: Optional[Fencer] = None,
                 on_lost: Optional[Callable[[str], None]] = None,
                 notifier: Optional[sdnotify.Notifier] = None,
                 sleep: Optional[Callable[[float], bool]] = None,
                 membership: Optional[MembershipFactory] = None) -> None:
        """``compute`` (a ComputeDriver) and ``fencer`` (driver name ->
        FencingDriver) replace the real drivers, for tests. ``on_lost``
        (reason) runs when a leadership this member held lapses; by default
        the process exits at once (see doc/replicas.md). ``notifier`` (an
        :class:`instanceha.sdnotify.Notifier`) talks to systemd; by default
        the one ``NOTIFY_SOCKET`` names, if any. ``sleep(seconds)`` waits
        between two attempts at a backend at start and returns True when
        the service is to stop instead (``instanceha run``: a SIGTERM).
        ``membership(on_elected=, on_lost=)`` builds the
        coordination.Membership, for tests."""
        self.conf = conf
        self.clock = clock
        self._stopped = threading.Event()
        self._sleep: Callable[[float], bool] = sleep or self._stopped.wait
        self.awaiting = Awaiting(clock)
        self.notifier = notifier if notifier is not None \
            else sdnotify.Notifier()
        self._acting_state = Acting(clock)
        inventory = self._load_inventory()
        compute, fencer = self._open_backends(compute, fencer)
        self.group = self._group(on_lost, membership)
        self.membership = self.group.membership if self.group else None
        self.compute, fencer, journal = self._guarded(compute, fencer)
        self.engine = self._build_engine(journal, inventory, fencer,
                                         on_progress)
        # Proactive HA reads the hardware health the audit reads.
        self.proactive = ProactiveHA(conf, self.engine, clock) \
            if conf.proactive.enabled and conf.audit.enabled else None
        self.sources = sources_mod.Sources(conf, self.compute, clock,
                                           self._ports())
        self.health = HealthView(conf, clock, self.awaiting,
                                 self.sources.reconciler, self.role,
                                 self._acting_state, self.membership)
        self.api = OperatorAPI(conf, self.engine, clock,
                               health_source=self.health) \
            if conf.api.enabled else None
        self.status_file = StatusFile(conf, self.engine.snapshot,
                                      self.health.liveness, self._api_url)
        self.engine.add_listener(self.status_file.changed)
        heartbeat = self.sources.heartbeat
        if heartbeat is not None:
            self.engine.add_listener(watchdog_book.lifter(
                heartbeat.lift, heartbeat.watchdogs.condemned))
        self.systemd = SystemdLink(self, self.notifier, clock=clock)
        self.reloader = Reloader(conf, self.engine, inventory, self.notifier,
                                 lambda: self.systemd.ready)

    # -- building, step by step ------------------------------------------------
    def _load_inventory(self) -> Inventory:
        check_shared_journal(self.conf)
        try:
            return load_inventory(self.conf)
        except inventory_mod.InventoryError as e:
            raise ConfigError(str(e))

    def _open_backends(self, compute: Optional[ComputeDriver],
                       fencer: Optional[Fencer]
                       ) -> Tuple[ComputeDriver, Fencer]:
        """Nova, the journal and the BMC drivers, or stand-ins the start
        fills once Nova and the journal's database answer. Returns
        (compute, fencer)."""
        if compute is None:
            compute = self._connect_nova()
        #: Nova's stand-in while the start waits for it, else None
        self._nova_standin: Optional[Awaited] = \
            compute if isinstance(compute, Awaited) else None
        self.journal: JournalPart = self._open_journal()
        self.board = ProgressBoard()
        if fencer is None:
            conf = self.conf
            # the watchdog method reads the agents' heartbeats and
            # condemns through the listener, guarded like every write
            # (built after the fencers: found at first use)
            witness = LazyWitness(lambda: guard_agent_requests(
                getattr(self, "membership", None), getattr(
                    getattr(self, "sources", None), "heartbeat", None)))

            def fencer(name: str) -> Any:
                return fencing_pkg.load_driver(
                    name, conf, watchdog_witness=witness)
        return compute, fencer

    def _group(self, on_lost: Optional[Callable[[str], None]],
               membership: Optional[MembershipFactory]) -> Optional[Group]:
        """Several replicas: the group this member joins at start (it acts
        only while elected); None for a single process."""
        if not self.conf.coordination.backend_url:
            return None
        return Group(self.conf, self.clock, on_elected=self._on_elected,
                     on_lost=on_lost, membership=membership)

    def _guarded(self, compute: ComputeDriver, fencer: Fencer
                 ) -> Tuple[ComputeDriver, Fencer, JournalPart]:
        """(compute, fencer, journal), each write first asking whether this
        member's leadership is provably current (a coordinated member)."""
        if self.group is None:
            return compute, fencer, self.journal
        return self.group.guard(compute, fencer, self.journal)

    def _build_engine(self, journal: JournalPart, inventory: Inventory,
                      fencer: Fencer,
                      on_progress: Optional[Callable[..., object]]
                      ) -> Engine:
        # No fencing while the world was not seen since start, the control
        # plane a recovery needs is not ready, or the agents fell silent
        # at once.
        readiness = Readiness(world_seen=self._world_seen,
                              control_plane=self._control_plane,
                              agent_cliff=self._agent_cliff)
        # (the journal's stand-in forwards every call once bound)
        ctx = Context(self.conf, self.compute, cast(Journal, journal),
                      inventory, fencer,
                      self.clock, self.board, on_progress=on_progress,
                      readiness=readiness,
                      may_act=self.group.may_act if self.group else None,
                      events_healthy=self._events_healthy,
                      agent_request=self._agent_request)
        ctx.index_bmcs()    # now, not at the first fences of a storm
        health = {name: functools.partial(self._source_health, name)
                  for name in sources_mod.enabled(self.conf)}
        return Engine(self.conf, ctx, cast(Journal, journal),
                      clock=self.clock, health=health,
                      unprotected=(self._unprotected if self.conf.audit.enabled
                                   else None),
                      status_extra=self._status_extra)

    def _ports(self) -> sources_mod.Ports:
        """What the sources may do to the engine."""
        engine = self.engine
        submit_acting = (engine.submit if self.group is None
                         else self._submit_if_acting)
        return sources_mod.Ports(
            submit=engine.submit,
            submit_acting=submit_acting,
            acting=lambda: self.acting, known_hosts=engine.known_hosts,
            wants_every_report=engine.wants_every_report,
            capacity_appeared=self._capacity_appeared, urgent=engine.urgent,
            handled=engine.handled, repair=engine.repair,
            bmc_for=engine.ctx.bmc_for, fencer=engine.ctx.fencer,
            board=self.board,
            shutdown_drain=shutdown_drain.ShutdownDrains(
                engine.find, submit_acting).ask,
            hardware_health=(self.proactive.on_health
                             if self.proactive is not None else None))

    def _agent_request(self, host: str, reason: str) -> str:
        """Soft fencing's request to a vetoed host's agent (the engine's
        RESTART_COMPUTE action), through the heartbeat source, guarded
        like every other write on a coordinated member."""
        sender = guard_agent_requests(self.membership, self.sources.heartbeat)
        if sender is None:
            return "not sent: no heartbeat source to reach the hosts' agents"
        return sender.send_request(host, reason)

    # -- what the engine reads of its sources ----------------------------------
    def _world_seen(self) -> bool:
        return self.sources.world_seen()

    def _control_plane(self) -> Tuple[bool, str]:
        return self.sources.control_plane.status()

    def _agent_cliff(self) -> Optional[str]:
        return self.sources.agent_cliff()

    def _unprotected(self) -> Dict[str, str]:
        return self.sources.unprotected()

    def _events_healthy(self) -> bool:
        return self.sources.events_healthy()

    def _source_health(self, name: str) -> Mapping[str, Any]:
        return self.sources.health(name)

    # -- what the sources do to the engine ---------------------------------------
    def _capacity_appeared(self, hosts: List[str]) -> object:
        self.engine.repair.capacity_appeared()
        return self.engine.capacity_appeared(hosts)

    def _submit_if_acting(self, event: Event) -> None:
        """The kdump and heartbeat listeners' sink on a coordinated member:
        a standby binds the port but acts on nothing it hears."""
        if self._acting_state.now:
            self.engine.submit(event)

    # -- the parts, as callers name them -----------------------------------------
    @property
    def reconciler(self) -> Reconciler:
        return self.sources.reconciler

    @property
    def control_plane(self) -> ControlPlaneMonitor:
        return self.sources.control_plane

    @property
    def audit(self) -> Optional[FencingAudit]:
        return self.sources.audit

    @property
    def notifications(self) -> Optional["NotificationSource"]:
        return self.sources.notifications

    @property
    def kdump(self) -> Optional[KdumpSource]:
        return self.sources.kdump

    @property
    def heartbeat(self) -> Optional[HeartbeatSource]:
        return self.sources.heartbeat

    @property
    def inventory(self) -> Inventory:
        """The BMC inventory in use (read again on SIGHUP)."""
        return self.reloader.inventory

    @property
    def acting(self) -> bool:
        """True while this process acts (alone, or the group's elected
        member); a standby only watches."""
        return self.group is None or self._acting_state.now

    @property
    def _acting(self) -> bool:
        """True once this process started acting."""
        return self._acting_state.now

    @property
    def acting_since(self) -> Optional[float]:
        """When this process started acting (the engine started), or None."""
        return self._acting_state.since

    def role(self) -> str:
        """acting (alone, or elected and acting), elected (waiting one
        lease), standby, or lost."""
        if self.group is None:
            return "acting"
        return self.group.role(self._acting_state.now)

    def liveness(self) -> Tuple[bool, str]:
        """(healthy, reason) for GET /healthz."""
        return self.health.liveness()

    def readiness(self) -> Tuple[bool, str, str]:
        """(ready, role, reason) for GET /readyz."""
        return self.health.readiness()

    def health_view(self) -> Dict[str, Any]:
        return self.health.view()

    def write_status(self, final: bool = False) -> None:
        self.status_file.write(final=final)

    def reload(self) -> Tuple[Outcome, Reloaded]:
        """SIGHUP: the configuration files (mutable options) and the BMC
        inventory read again (Reloader.reload)."""
        return self.reloader.reload()

    def reload_inventory(self) -> Tuple[Outcome, Reloaded]:
        """What ``instanceha run`` calls on SIGHUP: :meth:`reload`."""
        return self.reload()

    def reload_config(self) -> Outcome:
        return self.reloader.reload_config()

    def _api_url(self) -> Optional[str]:
        if self.api is None or not self.api.port:
            return None
        return "http://%s:%d" % (self.conf.api.listen_address, self.api.port)

    def _status_extra(self) -> Dict[str, Any]:
        """What the status file and GET /status show beside the engine's
        snapshot: the group and what the start waits for."""
        data: Dict[str, Any] = {}
        if self.membership is not None:
            data["coordination"] = self.membership.status()
        if self.proactive is not None:
            data["proactive"] = self.proactive.status()
        starting = self.awaiting.view()
        if starting is not None:
            data["starting"] = starting
        return data

    # -- backends the start may wait for ----------------------------------------
    def _open_journal(self) -> JournalPart:
        """The journal, or a stand-in the start fills once its database
        answers (see :meth:`_await`). A journal that cannot be opened for
        another reason (a bad URL, driver, password) is a ConfigError."""
        url = self.conf.journal.connection
        try:
            return Journal(url)
        except Exception as e:   # noqa: BLE001 - a bad URL, driver, file
            if not journal_unreachable(e):
                raise ConfigError("journal: cannot open [journal] "
                                  "connection %s: %s"
                                  % (mask_url(url), error_text(e)))
            LOG.warning("journal_unreachable", journal=mask_url(url),
                        reason=error_text(e),
                        effect="the start waits for it, retried with "
                               "back-off; nothing acts meanwhile")
            return Awaited("the journal database")

    def _await(self, what: str, attempt: Callable[[], R],
               retry_on: Callable[[BaseException], bool]) -> R:
        """``attempt()`` until it returns, again after each error
        ``retry_on(error)`` accepts (a backend that does not answer yet),
        with back-off doubling from 1 s up to ``[DEFAULT]
        startup_retry_max_interval``; any other error is raised. What is
        awaited, since when and why is in the status, /healthz and
        STATUS= meanwhile, and systemd's start timeout is extended. A stop
        signal ends the wait (StartInterrupted)."""
        def before_sleep(state: Any) -> None:
            e = state.outcome.exception()
            delay = state.next_action.sleep
            error = error_text(e)
            if self.awaiting.failed(what, error, delay):
                LOG.warning("waiting_for_backend", backend=what,
                            attempt=state.attempt_number,
                            retry_in=round(delay, 1), reason=error,
                            effect="the start waits; nothing acts until "
                                   "it answers")
            self.notifier.extend_timeout(delay + EXTEND_SLACK,
                                         self.awaiting.text())

        def sleep(seconds: float) -> None:
            if self._sleep(seconds):
                raise StartInterrupted("stopped while waiting for %s (%s)"
                                       % (what, self.awaiting.text()))
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(retry_on),
            wait=tenacity.wait_exponential(
                multiplier=1, min=1,
                max=self.conf.startup_retry_max_interval),
            sleep=sleep, before_sleep=before_sleep, reraise=True)
        result = retrying(attempt)
        waited = self.awaiting.reached(what)
        if waited is not None:
            LOG.info("backend_reached", backend=what, waited=round(waited, 1),
                     reason="it answers: the start goes on")
        return result

    def _connect_nova(self) -> ComputeDriver:
        """The Nova driver, or a stand-in the start fills once Keystone
        and Nova answer. Any other ComputeError is raised (exit 2)."""
        # Imported here: openstacksdk costs ~0.3 s and a simulated or
        # injected Nova never needs it.
        from instanceha.drivers.compute.nova import NovaDriver
        try:
            return NovaDriver(self.conf)
        except ComputeError as e:
            if not nova_unreachable(e):
                raise
            LOG.warning("nova_unreachable", cloud=self.conf.cloud,
                        reason=error_text(e),
                        effect="the start waits for it, retried with "
                               "back-off; nothing acts meanwhile")
            # forwards every call to the driver once bound
            return cast(ComputeDriver, AwaitedNova())

    def _await_nova(self) -> None:
        nova = self._nova_standin
        if nova is None or nova.bound:
            return
        # Imported here: openstacksdk costs ~0.3 s and a simulated or
        # injected Nova never needs it.
        from instanceha.drivers.compute.nova import NovaDriver
        try:
            driver = self._await(
                "Nova (cloud %s)" % self.conf.cloud,
                lambda: NovaDriver(self.conf),
                lambda e: isinstance(e, ComputeError)
                and nova_unreachable(e))
        except StartInterrupted:
            raise
        except Exception as e:   # noqa: BLE001 - one line, exit status 2
            raise StartupError("Nova: %s" % error_text(e))
        nova.bind(driver)

    def _await_journal(self) -> None:
        if not isinstance(self.journal, Awaited) or self.journal.bound:
            return
        url = self.conf.journal.connection
        try:
            journal = self._await("the journal database %s" % mask_url(url),
                                  lambda: Journal(url), journal_unreachable)
        except StartInterrupted:
            raise
        except Exception as e:   # noqa: BLE001 - one line, exit status 2
            raise StartupError("journal: cannot open [journal] connection "
                               "%s: %s" % (mask_url(url), error_text(e)))
        self.journal.bind(journal)

    def _close_journal(self) -> None:
        if not isinstance(self.journal, Awaited) or self.journal.bound:
            self.journal.close()

    # -- start and stop --------------------------------------------------------
    def start(self) -> None:
        """Bind and check everything first, act second.

        1. bind the operator API socket, create the notification transport
           (a bad URL or driver fails here; the broker connection itself is
           retried later), load the journal into memory and bind the kdump
           socket (its thread only submits events to the engine's inboxes,
           which nothing drains before step 2);
        2. only then start the engine's workers (the first side effects:
           resumed fencing, Nova writes), the API, the reconciler and the
           notification listener.

        A failure in step 1 raises :class:`StartupError` naming the step,
        after closing whatever was bound; nothing was acted on.
        """
        started: Started = []
        # The status file says what the start waits for, if anything.
        self.status_file.start()
        try:
            resumed = self._prepare(started)
        except (StartupError, StartInterrupted):
            # The caller reports the error (one line); nothing to log twice.
            self._abandon_start(started)
            raise
        LOG.info("starting", hosts_in_journal=resumed,
                 bmcs=len(self.inventory), workers=self.conf.workers,
                 poll_interval=self.conf.detection.poll_interval,
                 delta=self.conf.detection.delta,
                 grace_period=self.conf.detection.grace_period,
                 threshold=self.conf.policy.threshold,
                 reason="every socket bound and transport checked")
        self.status_file.changed()
        if self.group is None:
            self._start_acting()
        else:
            # Hot standby: connected to the backend and the journal; the
            # engine and the sources start when this member is elected.
            self.group.membership.start()
        # READY=1 after the first reconcile pass, then the watchdog.
        self.systemd.start()

    def _prepare(self, started: Started) -> Optional[int]:
        """Step 1 of :meth:`start`: every part that may fail bound or
        checked, each appended to ``started``; nothing acts. Returns the
        number of hosts resumed from the journal (None on a standby)."""
        if self.api is not None:
            self._step("operator API", self.api.bind,
                       bind=(self.conf.api.listen_address,
                             self.conf.api.port))
            started.append(self.api)
            # Served from now on: /healthz, /readyz and GET /status say
            # what the start waits for. A command before the engine
            # starts waits in its inbox, as a kdump packet does.
            self.api.start()
        if self.notifications is not None:
            self._step("notifications", self.notifications.prepare)
            started.append(self.notifications)
        # A journal database, Keystone or Nova that does not answer yet
        # is waited for.
        self._step("journal", self._await_journal)
        self._step("Nova", self._await_nova)
        resumed = self._resume()
        self._bind_listeners(started)
        group = self.group
        if group is not None:
            self._step("coordination", lambda: group.join(self._await))
        return resumed

    def _resume(self) -> Optional[int]:
        """A single process reads its journal now; a standby reads it when
        elected (the acting member is writing it meanwhile), and now only
        checks that it answers."""
        if self.group is not None:
            self._step("journal", self.journal.latest)
            return None
        # Before the kdump socket so that its address map already knows
        # the journalled hosts. Only reads: queued work waits for step 2.
        resumed = self._step("journal", self.engine.resume_from_journal)
        self._step("journal", self.engine.repair.resume)
        return resumed

    def _bind_listeners(self, started: Started) -> None:
        """The kdump and agent heartbeat sockets, bound on every member (a
        standby hears and acts on nothing)."""
        if self.kdump is not None:
            self._step("kdump listener", self.kdump.start,
                       bind=(self.conf.kdump.listen_address,
                             self.conf.kdump.port))
            started.append(self.kdump)
        if self.heartbeat is not None:
            # Its errors name the address already.
            self._step("agent heartbeat listener", self.heartbeat.start)
            started.append(self.heartbeat)

    def _abandon_start(self, started: Started) -> None:
        self.status_file.stop()
        for part in reversed(started):
            try:
                part.stop()
            except Exception as stop_error:   # noqa: BLE001
                LOG.warning("start_cleanup_failed", reason=str(stop_error))
        self._close_journal()

    def _on_elected(self) -> None:
        """This member was elected: resume from the shared journal and
        start acting."""
        # (called by the group's membership: there is a group)
        group = cast(Group, self.group)
        elected(self.engine, group.membership.member, self._start_acting,
                group.lost)

    def _start_acting(self) -> None:
        self._acting_state.begin()
        self.engine.start()
        bound = self.sources.bound_at_start()
        for src in self.sources:
            if src not in bound:
                src.start()
        self.status_file.changed()

    @staticmethod
    def _step(what: str, fn: Callable[[], R],
              bind: Optional[Tuple[str, int]] = None) -> R:
        try:
            return fn()
        except (StartupError, StartInterrupted):
            raise
        except OSError as e:
            if bind is not None:
                raise cannot_bind(what, bind, e)
            raise StartupError("%s: %s" % (what, e))
        except Exception as e:   # noqa: BLE001 - one line, no traceback
            raise StartupError("%s: %s: %s" % (what, type(e).__name__, e))


    def stop(self) -> None:
        self._stopped.set()
        self.systemd.stop()
        self.status_file.stop()
        if self.acting:
            for src in self.sources:
                try:
                    src.stop()
                except Exception as e:
                    LOG.warning("source_stop_failed", reason=str(e))
        else:
            for src in self.sources.bound_at_start():
                src.stop()
        self.engine.stop()
        self.engine.ctx.close_fencers()
        if self.membership is not None:
            # After the engine stopped: the next member starts acting only
            # once this one no longer does.
            self.membership.stop()
        if self.api is not None:
            self.api.stop()
        try:
            self.write_status(final=True)
        finally:
            self._close_journal()
