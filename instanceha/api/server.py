"""Operator API: status, health, Prometheus metrics, and host commands.

    GET  /status                      the engine's snapshot (JSON)
    GET  /healthz                     liveness: 200 while the process makes
                                      progress (acting: the reconciler is
                                      recent; standby: it follows its group;
                                      starting: it waits for a backend), else 503
    GET  /readyz                      200 when this process acts for every
                                      host, else 503 (standby, starting)
    GET  /metrics                     Prometheus text format
    POST /hosts/<host>/suspend        {"reason": "...", "seconds": 3600}
                                      or {"reason": "...", "forever": true}
    POST /hosts/<host>/maintenance    {"reason": "..."}
    POST /hosts/<host>/drain          {"reason": "...", "then":
                                      "maintenance"|"decommission",
                                      "concurrency": N, "force": false,
                                      "dry_run": false}
    POST /hosts/<host>/resume         {"reason": "...", "fail_back": bool}
                                      (fail_back: a drained host's servers
                                      move back; absent: [maintenance]
                                      fail_back)
    POST /storm/resume                {"reason": "..."}  lift the storm hold
    GET  /hosts/<host>/history        the host's journal, in time order
                                      (?since=&until=&limit=&marker=)
    GET  /servers/<id>/repair         the server's instance repair: its
                                      case, markers and journal rows
    POST /servers/<id>/repair         {"reason": "...", "level": "reboot"}
                                      a one-off repair (up to the level), or
                                      {"clear": true} to clear a failure

Commands become operator events; the state machine decides what they mean
in the host's current state. A suspension says how long: seconds (positive,
finite, at most ``[api] max_suspend_seconds``) or forever, never neither.
The 202 answer is {"host", "command", "state" (before the command),
"still_running" (the host's running work, or null)}, plus "until" (epoch
seconds, null = forever) for suspend. A drain's preflight is read from Nova
before the command is accepted: its plan is in the answer ("preflight"),
a refused one (without force) answers 409 with every reason, and dry_run
answers 200 with the plan and changes nothing.

Served by cheroot's threaded WSGI servers, one per listener: the unix
socket ``[api] unix_socket`` (the whole API; its directory decides who may
command) and TCP ``listen_address:port`` (the whole API with Keystone or
``allow_unauthenticated_tcp``, else only /healthz, /readyz and /metrics).
:mod:`instanceha.api.wsgi` checks the transport, authentication and policy
before :meth:`OperatorAPI.handle` (which tests call directly). See
doc/api.md.

Beside this module: :mod:`instanceha.api.listeners` (the cheroot servers),
:mod:`instanceha.api.payload` (request bodies and JSON answers),
:mod:`instanceha.api.collector` and :mod:`instanceha.api.metrics` (what
/metrics reports).
"""

import threading

from prometheus_client import CollectorRegistry, generate_latest
import structlog

from instanceha.api import auth
from instanceha.api import history as history_mod
from instanceha.api import listeners
from instanceha.api import metrics as metrics_mod
from instanceha.api import repair as repair_api
from instanceha.api import wsgi
from instanceha.api.collector import SnapshotCollector
from instanceha.api.commands import COMMANDS
from instanceha.api.payload import answer, load_object, suspend_seconds
from instanceha.conf import api as api_conf
from instanceha.errors import ConfigError
from instanceha.events import (DrainRequest, Event, ResumeRequest,
                               Suspension)
from instanceha.fsm import machine

LOG = structlog.get_logger("instanceha.api")

_HINTS = {"maintenance": " (only where no recovery is under way; suspend "
                          "stops a recovery)",
          "resume": " (nothing to resume)",
          "drain": " (only an active host, or one in maintenance)"}


def command_payload(verb, args):
    """The payload of a drain's or a resume's body (None for the other
    commands); ValueError or TypeError naming a bad field."""
    if verb == "drain":
        return drain_request(args)
    if verb == "resume" and "fail_back" in args:
        if not isinstance(args["fail_back"], bool):
            raise ValueError("fail_back must be true or false, not %r"
                             % (args["fail_back"],))
        return ResumeRequest(fail_back=args["fail_back"])
    return None


