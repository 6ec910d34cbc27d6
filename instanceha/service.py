"""Assemble a running instanceha from configuration."""

import json
import os
import sys
import tempfile
import threading
import time

import structlog
import tenacity

from instanceha import conf as conf_pkg
from instanceha.api.server import OperatorAPI
from instanceha import sdnotify
from instanceha.log import mask_url
from instanceha.conf import reload as conf_reload
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.engine.context import Context
from instanceha.engine.engine import Engine
from instanceha.engine.fencing_gate import Readiness
from instanceha.engine.progress import ProgressBoard
# Re-exported: callers and tests name them as instanceha.service.*.
from instanceha.errors import ConfigError, StartupError  # noqa: F401
from instanceha.journal import Journal
from instanceha.sources.audit import FencingAudit
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.sources.reconciler import Reconciler
from instanceha import watchdog
from instanceha.watchdog import SystemdLink

LOG = structlog.get_logger("instanceha.service")


class StartInterrupted(Exception):
    """SIGTERM (or SIGINT) while the start waited for a backend; nothing
    was acted on."""


#: Seconds added to the time systemd allows the start, each time it waits
#: again for a backend, beyond the next attempt's back-off (the attempt's
#: own connect timeout and some slack).
EXTEND_SLACK = 60.0


def journal_is_local(url):
    """A SQLite journal: a file on this node."""
    return url.strip().lower().startswith("sqlite")


def check_shared_journal(conf):
    """Refuse replicas that would each keep their own history."""
    if conf.coordination.backend_url \
            and journal_is_local(conf.journal.connection):
        raise ConfigError(
            "[coordination] backend_url is set but [journal] connection is "
            "SQLite, a file on this node: each replica would keep its own "
            "history and a member elected on another node could not resume "
            "from it; set [journal] connection to one MySQL/MariaDB or "
            "PostgreSQL database shared by every replica, or unset "
            "[coordination] backend_url")


#: MySQL/MariaDB answers a retry cannot change: access denied (1044, 1045,
#: 1698), unknown database (1049).
_MYSQL_REFUSED = frozenset({1044, 1045, 1049, 1698})
#: PostgreSQL's equivalents, in the text of a failed connection.
_PG_REFUSED = ("password authentication failed", "no pg_hba.conf entry",
               "does not exist", "authentication failed")


def journal_unreachable(e):
    """True when opening the journal failed because its database does not
    answer (yet): refused, timed out, starting up, too many connections.
    False for what waiting cannot cure: a bad URL or driver, a wrong
    password or database name, a SQLite file that cannot be opened."""
    import sqlalchemy.exc as sa_exc
    if not isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        return False
    orig = getattr(e, "orig", None)
    if type(orig).__module__.startswith("sqlite3"):
        return False
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0] not in _MYSQL_REFUSED
    text = str(orig)
    return not any(t in text for t in _PG_REFUSED)


#: keystoneauth / openstacksdk errors that say Keystone or Nova did not
#: answer (yet), by class name anywhere in the cause chain.
_NOVA_NO_ANSWER = frozenset({
    "ConnectFailure", "ConnectTimeout", "ConnectionError",
    "RetriableConnectionFailure", "UnknownConnectionError",
    "DiscoveryFailure", "ServiceUnavailable", "GatewayTimeout",
    "BadGateway", "InternalServerError", "HttpServerError"})


