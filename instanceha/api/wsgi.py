"""The operator API as a WSGI application (WebOb), in front of
:meth:`OperatorAPI.handle`.

On the TCP listener without authentication, :class:`OpenReadsOnly` first
lets through only the open reads (/healthz, /readyz, /metrics).
Per request, in this order: without authentication, the Host header names
a loopback address (403: DNS rebinding); the method and path are known
(405, 404);
a protected endpoint goes through keystonemiddleware's auth_token (401)
and its policy rule (403); a command's body must be declared JSON (415:
a browser's cross-site form or no-cors post cannot send
``application/json``), with a valid Content-Length (400, 411, 413) and as
long as it says (400). Nothing here raises to the server: an unexpected
error is logged and answered 500 without a traceback.
"""

import json
import re

import structlog
import webob

from instanceha.api import auth
from instanceha.api.commands import COMMANDS
from instanceha.conf import api as api_conf

LOG = structlog.get_logger("instanceha.api")

HOST_PATH = re.compile(r"^/hosts/([^/]+)/([a-z]+)$")
SERVER_PATH = re.compile(r"^/servers/([^/]+)/repair$")
_READS = ("GET", "HEAD")


def json_response(status, data, **headers):
    resp = webob.Response(status=status, content_type="application/json",
                          charset=None,
                          body=json.dumps(data, default=str).encode())
    resp.headers["Cache-Control"] = "no-store"
    for name, value in headers.items():
        resp.headers[name.replace("_", "-")] = value
    return resp


def route(method, path):
    """(policy rule, public read, allowed methods) for a path, or None for
    no such endpoint. A rule of None needs no policy (an unknown command:
    answered 404 by the API)."""
    if path == "/status":
        return "instanceha:status:read", False, _READS
    if path in ("/healthz", "/readyz"):
        return "instanceha:health:read", True, _READS
    if path == "/metrics":
        return "instanceha:metrics:read", True, _READS
    if path == "/storm/resume":
        return "instanceha:storm:resume", False, ("POST",)
    if SERVER_PATH.match(path):
        return ("instanceha:server:repair" if method == "POST"
                else "instanceha:server:read"), False, _READS + ("POST",)
    m = HOST_PATH.match(path)
    if m is None:
        return None
    verb = m.group(2)
    if verb == "history":
        return "instanceha:history:read", False, _READS
    if verb in COMMANDS:
        return "instanceha:host:%s" % verb, False, ("POST",)
    return None, False, ("POST",)


