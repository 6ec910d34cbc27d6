"""Assemble a running instanceha from configuration."""

import threading
import time

import structlog
import tenacity

from instanceha.api.server import OperatorAPI
from instanceha import sdnotify
from instanceha.log import mask_url
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute.base import ComputeError
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.engine.context import Context
from instanceha.engine.engine import Engine
from instanceha.engine.fencing_gate import Readiness
from instanceha.engine.progress import ProgressBoard
from instanceha.engine import soft_fence
# Re-exported: callers and tests name them as instanceha.service.*.
from instanceha.errors import ConfigError, StartupError  # noqa: F401
from instanceha.service.group import Group
from instanceha.service.health import Health
from instanceha.service.inventory import (  # noqa: F401 - re-exported
    check_inventory, load_inventory, warn_shared)
from instanceha.service.reloading import Reloading
from instanceha.service.startup import (  # noqa: F401 - re-exported
    EXTEND_SLACK, Awaited, AwaitedNova, Awaiting, StartInterrupted,
    cannot_bind, check_shared_journal, error_text, journal_is_local, journal_unreachable,
    nova_unreachable)
from instanceha.journal import Journal
from instanceha.sources.audit import FencingAudit
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.sources.heartbeat import HeartbeatSource
from instanceha.sources.kdump import KdumpSource
from instanceha.sources.reconciler import Reconciler
from instanceha.watchdog import SystemdLink

LOG = structlog.get_logger("instanceha.service")


