"""Operator API: status, health, Prometheus metrics, and host commands.

    GET  /status                      the engine's snapshot (JSON)
    GET  /healthz                     200 when the reconciler is recent, else 503
    GET  /metrics                     Prometheus text format
    POST /hosts/<host>/suspend        {"reason": "...", "seconds": 3600}
                                      or {"reason": "...", "forever": true}
    POST /hosts/<host>/maintenance    {"reason": "..."}
    POST /hosts/<host>/resume         {"reason": "..."}
    POST /storm/resume                {"reason": "..."}  lift the storm hold

Commands become operator events; the state machine decides what they mean
in the host's current state. A suspension says how long: seconds (positive,
finite, at most ``[api] max_suspend_seconds``) or forever, never neither.
The 202 answer is {"host", "command", "state" (before the command),
"still_running" (the host's running work, or null)}, plus "until" (epoch
seconds, null = forever) for suspend. Bound to loopback by default; no auth.
"""

import http.server
import json
import math
import re
import threading

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily,
                                    GaugeMetricFamily)
import structlog

from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.states import State

LOG = structlog.get_logger("instanceha.api")

COMMANDS = {"suspend": E.OPERATOR_SUSPEND,
            "maintenance": E.OPERATOR_MAINTENANCE,
            "resume": E.OPERATOR_RESUME}
_HINTS = {"maintenance": " (only where no recovery is under way; suspend "
                          "stops a recovery)",
          "resume": " (nothing to resume)"}
_HOST_PATH = re.compile(r"^/hosts/([^/]+)/([a-z]+)$")
#: the largest request body read (commands are a few bytes of JSON)
MAX_BODY = 64 * 1024
#: seconds a request may take to arrive
REQUEST_TIMEOUT = 30.0


class _Collector:
    def __init__(self, api):
        self._api = api

    def collect(self):
        snap = self._api.engine.snapshot()
        state = GaugeMetricFamily("instanceha_host_state",
                                  "1 for the state each host is in",
                                  labels=["host", "state"])
        counts = GaugeMetricFamily("instanceha_hosts",
                                   "Hosts per state", labels=["state"])
        per_state = {s.value: 0 for s in State}
        for h in snap["hosts"]:
            state.add_metric([h["name"] or h["id"], h["state"]], 1)
            per_state[h["state"]] += 1
        for s, n in per_state.items():
            counts.add_metric([s], n)
        hold = GaugeMetricFamily(
            "instanceha_threshold_hold",
            "1 while more hosts look dead than the threshold allows")
        hold.add_metric([], 0 if snap["cluster"]["ok"] else 1)
        storm_hold = GaugeMetricFamily(
            "instanceha_storm_hold",
            "1 while a storm (hosts lost within the storm window above the "
            "threshold) holds new fencing in a scope", labels=["scope"])
        lost = GaugeMetricFamily(
            "instanceha_storm_lost_hosts",
            "Hosts lost or recovering within the storm window",
            labels=["scope"])
        for scope, view in sorted((snap.get("storm") or {}).items()):
            held = view["over"] and (view["acknowledged"] is None
                                     or view["lost"] > view["acknowledged"])
            storm_hold.add_metric([scope], 1 if held else 0)
            lost.add_metric([scope], view["lost"])
        waiting = GaugeMetricFamily(
            "instanceha_fence_rate_waiting",
            "Hosts waiting for the fencing rate limit")
        waiting.add_metric([], len((snap.get("rate_limit") or {})
                                   .get("waiting", [])))
        trans = CounterMetricFamily("instanceha_transitions",
                                    "State transitions, by new state",
                                    labels=["state"])
        acts = CounterMetricFamily("instanceha_actions",
                                   "Actions run, by outcome",
                                   labels=["action", "outcome"])
        for key, n in sorted(self._api.engine.stats.items()):
            if key[0] == "transition":
                trans.add_metric([key[1]], n)
            elif key[0] == "action":
                acts.add_metric([key[1], key[2]], n)
        unprotected = snap.get("unprotected") or {}
        per_host = GaugeMetricFamily(
            "instanceha_host_unprotected",
            "1 for a host the last fencing readiness audit found could not "
            "be fenced now", labels=["host"])
        for host in sorted(unprotected):
            per_host.add_metric([host], 1)
        count = GaugeMetricFamily(
            "instanceha_unprotected_hosts",
            "Hosts the last fencing readiness audit found could not be "
            "fenced now")
        count.add_metric([], len(unprotected))
        yield from (state, counts, hold, storm_hold, lost, waiting, trans,
                    acts, per_host, count)
        for name, health in sorted(snap["sources"].items()):
            for field, value in sorted(health.items()):
                if isinstance(value, bool) or not isinstance(value,
                                                             (int, float)):
                    continue
                g = GaugeMetricFamily(
                    "instanceha_source_%s_%s" % (name, field),
                    "%s of source %s" % (field, name))
                g.add_metric([], value)
                yield g