def drain_request(args):
    """The DrainRequest of a drain command's body; ValueError or
    TypeError naming a bad field."""
    concurrency = args.get("concurrency")
    if concurrency is not None and (isinstance(concurrency, bool)
                                    or not isinstance(concurrency, int)):
        raise ValueError("concurrency must be a whole number, not %r"
                         % (concurrency,))
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise ValueError("force must be true or false, not %r" % (force,))
    return DrainRequest(then=str(args.get("then") or "maintenance"),
                        concurrency=concurrency, force=force)


class OperatorAPI:

    def __init__(self, conf, engine, clock, health_source=None):
        """``health_source``: what /healthz and /readyz judge (its
        ``liveness()`` and ``readiness()``: the service's, which knows its
        role in a group and what its start waits for); None: the engine
        alone (tests). Raises instanceha.errors.ConfigError when the API
        must not serve as configured (noauth off loopback, a broken policy
        file or [keystone_authtoken])."""
        self.conf = conf
        self.engine = engine
        self.clock = clock
        self.health_source = health_source
        self.journal = getattr(engine, "journal", None)
        self.registry = CollectorRegistry()
        self.timings = metrics_mod.Timings(self.registry, self.journal,
                                           clock())
        self.audit_ages = metrics_mod.AuditAges()
        self.registry.register(SnapshotCollector(self))
        add_listener = getattr(engine, "add_listener", None)
        if add_listener is not None:
            add_listener(self.timings.on_change)
        why = api_conf.check_listener(conf)
        if why is not None:
            raise ConfigError(why)
        try:
            self.app = wsgi.Application(self, conf)
        except auth.AuthError as e:
            raise ConfigError(str(e))
        self._listeners = []     # [(where, cheroot server, thread)]
        self._port = None
        for warning in api_conf.listener_warnings(conf):
            LOG.warning("api_listener_warning", reason=warning)

    # -- request handling (also called directly by tests) ---------------------
    def handle(self, method, path, body=b"", query=None):
        """Return (status, content_type, bytes). ``query``: the request's
        query parameters ({name: text})."""
        if method == "GET" and path == "/status":
            # With /healthz's verdict: a client says a stale view is
            # stale (openstack instanceha host list).
            ok, why = self.healthy()
            return answer(200, dict(self.engine.snapshot(),
                                    live={"ok": ok, "reason": why}))
        if method == "GET" and path == "/healthz":
            ok, why = self.healthy()
            return answer(200 if ok else 503, {"ok": ok, "reason": why})
        if method == "GET" and path == "/readyz":
            return self.readyz()
        if method == "GET" and path == "/metrics":
            # Before the histograms are collected: the evacuations done
            # since the last scrape.
            self.timings.read_evacuations()
            self.timings.read_drains(getattr(self.engine, "ctx", None))
            return 200, "text/plain; version=0.0.4", generate_latest(
                self.registry)
        if method == "POST" and path == "/storm/resume":
            return self.resume_storm(body)
        m = wsgi.SERVER_PATH.match(path)
        if m:
            return repair_api.handle(self, method, m.group(1), body)
        m = wsgi.HOST_PATH.match(path)
        if m and method == "GET" and m.group(2) == "history":
            return self.history(m.group(1), query or {})
        if m and method == "POST":
            return self.command(m.group(1), m.group(2), body)
        return answer(404, {"error": "no such endpoint: %s %s"
                            % (method, path)})

    def healthy(self):
        """(ok, reason): liveness, for /healthz."""
        if self.health_source is not None:
            return self.health_source.liveness()
        rec = self.engine.health.get("reconciler")
        last = rec().get("last_pass_at") if rec else None
        now = self.clock()
        if last is None:
            if now - self.engine.started_at > self.conf.api.stale_after:
                return False, "the reconciler has never completed a pass"
            return True, "starting"
        if now - last > self.conf.api.stale_after:
            return False, ("the reconciler's last pass was %.0fs ago"
                           % (now - last))
        return True, "reconciler passed %.1fs ago" % (now - last)

    def readyz(self):
        """Readiness: 200 when this process acts for every host (the only
        one, or the elected member, past its first reconcile pass), 503
        with the role (standby, elected, starting) otherwise: a load
        balancer or a Kubernetes Service then sends operator commands and
        status reads to the one member that acts."""
        if self.health_source is not None:
            ready, role, why = self.health_source.readiness()
        else:
            ok, why = self.healthy()
            ready, role = ok, "acting"
        return answer(200 if ready else 503,
                      {"ready": ready, "role": role, "reason": why})

    def command(self, host, verb, body):
        kind = COMMANDS.get(verb)
        if kind is None:
            return answer(404, {"error": "unknown command %r (known: %s)"
                                % (verb, ", ".join(sorted(COMMANDS)))})
        rec = self.engine.find(host)
        if rec is None:
            return answer(404, {"error": "unknown host %r" % host})
        try:
            args = load_object(body)
            seconds = suspend_seconds(args, verb,
                                      self.conf.api.max_suspend_seconds)
            payload = command_payload(verb, args)
        except (TypeError, ValueError) as e:
            return answer(400, {"error": "bad request body: %s" % e})
        if not machine.rules_for(rec.state, kind):
            # Said now rather than accepted and silently ignored.
            return answer(409, {"error": "%s does not apply to host %s in "
                                "state %s%s" % (verb, rec.name,
                                                rec.state.value,
                                                _HINTS.get(verb, "")),
                                "state": rec.state.value})
        now = self.clock()
        reason = str(args.get("reason") or "no reason given")
        until = now + seconds if seconds is not None else None
        if until is not None:
            payload = Suspension(until)
        preflight = None
        if verb == "drain":
            status, preflight = self._preflight(rec, payload)
            if status != 202 or args.get("dry_run"):
                return answer(200 if status == 202 else status, {
                    "host": rec.name, "command": verb,
                    "state": rec.state.value, "dry_run":
                    bool(args.get("dry_run")), "preflight": preflight,
                    **({"error": "preflight refused: "
                        + "; ".join(preflight.get("refusals", ()))}
                       if status == 409 else {})})
        self.engine.submit(Event(
            kind, rec.id, now, name=rec.name, reason=reason,
            source="operator", payload=payload))
        running = self._running_work(rec)
        LOG.info("operator_command", host=rec.name, command=verb,
                 reason=reason, seconds=seconds, until=until,
                 still_running=running)
        out = {"host": rec.name, "command": verb,
               "state": rec.state.value, "still_running": running}
        if verb == "suspend":
            out["until"] = until
        if preflight is not None:
            out["preflight"] = preflight
        return answer(202, out)

    def _preflight(self, rec, request):
        """(202 | 409 | 503, the drain plan as JSON) read from Nova now."""
        preflight = getattr(self.engine, "drain_preflight", None)
        if preflight is None:
            return 503, {"error": "this engine cannot drain"}
        try:
            body = preflight(rec, request)
        except Exception as e:   # noqa: BLE001 - said, not raised
            LOG.warning("drain_preflight_failed", host=rec.name,
                        reason="%s: %s" % (type(e).__name__, e))
            return 503, {"error": "cannot read the preflight from Nova: "
                                  "%s: %s" % (type(e).__name__, e)}
        refused = not (body["ok"] or body["proceed"])
        return (409 if refused else 202), body

    def history(self, host, query):
        """A page of ``host``'s journal (see instanceha.api.history)."""
        if self.journal is None:
            return answer(404, {"error": "no journal to read"})
        now = self.clock()
        try:
            since, until = (
                history_mod.parse_time(query[k], now, k)
                if query.get(k) else None for k in ("since", "until"))
            limit = history_mod.parse_limit(query.get("limit"),
                                            self.conf.api.history_max_limit)
            marker = history_mod.parse_marker(query.get("marker"))
            found = history_mod.find_host(self.journal, self.engine, host)
            if found is None:
                return answer(404, {"error": "unknown host %r" % host})
            host_id, name = found
            entries, next_marker = history_mod.page(
                self.journal, host_id, since=since, until=until,
                marker=marker, limit=limit)
        except history_mod.BadRequest as e:
            return answer(400, {"error": str(e)})
        except Exception as e:   # noqa: BLE001 - said, not raised
            LOG.warning("history_unreadable", host=host[:100],
                        reason="%s: %s" % (type(e).__name__, e))
            return answer(503, {"error": "cannot read the journal: %s"
                                % type(e).__name__})
        return answer(200, {"host": name, "host_id": host_id,
                            "entries": entries, "next_marker": next_marker})

    def resume_storm(self, body):
        """Lift the storm hold for the hosts lost now (more losses hold
        again)."""
        try:
            args = load_object(body)
        except ValueError as e:
            return answer(400, {"error": "bad request body: %s" % e})
        reason = str(args.get("reason") or "no reason given")
        held = self.engine.acknowledge_storm(reason)
        if not held:
            return answer(409, {"error": "no storm hold to lift"})
        LOG.info("operator_command", command="resume --storm", reason=reason,
                 scopes=",".join(sorted(held)))
        return answer(202, {"command": "resume --storm", "lifted": held})

    def _running_work(self, rec):
        """The engine's short text of the host's running work, or None."""
        running_work = getattr(self.engine, "running_work", None)
        if running_work is None:
            return None
        try:
            return running_work(rec.id)
        except Exception as e:   # noqa: BLE001 - the command is accepted
            LOG.warning("running_work_unknown", host=rec.name,
                        reason="%s: %s" % (type(e).__name__, e))
            return None

    # -- serving ---------------------------------------------------------------
    def _plan(self):
        """[(where, WSGI app, what it serves)]: the unix socket serves the
        whole API; TCP too with Keystone or allow_unauthenticated_tcp,
        else only the open reads."""
        api = self.conf.api
        plan = []
        if api.listen_tcp:
            if api_conf.tcp_serves_commands(self.conf):
                plan.append(((api.listen_address, api.port), self.app,
                             "all"))
            else:
                plan.append(((api.listen_address, api.port),
                             wsgi.OpenReadsOnly(self.app, self.conf),
                             ",".join(api_conf.OPEN_READS)))
        if api.unix_socket:
            plan.append((api.unix_socket, self.app, "all"))
        return plan

    def bind(self):
        """Create and bind the listening sockets (TCP first, then the unix
        socket); serve nothing yet. Raises OSError for the TCP port (in
        use, not ours, ...) and StartupError naming the unix socket,
        before anything starts and with nothing left bound."""
        if self._listeners:
            return
        bound = []
        try:
            for where, app, serves in self._plan():
                if isinstance(where, str):
                    server = listeners.bind_unix(where, app,
                                                 self.conf.api)
                else:
                    server = listeners.make_server(where, app,
                                                   self.conf.api)
                    self._port = server.bind_addr[1]
                bound.append((where, server, serves))
        except BaseException:
            for where, server, _serves in bound:
                server.stop()
                listeners.unlink(where)
            raise
        self._listeners = [(where, server, serves, None)
                           for where, server, serves in bound]

    def start(self):
        """Serve requests (binding first if :meth:`bind` was not called)."""
        self.bind()
        running = []
        for where, server, serves, _thread in self._listeners:
            thread = threading.Thread(target=self._serve, args=(server,),
                                      daemon=True, name="instanceha-api")
            thread.start()
            running.append((where, server, serves, thread))
            LOG.info("api_listening",
                     address=where if isinstance(where, str) else where[0],
                     port=None if isinstance(where, str) else self._port,
                     serves=serves, strategy=self.conf.api.auth_strategy,
                     reason="operator API serving")
        self._listeners = running

    @staticmethod
    def _serve(server):
        try:
            server.serve()
        except Exception as e:   # noqa: BLE001 - logged, the engine goes on
            LOG.error("api_stopped", reason="%s: %s" % (type(e).__name__, e))

    @property
    def port(self):
        """The bound TCP port (still known after stop; None without a TCP
        listener)."""
        return self._port

    def stop(self):
        bound, self._listeners = self._listeners, []
        for where, server, _serves, thread in bound:
            server.stop()
            if thread is not None:
                thread.join(5)
            listeners.unlink(where)