class Service(Group, Reloading, Health):
    """The engine plus its sources, drivers, journal and status file."""

    def __init__(self, conf, compute=None, clock=time.time, on_progress=None,
                 fencer=None, on_lost=None, notifier=None, sleep=None,
                 membership=None):
        """``compute`` (a ComputeDriver) and ``fencer`` (driver name ->
        FencingDriver) replace the real drivers, for tests. ``on_lost``
        (reason) runs when a leadership this member held lapses; by default
        the process exits at once (see doc/replicas.md). ``notifier`` (an
        :class:`instanceha.sdnotify.Notifier`) talks to systemd; by default
        the one ``NOTIFY_SOCKET`` names, if any. ``sleep(seconds)`` waits
        between two attempts at a backend at start and returns True when
        the service is to stop instead (``instanceha run``: a SIGTERM).
        ``membership`` replaces the coordination.Membership, for tests."""
        self.conf = conf
        self.clock = clock
        self._on_lost_hook = on_lost
        self._acting = False
        #: when this process started acting (the engine started), or None
        self.acting_since = None
        self.membership = None
        self._membership = membership
        self._stopped = threading.Event()
        self._sleep = sleep or self._stopped.wait
        self.awaiting = Awaiting(clock)
        check_shared_journal(conf)
        try:
            self.inventory = load_inventory(conf)
        except inventory_mod.InventoryError as e:
            raise ConfigError(str(e))
        if compute is None:
            compute = self._connect_nova()
        #: Nova's stand-in while the start waits for it, else None
        self._nova_standin = compute if isinstance(compute, Awaited) \
            else None
        self.compute = compute
        self.journal = self._open_journal()
        self.board = ProgressBoard()
        if fencer is None:
            def fencer(name):
                return fencing_pkg.load_driver(name, conf)
        journal = self.journal
        if conf.coordination.backend_url:
            compute, fencer, journal = self._coordinate(compute, fencer)
        self.compute = compute
        # The sources are built before the engine and hand their events
        # to it through this sink (bound when the engine exists).
        sink = self._sink
        self.audit = None
        self.reconciler = Reconciler(conf, compute, sink, clock,
                                     on_capacity=self._capacity_appeared,
                                     powered_off=self._powered_off,
                                     wants_every_report=self._watched)
        health = {"reconciler": self.reconciler.health}
        self.sources = [self.reconciler]
        # No fencing while the control plane a recovery needs is not ready.
        self.control_plane = ControlPlaneMonitor(
            conf, compute, clock, reconciler_health=self.reconciler.health)
        health["control_plane"] = self.control_plane.health
        self.sources.append(self.control_plane)
        readiness = Readiness(
            world_seen=lambda: self.reconciler.passes > 0,
            control_plane=self.control_plane.status,
            agent_cliff=lambda: (self.heartbeat.cliff()
                                 if self.heartbeat is not None else None))
        ctx = Context(conf, compute, journal, self.inventory,
                      fencer, clock, self.board, on_progress=on_progress,
                      readiness=readiness,
                      may_act=(self.membership.may_act
                               if self.membership is not None else None),
                      events_healthy=self._events_healthy)
        ctx.index_bmcs()    # now, not at the first fences of a storm
        if conf.audit.enabled:
            # Could each host be fenced now? Checked before any recovery
            # could be needed, then every [audit] interval.
            self.audit = FencingAudit(conf, compute, ctx.bmc_for,
                                      ctx.fencer, clock, sink=sink,
                                      give_way=lambda: self.engine.urgent(),
                                      handled=lambda host:
                                      self.engine.handled(host))
            health["audit"] = self.audit.health
            self.sources.append(self.audit)
        self.notifications = self.kdump = self.heartbeat = None
        self.repair_sweep = None
        health.update(self._add_event_sources(sink))
        self.engine = Engine(
            conf, ctx, journal, clock=clock, health=health,
            unprotected=self.audit.unprotected if self.audit else None,
            status_extra=self._status_extra)
        self.api = None
        if conf.api.enabled:
            self.api = OperatorAPI(conf, self.engine, clock)
            # /healthz and /readyz judge this service, not only its
            # engine (a standby runs no reconciler).
            self.api.health_source = self
        self._status_stop = threading.Event()
        self._status_dirty = threading.Event()
        self.engine.add_listener(lambda *a: self._status_dirty.set())
        if self.heartbeat is not None:
            # Soft fencing: a vetoed host's agent restarts nova-compute.
            self.engine.add_listener(soft_fence.listener(
                conf, journal, self._agent_requests(self.heartbeat), clock))
        self.notifier = notifier if notifier is not None \
            else sdnotify.Notifier()
        self.systemd = SystemdLink(self, self.notifier, clock=clock)

    def _sink(self, event):
        """Where the sources' events go: the engine's inboxes."""
        self.engine.submit(event)

    def _capacity_appeared(self, hosts):
        self.engine.repair.capacity_appeared()
        return self.engine.capacity_appeared(hosts)

    def _powered_off(self):
        """Hosts the audit's power watch saw go Off (none without it)."""
        return self.audit.powered_off() if self.audit is not None else set()

    def _watched(self):
        """(ids, names) of the hosts whose every Nova row the engine
        wants (engine.hosts.Hosts.wants_every_report)."""
        return self.engine.wants_every_report()

    def _events_healthy(self):
        """True while the notification stream reliably reports evacuation
        progress (connected and not quiet)."""
        if self.notifications is None:
            return False
        h = self.notifications.health()
        return bool(h.get("connected")) and not h.get("quiet")

    def _status_extra(self):
        """What the status file and GET /status show beside the engine's
        snapshot: the group and what the start waits for."""
        data = {}
        if self.membership is not None:
            data["coordination"] = self.membership.status()
        starting = self.awaiting.view()
        if starting is not None:
            data["starting"] = starting
        return data

    def _open_journal(self):
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

    def _await(self, what, attempt, retry_on):
        """``attempt()`` until it returns, again after each error
        ``retry_on(error)`` accepts (a backend that does not answer yet),
        with back-off doubling from 1 s up to ``[DEFAULT]
        startup_retry_max_interval``; any other error is raised. What is
        awaited, since when and why is in the status, /healthz and
        STATUS= meanwhile, and systemd's start timeout is extended. A stop
        signal ends the wait (StartInterrupted)."""
        def before_sleep(state):
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

        def sleep(seconds):
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

    def _connect_nova(self):
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
            return AwaitedNova()

    def _await_nova(self):
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

    def _await_journal(self):
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

    def _close_journal(self):
        if not isinstance(self.journal, Awaited) or self.journal.bound:
            self.journal.close()

    def _add_event_sources(self, sink):
        """The notification, kdump and agent heartbeat sources, where
        enabled. Returns their health callables by name."""
        conf = self.conf
        health = {}
        if getattr(conf, "notifications", None) is not None \
                and conf.notifications.enabled:
            # Imported here: oslo.messaging is loaded only when
            # notifications are enabled.
            from instanceha.sources.notifications import NotificationSource
            repair_sink = None
            if conf.instance_repair.enabled:
                def repair_sink(facts, at, stale=False):
                    self.engine.repair.from_notification(facts, at,
                                                         stale=stale)
            src = NotificationSource(conf, sink, self.clock, self.board,
                                     repair_sink=repair_sink)
            self.sources.append(src)
            self.notifications = src
            health["notifications"] = src.health
        if conf.instance_repair.enabled:
            # Instance repair's fallback: Nova's broken servers, read.
            from instanceha.sources.repair_sweep import RepairSweep
            src = RepairSweep(
                conf, self.compute,
                lambda server, actions, at: self.engine.repair.from_sweep(
                    server, actions, at), self.clock,
                watched=lambda n: self.engine.repair.set_watched(n),
                skip=lambda server: self.engine.repair.sweep_skips(server))
            self.sources.append(src)
            self.repair_sweep = src
            health["repair_sweep"] = src.health
        if getattr(conf, "kdump", None) is not None and conf.kdump.enabled:
            if self.membership is not None:
                sink = self._submit_if_acting
            src = KdumpSource(conf, sink, self.clock,
                              lambda: self.engine.known_hosts())
            self.sources.append(src)
            self.kdump = src
            health["kdump"] = src.health
        if getattr(conf, "agent", None) is not None \
                and conf.agent.listen_addresses:
            # Bound at start like kdump's socket; a standby hears the
            # beats and acts on none of them.
            guest_sink = None
            if conf.instance_repair.enabled:
                def guest_sink(event, at):
                    # The agents' guest events: news for instance repair
                    # (a standby hears them and acts on none).
                    if self.membership is None or self._acting:
                        self.engine.repair.from_agent(event, at)
            src = HeartbeatSource(conf, self._submit_if_acting
                                  if self.membership is not None else sink,
                                  self.clock,
                                  lambda: self.engine.known_hosts(),
                                  guest_sink=guest_sink)
            self.sources.append(src)
            self.heartbeat = src
            health["agent_heartbeat"] = src.health
        return health

    def start(self):
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
        started = []
        # The status file says what the start waits for, if anything.
        threading.Thread(target=self._status_loop, daemon=True,
                         name="instanceha-status").start()
        try:
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
            # A journal database, Keystone or Nova that does not answer
            # yet is waited for.
            self._step("journal", self._await_journal)
            self._step("Nova", self._await_nova)
            if self.membership is None:
                # Before the kdump socket so that its address map already
                # knows the journalled hosts. Only reads: queued work waits
                # for step 2.
                resumed = self._step("journal",
                                     self.engine.resume_from_journal)
                self._step("journal", self.engine.repair.resume)
            else:
                # A standby reads the journal when elected (the acting
                # member is writing it meanwhile); now only that it answers.
                self._step("journal", self.journal.latest)
                resumed = None
            if self.kdump is not None:
                self._step("kdump listener", self.kdump.start,
                           bind=(self.conf.kdump.listen_address,
                                 self.conf.kdump.port))
                started.append(self.kdump)
            if self.heartbeat is not None:
                # Its errors name the address already.
                self._step("agent heartbeat listener", self.heartbeat.start)
                started.append(self.heartbeat)
            if self.membership is not None:
                self._step("coordination", self._join)
        except (StartupError, StartInterrupted):
            # The caller reports the error (one line); nothing to log twice.
            self._status_stop.set()
            self._status_dirty.set()
            for part in reversed(started):
                try:
                    part.stop()
                except Exception as stop_error:   # noqa: BLE001
                    LOG.warning("start_cleanup_failed",
                                reason=str(stop_error))
            self._close_journal()
            raise
        LOG.info("starting", hosts_in_journal=resumed,
                 bmcs=len(self.inventory), workers=self.conf.workers,
                 poll_interval=self.conf.detection.poll_interval,
                 delta=self.conf.detection.delta,
                 grace_period=self.conf.detection.grace_period,
                 threshold=self.conf.policy.threshold,
                 reason="every socket bound and transport checked")
        self._status_dirty.set()
        if self.membership is None:
            self._start_acting()
        else:
            # Hot standby: connected to the backend and the journal; the
            # engine and the sources start when this member is elected.
            self.membership.start()
        # READY=1 after the first reconcile pass, then the watchdog.
        self.systemd.start()

    @staticmethod
    def _step(what, fn, bind=None):
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

    def stop(self):
        self._stopped.set()
        self.systemd.stop()
        self._status_stop.set()
        self._status_dirty.set()
        if self._acting or self.membership is None:
            for src in self.sources:
                try:
                    src.stop()
                except Exception as e:
                    LOG.warning("source_stop_failed", reason=str(e))
        else:
            for src in self._bound_at_start():
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