class OperatorAPI:

    def __init__(self, conf, engine, clock):
        self.conf = conf
        self.engine = engine
        self.clock = clock
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))
        self._server = None
        self._thread = None

    # -- request handling (also called directly by tests) ---------------------
    def handle(self, method, path, body=b""):
        """Return (status, content_type, bytes)."""
        if method == "GET" and path == "/status":
            return _json(200, self.engine.snapshot())
        if method == "GET" and path == "/healthz":
            ok, why = self.healthy()
            return _json(200 if ok else 503, {"ok": ok, "reason": why})
        if method == "GET" and path == "/metrics":
            return 200, "text/plain; version=0.0.4", generate_latest(
                self.registry)
        if method == "POST" and path == "/storm/resume":
            return self.resume_storm(body)
        m = _HOST_PATH.match(path)
        if m and method == "POST":
            return self.command(m.group(1), m.group(2), body)
        return _json(404, {"error": "no such endpoint: %s %s"
                           % (method, path)})

    def healthy(self):
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

    def command(self, host, verb, body):
        kind = COMMANDS.get(verb)
        if kind is None:
            return _json(404, {"error": "unknown command %r (known: %s)"
                               % (verb, ", ".join(sorted(COMMANDS)))})
        rec = self.engine.find(host)
        if rec is None:
            return _json(404, {"error": "unknown host %r" % host})
        try:
            args = _load_object(body)
            seconds = suspend_seconds(args, verb,
                                      self.conf.api.max_suspend_seconds)
        except ValueError as e:
            return _json(400, {"error": "bad request body: %s" % e})
        if not machine.rules_for(rec.state, kind):
            # Said now rather than accepted and silently ignored.
            return _json(409, {"error": "%s does not apply to host %s in "
                               "state %s%s" % (verb, rec.name,
                                               rec.state.value,
                                               _HINTS.get(verb, "")),
                               "state": rec.state.value})
        now = self.clock()
        reason = str(args.get("reason") or "no reason given")
        until = now + seconds if seconds is not None else None
        detail = {"until": until} if until is not None else {}
        self.engine.submit(Event(kind, rec.id, now, name=rec.name,
                                 reason=reason, source="operator",
                                 detail=detail))
        running = self._running_work(rec)
        LOG.info("operator_command", host=rec.name, command=verb,
                 reason=reason, seconds=seconds, until=until,
                 still_running=running)
        answer = {"host": rec.name, "command": verb,
                  "state": rec.state.value, "still_running": running}
        if verb == "suspend":
            answer["until"] = until
        return _json(202, answer)

    def resume_storm(self, body):
        """Lift the storm hold for the hosts lost now (more losses hold
        again)."""
        try:
            args = _load_object(body)
        except ValueError as e:
            return _json(400, {"error": "bad request body: %s" % e})
        reason = str(args.get("reason") or "no reason given")
        held = self.engine.acknowledge_storm(reason)
        if not held:
            return _json(409, {"error": "no storm hold to lift"})
        LOG.info("operator_command", command="resume --storm", reason=reason,
                 scopes=",".join(sorted(held)))
        return _json(202, {"command": "resume --storm", "lifted": held})

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
    def bind(self):
        """Create and bind the listening socket; serve nothing yet. Raises
        OSError (address in use, not ours, ...) before anything starts."""
        if self._server is not None:
            return
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            # A client that stops sending mid-request frees its thread.
            timeout = REQUEST_TIMEOUT

            def _serve(self, method):
                try:
                    body, refused = self._body()
                    if refused is not None:
                        status, ctype, data = refused
                    else:
                        status, ctype, data = api.handle(method, self.path,
                                                         body)
                except Exception as e:   # noqa: BLE001 - answered, logged
                    LOG.exception("api_request_failed", method=method,
                                  path=self.path[:200],
                                  reason="%s: %s" % (type(e).__name__, e))
                    status, ctype, data = _json(
                        500, {"error": "internal error; see the log"})
                self._answer(status, ctype, data, method != "HEAD")

            def _body(self):
                """(body, None), or (b"", answer) for a body refused."""
                text = (self.headers.get("Content-Length") or "0").strip()
                if not (text.isascii() and text.isdigit()):
                    return b"", _json(400, {"error": "bad Content-Length "
                                            "%r" % text[:40]})
                length = int(text)
                if length > MAX_BODY:
                    self.close_connection = True
                    return b"", _json(413, {"error": "body of %d bytes; at "
                                            "most %d" % (length, MAX_BODY)})
                try:
                    body = self.rfile.read(length) if length else b""
                except TimeoutError:
                    body = b""
                if len(body) < length:
                    self.close_connection = True
                    return b"", _json(400, {"error": "body shorter than its "
                                            "Content-Length"})
                return body, None

            def _answer(self, status, ctype, data, with_body=True):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if with_body:
                    self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def __getattr__(self, name):
                # http.server answers a method without do_<METHOD> with 501
                # (and an HTML page): every other method is refused here.
                if name.startswith("do_"):
                    method = name[3:]
                    return lambda: self._answer(*_json(
                        405, {"error": "method %s not allowed: GET or POST"
                              % method[:20]}), with_body=method != "HEAD")
                raise AttributeError(name)

        self._server = http.server.ThreadingHTTPServer(
            (self.conf.api.listen_address, self.conf.api.port), Handler)
        self._server.daemon_threads = True

    def start(self):
        """Serve requests (binding first if :meth:`bind` was not called)."""
        self.bind()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True, name="instanceha-api")
        self._thread.start()
        LOG.info("api_listening", address=self.conf.api.listen_address,
                 port=self.port, reason="operator API serving")

    @property
    def port(self):
        return self._server.server_address[1] if self._server else None

    def stop(self):
        if self._server is None:
            return
        if self._thread is not None:
            # shutdown() waits for serve_forever(): only when it runs.
            self._server.shutdown()
            self._thread = None
        self._server.server_close()