def nova_unreachable(e):
    """True when connecting to Nova at start failed because Keystone or
    Nova did not answer (yet): refused, timed out, a 5xx, no version
    document. False for what waiting cannot cure: an unknown cloud in
    clouds.yaml, rejected credentials (401/403), a Nova too old."""
    chain = []
    x = e
    while x is not None and len(chain) < 8 and x not in chain:
        chain.append(x)
        x = x.__cause__ or x.__context__
    for x in chain:
        status = getattr(x, "http_status", None) \
            or getattr(x, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            return False
    for x in chain:
        status = getattr(x, "http_status", None) \
            or getattr(x, "status_code", None)
        if isinstance(status, int) and status >= 500:
            return True
        if type(x).__name__ in _NOVA_NO_ANSWER \
                or isinstance(x, (OSError, TimeoutError)):
            return True
    return False


def _error_text(e):
    """One line for an error, a URL's password masked; SQLAlchemy's
    wrapper (its SQL and link) left out."""
    orig = getattr(e, "orig", None)
    if orig is not None:
        e = orig
    text = " ".join(str(e).split())
    if type(e).__name__ == "CoordinationError":
        return mask_url(text)     # already "<its cause>: <text>"
    return mask_url("%s: %s" % (type(e).__name__, text))


def _iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class _Awaited:
    """Stands for a backend the start waits for (one that did not answer
    when the service was built): forwards to it once :meth:`bind` gave
    it; before that, any use raises."""

    def __init__(self, what):
        self._what = what
        self._target = None

    def bind(self, target):
        self._target = target

    @property
    def bound(self):
        return self._target is not None

    def __getattr__(self, name):
        target = self.__dict__.get("_target")
        if target is None:
            raise RuntimeError("%s not reached yet"
                               % self.__dict__.get("_what"))
        return getattr(target, name)


class _AwaitedNova(_Awaited):
    """Nova's stand-in. The sources take the driver's Nova clock and call
    record when they are built: the stand-in has them from the start and
    hands them to the driver it is bound to, so all share one of each."""

    def __init__(self):
        super().__init__("Nova")
        from instanceha.drivers.compute.base import CallRecord
        from instanceha.drivers.compute.nova_clock import NovaClock
        self.nova_clock = NovaClock()
        self.api_record = CallRecord()

    def bind(self, target):
        # ComputeDriver keeps them per object, made on first use.
        target.__dict__["_nova_clock"] = self.nova_clock
        target.__dict__["_call_record"] = self.api_record
        super().bind(target)


class Awaiting:
    """What the start waits for, since when and why: shown by the status
    file, GET /status, /healthz and systemd's STATUS=."""

    def __init__(self, clock):
        self.clock = clock
        self._mu = threading.Lock()
        self._what = self._error = self._since = self._retry_in = None
        self._attempts = 0

    def failed(self, what, error, retry_in):
        with self._mu:
            changed = what != self._what or error != self._error
            if what != self._what:
                self._what, self._since, self._attempts = \
                    what, self.clock(), 0
            self._attempts += 1
            self._error, self._retry_in = error, retry_in
        return changed

    def reached(self, what):
        """The awaited backend answered: seconds waited (None when it was
        not awaited)."""
        with self._mu:
            if self._what != what:
                return None
            waited = self.clock() - self._since
            self._what = self._error = self._since = None
            return waited

    def text(self):
        with self._mu:
            if self._what is None:
                return None
            return "starting: waiting for %s (%s) since %s" % (
                self._what, self._error, _iso(self._since))

    def view(self):
        text = self.text()
        with self._mu:
            if self._what is None:
                return None
            return {"waiting_for": self._what, "error": self._error,
                    "since": self._since, "attempts": self._attempts,
                    "retry_in": self._retry_in, "text": text}


def check_inventory(conf, inv):
    """Refuse what parsing allows but this service must not run with."""
    for bmc in inv.values():
        if any(m.driver == "noop" for m in bmc.methods) \
                and not conf.fencing.allow_unfenced:
            raise ConfigError(
                "inventory: host %s: driver noop does not fence; set "
                "[fencing] allow_unfenced = true to allow it (test clouds "
                "only)" % bmc.host)


def _warn_shared(inv):
    for address, hosts in inventory_mod.shared(inv):
        LOG.warning("bmc_shared", hosts=",".join(hosts), address=address,
                    reason="several inventory entries reach one BMC: "
                           "powering it off for one host kills the others; "
                           "refused while another of them is up. Remove "
                           "the entry of a renamed host's old name")


def load_inventory(conf):
    inv = inventory_mod.load(conf.fencing.inventory, fencing_pkg.FIELDS)
    check_inventory(conf, inv)
    _warn_shared(inv)
    return inv


class Service:
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
        self._nova_standin = compute if isinstance(compute, _Awaited) \
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
                                     powered_off=self._powered_off)
        health = {"reconciler": self.reconciler.health}
        self.sources = [self.reconciler]
        # No fencing while the control plane a recovery needs is not ready.
        self.control_plane = ControlPlaneMonitor(
            conf, compute, clock, reconciler_health=self.reconciler.health)
        health["control_plane"] = self.control_plane.health
        self.sources.append(self.control_plane)
        readiness = Readiness(
            world_seen=lambda: self.reconciler.passes > 0,
            control_plane=self.control_plane.status)
        ctx = Context(conf, compute, journal, self.inventory,
                      fencer, clock, self.board, on_progress=on_progress,
                      readiness=readiness,
                      may_act=(self.membership.may_act
                               if self.membership is not None else None),
                      events_healthy=self._events_healthy)
        if conf.audit.enabled:
            # Could each host be fenced now? Checked before any recovery
            # could be needed, then every [audit] interval.
            self.audit = FencingAudit(conf, compute, ctx.bmc_for,
                                      ctx.fencer, clock, sink=sink)
            health["audit"] = self.audit.health
            self.sources.append(self.audit)
        self.notifications = self.kdump = None
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
        self.notifier = notifier if notifier is not None \
            else sdnotify.Notifier()
        self.systemd = SystemdLink(self, self.notifier, clock=clock)

    def _sink(self, event):
        """Where the sources' events go: the engine's inboxes."""
        self.engine.submit(event)

    def _capacity_appeared(self, hosts):
        return self.engine.capacity_appeared(hosts)

    def _powered_off(self):
        """Hosts the audit's power watch saw go Off (none without it)."""
        return self.audit.powered_off() if self.audit is not None else set()

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
                                  % (mask_url(url), _error_text(e)))
            LOG.warning("journal_unreachable", journal=mask_url(url),
                        reason=_error_text(e),
                        effect="the start waits for it, retried with "
                               "back-off; nothing acts meanwhile")
            return _Awaited("the journal database")

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
            error = _error_text(e)
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
        from instanceha.drivers.compute.base import ComputeError
        from instanceha.drivers.compute.nova import NovaDriver
        try:
            return NovaDriver(self.conf)
        except ComputeError as e:
            if not nova_unreachable(e):
                raise
            LOG.warning("nova_unreachable", cloud=self.conf.cloud,
                        reason=_error_text(e),
                        effect="the start waits for it, retried with "
                               "back-off; nothing acts meanwhile")
            return _AwaitedNova()

    def _await_nova(self):
        nova = self._nova_standin
        if nova is None or nova.bound:
            return
        from instanceha.drivers.compute.base import ComputeError
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
            raise StartupError("Nova: %s" % _error_text(e))
        nova.bind(driver)

    def _await_journal(self):
        if not isinstance(self.journal, _Awaited) or self.journal.bound:
            return
        url = self.conf.journal.connection
        try:
            journal = self._await("the journal database %s" % mask_url(url),
                                  lambda: Journal(url), journal_unreachable)
        except StartInterrupted:
            raise
        except Exception as e:   # noqa: BLE001 - one line, exit status 2
            raise StartupError("journal: cannot open [journal] connection "
                               "%s: %s" % (mask_url(url), _error_text(e)))
        self.journal.bind(journal)

    def _close_journal(self):
        if not isinstance(self.journal, _Awaited) or self.journal.bound:
            self.journal.close()

    def _coordinate(self, compute, fencer):
        """Several replicas: join the group at start, act only while
        elected. Every write to Nova, a BMC or the journal first asks
        whether this member's leadership is provably current."""
        from instanceha import coordination
        c = self.conf.coordination
        if self._membership is not None:
            self.membership = self._membership
            self.membership.on_elected = self._on_elected
            self.membership.on_lost = self._on_lost
        else:
            self.membership = coordination.Membership(
                c.backend_url, group=c.group, lease=c.lease,
                margin=c.margin, interval=c.heartbeat_interval,
                on_elected=self._on_elected, on_lost=self._on_lost,
                clock=self.clock)
        may_act = self.membership.may_act
        return (coordination.guard_compute(compute, may_act),
                coordination.guard_fencer(fencer, may_act),
                coordination.guard_journal(self.journal, may_act))

    def _on_elected(self):
        """This member was elected: resume from the shared journal (what
        the previous acting member recorded) and start acting."""
        try:
            resumed = self.engine.resume_from_journal()
        except Exception as e:   # noqa: BLE001
            self._on_lost("cannot resume from the journal: %s: %s"
                          % (type(e).__name__, e))
            return
        LOG.warning("acting", member=self.membership.member,
                    hosts_in_journal=resumed,
                    reason="elected: resumed from the shared journal")
        self._start_acting()

    def _on_lost(self, reason):
        if self._on_lost_hook is not None:
            self._on_lost_hook(reason)
            return
        from instanceha import coordination
        # No cleanup: every thread of this process must stop at once, and
        # the service manager restarts it as a standby.
        LOG.critical("exiting", member=self.membership.member,
                     status=coordination.EXIT_LOST, reason=reason)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:   # noqa: BLE001 - exiting anyway
                pass
        os._exit(coordination.EXIT_LOST)

    @property
    def acting(self):
        """True while this process acts (alone, or the group's elected
        member); a standby only watches."""
        return self.membership is None or self._acting

    def _start_acting(self):
        self.acting_since = self.clock()
        self._acting = True
        self.engine.start()
        for src in self.sources:
            if src is not self.kdump:
                src.start()
        self._status_dirty.set()

    def _submit_if_acting(self, event):
        """The kdump listener's sink on a coordinated member: a standby
        binds the port but acts on nothing it hears."""
        if self._acting:
            self.engine.submit(event)

    def _add_event_sources(self, sink):
        """The notification and kdump sources, where enabled. Returns
        their health callables by name."""
        conf = self.conf
        health = {}
        if getattr(conf, "notifications", None) is not None \
                and conf.notifications.enabled:
            from instanceha.sources.notifications import NotificationSource
            src = NotificationSource(conf, sink, self.clock, self.board)
            self.sources.append(src)
            self.notifications = src
            health["notifications"] = src.health
        if getattr(conf, "kdump", None) is not None and conf.kdump.enabled:
            from instanceha.sources.kdump import KdumpSource
            if self.membership is not None:
                sink = self._submit_if_acting
            src = KdumpSource(conf, sink, self.clock,
                              lambda: self.engine.known_hosts())
            self.sources.append(src)
            self.kdump = src
            health["kdump"] = src.health
        return health

    def write_status(self):
        path = self.conf.status_file
        if not path:
            return
        data = self.engine.snapshot()
        if self.api is not None and self.api.port:
            data["api"] = "http://%s:%d" % (self.conf.api.listen_address,
                                            self.api.port)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".status-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(tmp, path)

    def _status_loop(self):
        """Rewrite the status file soon after a change (at most every
        0.2 s, however many hosts change at once) and every 2 s anyway."""
        while not self._status_stop.is_set():
            self._status_dirty.wait(2.0)
            self._status_dirty.clear()
            try:
                self.write_status()
            except Exception as e:
                LOG.warning("status_write_failed", reason=str(e))
            self._status_stop.wait(0.2)

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

    def _join(self):
        """Join the group; a backend that does not answer (yet) is waited
        for, one that refuses (a wrong password, an unknown driver) stops
        the start."""
        from instanceha import coordination
        url = mask_url(self.conf.coordination.backend_url)
        try:
            self._await("the coordination backend %s" % url,
                        self.membership.connect,
                        lambda e: isinstance(e, coordination.CoordinationError)
                        and e.retry)
        except coordination.CoordinationError as e:
            raise StartupError(
                "cannot use [coordination] backend_url %s: %s"
                % (url, mask_url(e)))

    @staticmethod
    def _step(what, fn, bind=None):
        try:
            return fn()
        except (StartupError, StartInterrupted):
            raise
        except OSError as e:
            if bind is not None:
                host, port = bind
                where = ("[%s]:%s" if ":" in str(host) else "%s:%s") % bind
                raise StartupError("%s: cannot bind %s: %s" % (what, where, e))
            raise StartupError("%s: %s" % (what, e))
        except Exception as e:   # noqa: BLE001 - one line, no traceback
            raise StartupError("%s: %s: %s" % (what, type(e).__name__, e))

    def reload_inventory(self):
        """What ``instanceha run`` calls on SIGHUP: :meth:`reload`."""
        return self.reload()

    def reload(self):
        """SIGHUP: re-read the configuration files (mutable options) and
        the BMC inventory, telling systemd (RELOADING=1, then READY=1).
        Returns (config Outcome, inventory reload result)."""
        if self.systemd.ready:
            self.notifier.reloading()
        try:
            config = self.reload_config()
            inventory = self._reload_inventory()
        finally:
            if self.systemd.ready:
                self.notifier.ready("reloaded the configuration")
            else:
                # READY=1 still waits for the first reconcile pass.
                self.notifier.status("reloaded the configuration; starting")
        return config, inventory

    def reload_config(self):
        """Apply the mutable options changed in the configuration files;
        a changed immutable option keeps its value and is named in a
        warning; a file that would not start the service changes
        nothing. One log line per decision."""
        files = ",".join(conf_pkg.config_files(self.conf)) or None
        r = conf_reload.reload(self.conf)
        if not r.ok:
            LOG.error("config_reload_failed", files=files, reason=r.error,
                      effect="the configuration in use stays, unchanged")
            return r
        if r.applied:
            # The engine keeps what it derived from the options.
            self.engine.reload_settings()
            LOG.info("config_reloaded", files=files,
                     changed=conf_reload.describe(r.applied),
                     reason="SIGHUP: mutable options applied")
        if r.ignored:
            LOG.warning("config_change_ignored", files=files,
                        options=",".join("%s.%s" % (c[0], c[1])
                                         for c in r.ignored),
                        changed=conf_reload.describe(r.ignored),
                        reason="not mutable: the value in use stays until "
                               "a restart")
        if not r.applied and not r.ignored:
            LOG.info("config_reloaded", files=files, changed=None,
                     reason="SIGHUP: no option changed")
        return r

    def _reload_inventory(self):
        """Read the BMC inventory again. A broken file (or one this
        service must refuse) keeps the inventory in use, and says why."""
        path = self.conf.fencing.inventory
        r = inventory_mod.reload(path, fencing_pkg.FIELDS, self.inventory,
                                 check=lambda inv: check_inventory(self.conf,
                                                                   inv))
        if not r.ok:
            LOG.error("inventory_reload_failed", path=path, reason=r.error,
                      effect="the previous inventory stays in use")
            return r
        self.inventory = r.inventory
        self.engine.ctx.inventory = r.inventory
        LOG.info("inventory_reloaded", path=path, hosts=len(r.inventory),
                 added=",".join(r.added) or None,
                 removed=",".join(r.removed) or None,
                 changed=",".join(r.changed) or None,
                 reason="SIGHUP")
        _warn_shared(r.inventory)
        return r

    # -- health ----------------------------------------------------------------
    def role(self):
        """acting (alone, or elected and acting), elected (waiting one
        lease), standby, or lost."""
        if self.membership is None or self._acting:
            return "acting"
        role = self.membership.status()["role"]
        # Elected and past the wait, but the engine not started yet.
        return "elected" if role == "acting" else role

    def health_view(self):
        """What /healthz and /readyz judge (watchdog.liveness/readiness)."""
        rec = self.reconciler.health()
        view = {"starting": self.awaiting.text(), "role": self.role(),
                "acting_since": self.acting_since,
                "last_pass_at": rec.get("last_pass_at"),
                "passes": self.reconciler.passes}
        m = self.membership
        if m is not None:
            st = m.status()
            view.update(group=st["group"], acting_member=st["acting_member"],
                        beat_attempt_at=m.beat_attempt_at,
                        beat_ok_at=m.beat_ok_at,
                        backend_error=st["backend_error"],
                        backend_error_since=st["backend_error_since"],
                        reason=st["reason"])
        return view

    def liveness(self):
        """(healthy, reason) for GET /healthz."""
        return watchdog.liveness(self.health_view(), self.clock(),
                                 self.conf.api.stale_after)

    def readiness(self):
        """(ready, role, reason) for GET /readyz."""
        return watchdog.readiness(self.health_view())

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
        elif self.kdump is not None:
            self.kdump.stop()
        self.engine.stop()
        self.engine.ctx.close_fencers()
        if self.membership is not None:
            # After the engine stopped: the next member starts acting only
            # once this one no longer does.
            self.membership.stop()
        if self.api is not None:
            self.api.stop()
        try:
            self.write_status()
        finally:
            self._close_journal()