class Application:
    """WSGI callable: transport checks, auth and policy, then ``api``."""

    def __init__(self, api, conf):
        self.api = api
        self.conf = conf
        self.keystone = conf.api.auth_strategy == "keystone"
        self.enforcer = None
        self._authenticated = self._inner
        if self.keystone:
            self.enforcer = auth.make_enforcer(conf)
            self._authenticated = auth.keystone(self._inner, conf)

    def __call__(self, environ, start_response):
        try:
            resp = self._outer(environ)
            if resp is None:      # handed to the auth pipeline
                return self._authenticated(environ, start_response)
        except Exception as e:   # noqa: BLE001 - answered, logged
            LOG.exception("api_request_failed",
                          method=environ.get("REQUEST_METHOD", "")[:20],
                          path=environ.get("PATH_INFO", "")[:200],
                          reason="%s: %s" % (type(e).__name__, e))
            resp = json_response(500, {"error": "internal error; see the "
                                       "log"}, Connection="close")
        return resp(environ, start_response)

    # -- before authentication ---------------------------------------------
    def _outer(self, environ):
        """A response for a request refused before authentication, or None
        to go on (through auth_token when it applies)."""
        method = environ.get("REQUEST_METHOD", "")
        if not self.keystone and not _loopback_host(environ):
            # noauth listens on loopback only; a page whose name was made
            # to resolve to 127.0.0.1 (DNS rebinding) still sends its own
            # name as Host.
            return json_response(
                403, {"error": "Host %r is not a loopback name: without "
                      "authentication this API answers only requests to "
                      "127.0.0.1, ::1 or localhost"
                      % environ.get("HTTP_HOST", "")[:100]},
                Connection="close")
        try:
            path = _path(environ)
        except UnicodeError:
            return json_response(400, {"error": "path is not UTF-8"})
        found = route(method, path)
        if found is None:
            return json_response(404, {"error": "no such endpoint: %s %s"
                                       % (method[:20], path[:200])})
        rule, public, methods = found
        if method not in methods:
            return json_response(
                405, {"error": "method %s not allowed on %s: %s"
                      % (method[:20], path[:200], " or ".join(methods))},
                Allow=", ".join(methods), Connection="close")
        environ["instanceha.rule"] = rule
        if public and self.conf.api.public_health_and_metrics:
            environ["instanceha.rule"] = None
            return self._authorized(environ)
        if rule is None:
            # An unknown command: the API names the known ones.
            return self._authorized(environ)
        return None

    # -- after authentication ----------------------------------------------
    def _inner(self, environ, start_response):
        return self._authorized(environ)(environ, start_response)

    def _authorized(self, environ):
        rule = environ.get("instanceha.rule")
        if self.keystone and rule is not None:
            if environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
                return json_response(401, {"error": "authentication "
                                           "required (X-Auth-Token)"},
                                     Connection="close")
            allowed, who = auth.authorize(self.enforcer, rule, environ)
            if not allowed:
                LOG.info("api_forbidden", rule=rule, who=who,
                         reason="policy refuses")
                return json_response(403, {"error": "policy does not allow "
                                           "%s" % rule}, Connection="close")
        return self._serve(environ)

    def _serve(self, environ):
        req = webob.Request(environ)
        method = req.method
        body = b""
        if method == "POST":
            body, refused = self._body(environ)
            if refused is not None:
                return refused
        path = _path(environ)
        query = {k: v for k, v in req.GET.items()}
        status, ctype, data = self.api.handle(
            "GET" if method == "HEAD" else method, path, body, query=query)
        resp = webob.Response(status=status, content_type=ctype,
                              charset=None)
        resp.headers["Cache-Control"] = "no-store"
        if method == "HEAD":
            resp.app_iter = []
            resp.headers["Content-Length"] = str(len(data))
        else:
            resp.body = data
        return resp

    def _body(self, environ):
        """(body, None) or (b"", refusal)."""
        if environ.get("HTTP_TRANSFER_ENCODING"):
            return b"", json_response(411, {"error": "send the body with a "
                                            "Content-Length, not chunked"},
                                      Connection="close")
        ctype = environ.get("CONTENT_TYPE", "")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            return b"", json_response(
                415, {"error": "commands take a JSON body: send "
                      "Content-Type: application/json (not %r)"
                      % ctype[:60]}, Connection="close")
        text = environ.get("CONTENT_LENGTH", "").strip() or "0"
        if not (text.isascii() and text.isdigit()):
            return b"", json_response(400, {"error": "bad Content-Length %r"
                                            % text[:40]},
                                      Connection="close")
        length = int(text)
        limit = self.conf.api.max_request_body
        if length > limit:
            return b"", json_response(413, {"error": "body of %d bytes; at "
                                            "most %d" % (length, limit)},
                                      Connection="close")
        try:
            body = environ["wsgi.input"].read(length) if length else b""
        except (OSError, ValueError):
            body = b""
        if len(body) < length:
            return b"", json_response(400, {"error": "body shorter than its "
                                            "Content-Length"},
                                      Connection="close")
        return body, None


class OpenReadsOnly:
    """The TCP listener without authentication (``[api] auth_strategy =
    noauth`` and not ``allow_unauthenticated_tcp``): the open reads
    (/healthz, /readyz, /metrics) go on to ``app``; status, history and
    every command are refused 403 saying where they are served. Any local
    process reaches a loopback port, so it must not switch HA off."""

    def __init__(self, app, conf):
        self.app = app
        self.conf = conf

    def __call__(self, environ, start_response):
        try:
            path = _path(environ)
        except UnicodeError:
            path = None        # app answers 400
        found = route(environ.get("REQUEST_METHOD", ""), path) \
            if path is not None else None
        if found is None or found[1]:
            return self.app(environ, start_response)
        socket = self.conf.api.unix_socket
        resp = json_response(403, {"error": (
            "%s is not served on TCP without authentication (only %s): "
            "use the unix socket%s, e.g. the instanceha CLI, or configure "
            "[api] auth_strategy = keystone" % (
                path[:200], ", ".join(api_conf.OPEN_READS),
                " %s" % socket if socket else " ([api] unix_socket)"))},
            Connection="close")
        LOG.info("api_refused_on_tcp", method=environ.get(
            "REQUEST_METHOD", "")[:20], path=path[:200],
            reason="noauth TCP serves only the open reads")
        return resp(environ, start_response)


def _loopback_host(environ):
    """True when the request names a loopback host (or none: HTTP/1.0)."""
    host = environ.get("HTTP_HOST")
    if not host:
        return True
    host = host.strip()
    if host.startswith("["):
        name = host[1:].split("]", 1)[0]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return api_conf.is_loopback(name)


def _path(environ):
    """PATH_INFO as text (WSGI gives it as latin-1 decoded bytes)."""
    return environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