def _no_constant(name):
    raise ValueError("%s is not a number" % name)


def _load_object(body):
    """A request body's JSON object; ValueError saying what is wrong."""
    try:
        args = json.loads(body or b"{}", parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(args, dict):
        raise ValueError("body must be a JSON object")
    return args


def suspend_seconds(args, verb, maximum):
    """How long a command's body asks to suspend: seconds (a positive,
    finite number up to ``maximum``) or None for ``"forever": true``. A
    suspension without end is never implied: one of the two is required,
    and not both. Raises ValueError saying what is wrong."""
    seconds = args.get("seconds")
    forever = args.get("forever", False)
    if verb != "suspend":
        if seconds is not None or forever:
            raise ValueError("seconds and forever apply to suspend only")
        return None
    if not isinstance(forever, bool):
        raise ValueError("forever must be true or false")
    if seconds is not None and forever:
        raise ValueError("give either seconds or forever, not both")
    if seconds is None:
        if forever:
            return None
        raise ValueError("say how long: give \"seconds\": N (at most %g) "
                         "or \"forever\": true" % maximum)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or seconds <= 0 or (isinstance(seconds, float)
                                and not math.isfinite(seconds)):
        # (an int is finite, and may be too large for math.isfinite)
        raise ValueError("seconds must be a positive, finite number, not %s"
                         % json.dumps(seconds)[:40])
    if seconds > maximum:
        raise ValueError("seconds must be at most %g ([api] "
                         "max_suspend_seconds); for a suspension without "
                         "end give \"forever\": true" % maximum)
    return float(seconds)


def _json(status, data):
    return status, "application/json", json.dumps(data, default=str).encode()
