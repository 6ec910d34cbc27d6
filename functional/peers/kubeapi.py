"""A Kubernetes API emulator serving Metal3 BareMetalHost objects, with a
fake Metal3 controller. Our own, stdlib only.

No Kubernetes API server installs offline on the test machines, so this
serves just enough of one for the ``bmh`` fencing driver and the official
``kubernetes`` client:

``GET /version``
    a version object (answered without a token, like a real API server
    configured to allow it).
``GET /apis/metal3.io/v1alpha1/namespaces/NS/baremetalhosts[/NAME]``
    one BareMetalHost, or the namespace's list.
``PATCH .../baremetalhosts/NAME``
    ``application/merge-patch+json`` (RFC 7386) or
    ``application/json-patch+json`` (RFC 6902: add, remove, replace, test),
    as the client sends; any other patch type is 415, as a real API server
    answers for custom resources. ``status`` is a subresource: a patch of the
    main resource leaves it unchanged. A merge patch carrying
    ``metadata.resourceVersion`` other than the current one is 409 Conflict.
    Annotation values must be strings (400) and ``spec.online`` a boolean
    (422), as the real API and the CRD's schema insist.

Errors are ``kind: Status`` objects with the code, reason and message a
real API server gives (``baremetalhosts.metal3.io "x" not found``...).

Authentication: with a ``token``, every request but ``/version`` needs
``Authorization: Bearer <token>`` (else 401). TLS: with ``cert``/``key``
(see :func:`functional.peers.redfish.make_cert`, a self-signed certificate
made per run) the server speaks HTTPS only.

The fake controller does what the baremetal-operator does with power: the
wanted state is ``spec.online`` and no ``reboot.metal3.io``/
``reboot.metal3.io/<key>`` annotation (such an annotation holds the host
off until it is removed); ``status.poweredOn`` follows the wanted state
``delay`` seconds after it changes. The power-off's mode (the annotation's
JSON ``{"mode": "hard"}`` or ``"soft"``; soft when the power-off came from
``spec.online`` alone) is recorded in :meth:`KubeAPIServer.events`.
Behaviours for tests, per host (or every host):

``stuck``
    the controller never changes the host's power (a BMC that accepts and
    does nothing): a power-off never completes.
``power_error``
    the controller refuses: it sets ``status.operationalStatus: error``
    with ``errorType: power management error`` and an ``errorMessage``,
    and leaves the power as it is.
``refuse_patch``
    the API answers every PATCH with this status (403: the token may read
    but not patch; 422: an admission webhook denies it).
``fail_next``
    the next N requests (optionally only of some methods) are answered with
    a status (409 Conflict, 500, 503 ...): transient trouble.

Run it in-process (:class:`KubeAPIServer`, for unit tests: the controller
can run on an injected clock and be stepped with :meth:`reconcile`) or as a
process of its own (:class:`KubeAPIPeer`, for functional tests and the
benchmark; ``python -m functional.peers.kubeapi --config FILE``), then
controlled over ``/_emulator/...`` with a control token of its own.
"""

import argparse
import copy
import datetime
import http.server
import json
import os
import pathlib
import re
import secrets
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]

GROUP = "metal3.io"
VERSION = "v1alpha1"
PLURAL = "baremetalhosts"
KIND = "BareMetalHost"
REBOOT_ANNOTATION = "reboot.metal3.io"
CONTROL_HEADER = "X-Emulator-Control"

_PATH = re.compile(r"^/apis/%s/%s/namespaces/([^/]+)/%s(?:/([^/]+))?/?$"
                   % (re.escape(GROUP), re.escape(VERSION), PLURAL))
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden",
            404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
            415: "UnsupportedMediaType", 422: "Invalid",
            429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


class PatchError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def status_object(code, message, name=None, kind=PLURAL):
    """A Kubernetes ``Status`` failure object."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message,
            "reason": _REASONS.get(code, "Unknown"), "code": code}
    if name is not None:
        body["details"] = {"name": name, "group": GROUP, "kind": kind}
    return body


# -- patches -----------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386: ``patch`` applied to ``target`` (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, "invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~")
            for p in path[1:].split("/")]


def json_patch(target, ops):
    """RFC 6902 (add, remove, replace, test) applied to a copy of
    ``target``."""
    doc = copy.deepcopy(target)
    if not isinstance(ops, list):
        raise PatchError(400, "a JSON patch must be a list of operations")
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(400, "invalid JSON patch operation %r" % (op,))
        parts = _pointer(op["path"])
        if not parts:
            raise PatchError(422, "cannot %s the whole object" % op["op"])
        parent = doc
        for p in parts[:-1]:
            if isinstance(parent, dict) and p in parent:
                parent = parent[p]
            elif isinstance(parent, list) and p.isdigit() \
                    and int(p) < len(parent):
                parent = parent[int(p)]
            else:
                raise PatchError(422, "doc is missing path: %s" % op["path"])
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            present = isinstance(parent, dict) and last in parent
            if not present or parent[last] != op.get("value"):
                raise PatchError(422, "testing value %s failed" % op["path"])
        elif kind in ("add", "replace"):
            if "value" not in op:
                raise PatchError(400, "operation %s has no value" % kind)
            if not isinstance(parent, dict):
                raise PatchError(422, "only objects are patched here")
            if kind == "replace" and last not in parent:
                raise PatchError(422, "replace operation does not apply: doc "
                                 "is missing key: %s" % op["path"])
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if not isinstance(parent, dict) or last not in parent:
                raise PatchError(422, "remove operation does not apply: doc "
                                 "is missing path: %s" % op["path"])
            del parent[last]
        else:
            raise PatchError(422, "operation %s is not supported" % kind)
    return doc


def reboot_annotations(obj):
    """{key: value} of the object's reboot annotations."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items()
            if k == REBOOT_ANNOTATION
            or k.startswith(REBOOT_ANNOTATION + "/")}


def wanted_power(obj):
    """What the baremetal-operator would make of the host: on only when
    ``spec.online`` and no reboot annotation holds it off."""
    return bool((obj.get("spec") or {}).get("online")) \
        and not reboot_annotations(obj)


def off_mode(obj):
    """'hard' or 'soft': how the controller would power the host off."""
    for value in reboot_annotations(obj).values():
        try:
            mode = json.loads(value).get("mode")
        except (ValueError, AttributeError):
            mode = None
        if mode == "hard":
            return "hard"
    return "soft"


# -- the server --------------------------------------------------------------

class KubeAPIServer:
    """The emulator, served from threads of this process.

    ``clock`` is what the controller reads; with ``controller=False`` no
    controller thread runs and the test calls :meth:`reconcile` (e.g. from
    its injected sleep), so power changes follow an injected clock.
    """

    def __init__(self, token=None, cert=None, key=None, delay=0.0,
                 controller=True, clock=time.monotonic, port=0,
                 control_token=None):
        self.token = token
        self.control_token = control_token or secrets.token_urlsafe(16)
        self.cert, self.key = cert, key
        self.delay = float(delay)
        self.clock = clock
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.hosts = {}                  # (ns, name) -> object
        self.pending = {}                # (ns, name) -> (due, wanted)
        self.stuck = set()               # (ns, name), or "*" for every host
        self.power_error = set()
        self.refuse_patch = None
        self.fail = None                 # {"count", "status", "methods"}
        self._events = []
        self._rv = 0
        self.stats = {"requests": 0, "get": 0, "patch": 0, "unauthorized": 0,
                      "patch_types": {}, "injected": 0, "conflicts": 0}
        self._run_controller = controller
        self._stopping = False
        self._port = port
        self._httpd = None
        self._threads = []
        self._conns = set()

    # -- objects
    def _next_rv(self):
        self._rv += 1
        return str(self._rv)

    def add_host(self, name, namespace="metal3", online=True, powered_on=None,
                 annotations=None):
        """Create a provisioned BareMetalHost; returns a copy of it."""
        powered_on = online if powered_on is None else powered_on
        with self.lock:
            obj = {
                "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": KIND,
                "metadata": {
                    "name": name, "namespace": namespace,
                    "uid": str(uuid.uuid4()), "generation": 1,
                    "resourceVersion": self._next_rv(),
                    "creationTimestamp": _now_iso(),
                    "annotations": dict(annotations or {})},
                "spec": {"online": bool(online),
                         "bmc": {"address": "redfish://192.0.2.1/redfish/v1/"
                                 "Systems/%s" % name,
                                 "credentialsName": "%s-bmc-secret" % name},
                         "bootMACAddress": "52:54:00:00:%02x:%02x" % (
                             len(self.hosts) // 256, len(self.hosts) % 256)},
                "status": {"poweredOn": bool(powered_on),
                           "operationalStatus": "OK",
                           "errorMessage": "", "errorType": "",
                           "provisioning": {"state": "provisioned"},
                           "lastUpdated": _now_iso()},
            }
            self.hosts[(namespace, name)] = obj
            self.changed.notify_all()
            return copy.deepcopy(obj)

    def host(self, name, namespace="metal3"):
        """A copy of the object (the controller's due changes applied)."""
        with self.lock:
            if not self._run_controller:
                self.reconcile()
            obj = self.hosts.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def powered_on(self, name, namespace="metal3"):
        return self.host(name, namespace)["status"]["poweredOn"]

    def set_power(self, name, on, namespace="metal3"):
        """Change the host's actual power behind the controller's back (a
        person at the machine), and its spec to match."""
        with self.lock:
            obj = self.hosts[(namespace, name)]
            obj["status"]["poweredOn"] = bool(on)
            obj["spec"]["online"] = bool(on)
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self.pending.pop((namespace, name), None)
            self.changed.notify_all()

    def events(self):
        """What the controller did: [{"namespace", "name", "power",
        "mode"}] in order ("mode" for power-offs only)."""
        with self.lock:
            return [dict(e) for e in self._events]

    def configure(self, delay=None, stuck=None, power_error=None,
                  refuse_patch=None, fail_next=None, token=None):
        """Change behaviours at run time. ``stuck`` and ``power_error`` are
        lists of [namespace, name] or "*" (replacing the current ones);
        ``refuse_patch`` an HTTP status or 0 to stop refusing; ``fail_next``
        {"count": N, "status": S, "methods": ["PATCH"]}."""
        with self.lock:
            if delay is not None:
                self.delay = float(delay)
            if stuck is not None:
                self.stuck = _keys(stuck)
            if power_error is not None:
                self.power_error = _keys(power_error)
                if not self.power_error:
                    for obj in self.hosts.values():
                        obj["status"].update(operationalStatus="OK",
                                             errorType="", errorMessage="")
            if refuse_patch is not None:
                self.refuse_patch = int(refuse_patch) or None
            if fail_next is not None:
                self.fail = dict(fail_next) if fail_next.get("count") else None
            if token is not None:
                self.token = token or None
            self.changed.notify_all()

    # -- the fake controller
    def _matches(self, which, key):
        return "*" in which or key in which

    def reconcile(self):
        """One pass of the controller at ``clock()``: start, cancel or
        finish power changes. Returns the seconds until the next one is
        due (None when nothing is pending)."""
        with self.lock:
            now = self.clock()
            for key, obj in self.hosts.items():
                status = obj["status"]
                want = wanted_power(obj)
                if status.get("poweredOn") == want:
                    self.pending.pop(key, None)
                    continue
                if self._matches(self.stuck, key):
                    self.pending.pop(key, None)
                    continue
                if self._matches(self.power_error, key):
                    self.pending.pop(key, None)
                    message = ("failed to power %s the host: BMC answered "
                               "500" % ("on" if want else "off"))
                    if status.get("errorMessage") != message:
                        status.update(operationalStatus="error",
                                      errorType="power management error",
                                      errorMessage=message,
                                      lastUpdated=_now_iso())
                        obj["metadata"]["resourceVersion"] = self._next_rv()
                    continue
                due = self.pending.get(key)
                if due is None or due[1] != want:
                    self.pending[key] = (now + self.delay, want)
                    due = self.pending[key]
                if now >= due[0]:
                    del self.pending[key]
                    status.update(poweredOn=want, operationalStatus="OK",
                                  errorType="", errorMessage="",
                                  lastUpdated=_now_iso())
                    obj["metadata"]["resourceVersion"] = self._next_rv()
                    event = {"namespace": key[0], "name": key[1],
                             "power": "on" if want else "off"}
                    if not want:
                        event["mode"] = off_mode(obj)
                    self._events.append(event)
            if not self.pending:
                return None
            return max(0.0, min(d for d, _ in self.pending.values()) - now)

    def _controller_loop(self):
        with self.lock:
            while not self._stopping:
                wait = self.reconcile()
                self.changed.wait(timeout=0.5 if wait is None
                                  else max(wait, 0.001))

    # -- requests (called by the HTTP handler, under no lock)
    def _inject(self, method):
        fail = self.fail
        if fail and (not fail.get("methods") or method in fail["methods"]):
            fail["count"] -= 1
            if fail["count"] <= 0:
                self.fail = None
            self.stats["injected"] += 1
            return int(fail.get("status", 503))
        return None

    def handle(self, method, path, headers, body):
        """(status, json body) for one API request."""
        with self.lock:
            self.stats["requests"] += 1
            parsed = urllib.parse.urlsplit(path)
            if parsed.path == "/version" and method == "GET":
                return 200, {"major": "1", "minor": "30",
                             "gitVersion": "v1.30.0-instanceha-emulator",
                             "platform": "linux/amd64"}
            if self.token is not None:
                auth = headers.get("Authorization") or ""
                if auth != "Bearer %s" % self.token:
                    self.stats["unauthorized"] += 1
                    return 401, status_object(401, "Unauthorized")
            injected = self._inject(method)
            if injected is not None:
                if injected == 409:
                    self.stats["conflicts"] += 1
                    return 409, status_object(
                        409, "Operation cannot be fulfilled on "
                        "baremetalhosts.metal3.io: the object has been "
                        "modified; please apply your changes to the latest "
                        "version and try again")
                return injected, status_object(
                    injected, "emulated failure (HTTP %d)" % injected)
            m = _PATH.match(parsed.path)
            if not m:
                return 404, status_object(404, "the server could not find "
                                          "the requested resource")
            namespace, name = (urllib.parse.unquote(g) if g else g
                               for g in m.groups())
            if name is None:
                if method != "GET":
                    return 405, status_object(405, "method not allowed")
                if not self._run_controller:
                    self.reconcile()
                items = [copy.deepcopy(o) for (ns, _), o in
                         sorted(self.hosts.items()) if ns == namespace]
                return 200, {"apiVersion": "%s/%s" % (GROUP, VERSION),
                             "kind": KIND + "List", "items": items,
                             "metadata": {"resourceVersion": str(self._rv)}}
            obj = self.hosts.get((namespace, name))
            if obj is None:
                return 404, status_object(
                    404, 'baremetalhosts.metal3.io "%s" not found' % name,
                    name=name)
            if method == "GET":
                self.stats["get"] += 1
                if not self._run_controller:
                    self.reconcile()
                return 200, copy.deepcopy(obj)
            if method == "PATCH":
                return self._patch(namespace, name, obj, headers, body)
            return 405, status_object(405, "method %s not allowed here"
                                      % method)

    def _patch(self, namespace, name, obj, headers, body):
        self.stats["patch"] += 1
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        types = self.stats["patch_types"]
        types[ctype] = types.get(ctype, 0) + 1
        if ctype not in (MERGE_PATCH, JSON_PATCH):
            return 415, status_object(
                415, "the body of the request was in an unknown format - "
                "accepted media types include: application/json-patch+json, "
                "application/merge-patch+json, application/apply-patch+yaml")
        if self.refuse_patch:
            code = self.refuse_patch
            message = {
                403: 'baremetalhosts.metal3.io "%s" is forbidden: User '
                     '"system:serviceaccount:instanceha:fencer" cannot patch '
                     'resource "baremetalhosts" in API group "metal3.io" in '
                     'the namespace "%s"' % (name, namespace),
                422: 'admission webhook "baremetalhost.metal3.io" denied '
                     'the request: emulated refusal'}.get(
                code, "emulated refusal (HTTP %d)" % code)
            return code, status_object(code, message, name=name)
        try:
            patch = json.loads(body or b"null")
        except ValueError:
            return 400, status_object(400, "the body is not valid JSON")
        try:
            if ctype == MERGE_PATCH:
                if not isinstance(patch, dict):
                    raise PatchError(400, "a merge patch must be an object")
                wanted_rv = (patch.get("metadata") or {}).get(
                    "resourceVersion")
                if wanted_rv is not None and \
                        wanted_rv != obj["metadata"]["resourceVersion"]:
                    self.stats["conflicts"] += 1
                    raise PatchError(409, "Operation cannot be fulfilled on "
                                     "baremetalhosts.metal3.io \"%s\": the "
                                     "object has been modified" % name)
                new = merge_patch(obj, patch)
            else:
                new = json_patch(obj, patch)
            self._validate(name, new)
        except PatchError as e:
            return e.code, status_object(e.code, str(e), name=name)
        # status is a subresource; identity fields are not patched
        new["status"] = obj["status"]
        for field in ("name", "namespace", "uid", "creationTimestamp"):
            new["metadata"][field] = obj["metadata"][field]
        if new.get("spec") != obj.get("spec"):
            new["metadata"]["generation"] = obj["metadata"]["generation"] + 1
        if new != obj:
            new["metadata"]["resourceVersion"] = self._next_rv()
        self.hosts[(namespace, name)] = new
        self.changed.notify_all()
        if not self._run_controller:
            self.reconcile()
        return 200, copy.deepcopy(new)

    @staticmethod
    def _validate(name, obj):
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise PatchError(400, "metadata must be an object")
        for field in ("annotations", "labels"):
            value = meta.get(field)
            if value is None:
                continue
            if not isinstance(value, dict) or not all(
                    isinstance(v, str) for v in value.values()):
                raise PatchError(400, "json: cannot unmarshal into "
                                 "metadata.%s of type map[string]string"
                                 % field)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise PatchError(422, 'BareMetalHost.metal3.io "%s" is invalid: '
                             'spec: must be an object' % name)
        if "online" in spec and not isinstance(spec["online"], bool):
            raise PatchError(422, 'BareMetalHost.metal3.io "%s" is invalid: '
                             'spec.online: Invalid value: %r: spec.online in '
                             'body must be of type boolean'
                             % (name, spec["online"]))

    # -- control (for a peer running in another process)
    def control(self, method, path, body):
        what = path[len("/_emulator/"):].strip("/")
        if what == "state" and method == "GET":
            with self.lock:
                if not self._run_controller:
                    self.reconcile()
                return 200, {"hosts": [copy.deepcopy(o) for _, o in
                                       sorted(self.hosts.items())],
                             "events": self.events(),
                             "stats": copy.deepcopy(self.stats)}
        if method != "POST":
            return 405, {"error": "POST only"}
        body = body or {}
        if what == "hosts":
            return 201, self.add_host(**body)
        if what == "configure":
            self.configure(**body)
            return 200, {}
        if what == "power":
            self.set_power(**body)
            return 200, {}
        return 404, {"error": "no such control %s" % what}

    # -- serving
    @property
    def port(self):
        return self._httpd.server_address[1] if self._httpd else self._port

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.cert else "http",
                                      self.port)

    def start(self):
        server = self
        context = None
        if self.cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.cert), str(self.key))

        class HTTPServer(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def finish_request(self, request, client_address):
                # TLS handshake in the request's own thread, so a client
                # that never completes it blocks nobody else
                if context is not None:
                    try:
                        request = context.wrap_socket(request,
                                                      server_side=True)
                    except (ssl.SSLError, OSError):
                        return
                with server.lock:
                    server._conns.add(request)
                try:
                    super().finish_request(request, client_address)
                finally:
                    with server.lock:
                        server._conns.discard(request)
                    if context is not None:
                        self.shutdown_request(request)

        self._httpd = HTTPServer(("127.0.0.1", self._port), _Handler)
        self._httpd.emulator = self
        t = threading.Thread(target=self._httpd.serve_forever,
                             kwargs={"poll_interval": 0.05},
                             name="kubeapi-http", daemon=True)
        t.start()
        self._threads.append(t)
        if self._run_controller:
            c = threading.Thread(target=self._controller_loop,
                                 name="kubeapi-controller", daemon=True)
            c.start()
            self._threads.append(c)
        return self

    def stop(self):
        """Stop serving and drop every open connection."""
        with self.lock:
            self._stopping = True
            self.changed.notify_all()
            conns = list(self._conns)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _keys(which):
    if which == "*" or which == ["*"]:
        return {"*"}
    return {tuple(k) for k in which}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "instanceha-kubeapi/1"
    # headers and body are two writes: without this, Nagle's algorithm and
    # the client's delayed ACK add ~40 ms to every answer
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):      # one line per request, stderr
        if os.environ.get("IHA_KUBEAPI_LOG"):
            sys.stderr.write("%s %s\n" % (self.log_date_time_string(),
                                          fmt % args))

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self):
        emulator = self.server.emulator
        body = self._body()
        if self.path.startswith("/_emulator/"):
            if self.headers.get(CONTROL_HEADER) != emulator.control_token:
                return self._reply(403, {"error": "control token"})
            try:
                parsed = json.loads(body) if body else None
                status, answer = emulator.control(self.command, self.path,
                                                  parsed)
            except (TypeError, ValueError, KeyError) as e:
                status, answer = 400, {"error": "%s: %s"
                                       % (type(e).__name__, e)}
            return self._reply(status, answer)
        status, answer = emulator.handle(self.command, self.path,
                                         self.headers, body)
        return self._reply(status, answer)

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve


# -- the emulator as a process of its own ------------------------------------

class KubeAPIPeer:
    """The emulator in a process of its own, on a free loopback port, over
    TLS (a self-signed certificate made per run) with a bearer token.
    ``start()`` returns once it answers; it is controlled over HTTP."""

    def __init__(self, name, workdir, token=None, tls=True, delay=0.2,
                 namespace="metal3"):
        from functional.peers import procs
        self.name = name
        self.dir = pathlib.Path(workdir) / ("kubeapi-%s" % name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.token = token or secrets.token_urlsafe(24)
        self.control_token = secrets.token_urlsafe(16)
        self.tls = tls
        self.delay = delay
        self.namespace = namespace
        self.port = procs.free_port()
        self.log = self.dir / "kubeapi.log"
        self.cert = self.key = None
        self.proc = None

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http",
                                      self.port)

    def start(self):
        from functional.peers import procs
        if self.tls and self.cert is None:
            from functional.peers.redfish import make_cert
            self.cert, self.key = make_cert(self.dir, self.log)
        config = {"port": self.port, "token": self.token,
                  "control_token": self.control_token, "delay": self.delay,
                  "cert": str(self.cert) if self.cert else None,
                  "key": str(self.key) if self.key else None}
        path = self.dir / "config.json"
        path.write_text(json.dumps(config))
        os.chmod(path, 0o600)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = procs.Proc("kubeapi-%s" % self.name,
                               [sys.executable, "-m",
                                "functional.peers.kubeapi", "--config", path],
                               self.log, env=env, cwd=str(REPO))
        self.proc.start()
        procs.wait_until(lambda: self._request("GET", "/version")[0] == 200,
                         20, "answering", "kubeapi-%s" % self.name, self.log,
                         interval=0.05, procs=[self.proc])
        return self

    def stop(self):
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- a client of our own (stdlib), for control and assertions
    def _request(self, method, path, body=None, headers=None):
        import http.client
        if self.tls:
            ctx = ssl.create_default_context(cafile=str(self.cert))
            conn = http.client.HTTPSConnection("127.0.0.1", self.port,
                                               timeout=5, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                              timeout=5)
        try:
            hdrs = {CONTROL_HEADER: self.control_token,
                    "Content-Type": "application/json"}
            hdrs.update(headers or {})
            conn.request(method, path, body=None if body is None
                         else json.dumps(body), headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, json.loads(data) if data else None
        finally:
            conn.close()

    def _control(self, method, what, body=None):
        from functional.peers.errors import PeerError
        status, answer = self._request(method, "/_emulator/" + what, body)
        if status >= 300:
            raise PeerError("kubeapi-%s" % self.name, "%s %s answered %d: %s"
                            % (method, what, status, answer), self.log)
        return answer

    def add_host(self, name, online=True, powered_on=None, annotations=None,
                 namespace=None):
        return self._control("POST", "hosts", {
            "name": name, "namespace": namespace or self.namespace,
            "online": online, "powered_on": powered_on,
            "annotations": annotations})

    def configure(self, **kwargs):
        return self._control("POST", "configure", kwargs)

    def set_power(self, name, on, namespace=None):
        return self._control("POST", "power", {
            "name": name, "on": on, "namespace": namespace or self.namespace})

    def state(self):
        return self._control("GET", "state")

    def host(self, name, namespace=None):
        namespace = namespace or self.namespace
        for obj in self.state()["hosts"]:
            meta = obj["metadata"]
            if meta["name"] == name and meta["namespace"] == namespace:
                return obj
        return None

    def power_state(self, name, namespace=None):
        """'on' or 'off', as the emulated controller reports the host."""
        return "on" if self.host(name, namespace)["status"]["poweredOn"] \
            else "off"

    def events(self):
        return self.state()["events"]

    def stats(self):
        return self.state()["stats"]

    def inventory_entry(self, name, **extra):
        """The host's inventory fields (token inline, CA file)."""
        entry = {"driver": "bmh", "api_url": self.url,
                 "namespace": self.namespace, "name": name,
                 "password": self.token}
        if self.tls:
            entry["ca_file"] = str(self.cert)
        entry.update(extra)
        return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True,
                        help="JSON: port, token, control_token, delay, "
                             "cert, key")
    args = parser.parse_args(argv)
    config = json.loads(pathlib.Path(args.config).read_text())
    server = KubeAPIServer(token=config.get("token"),
                           control_token=config["control_token"],
                           cert=config.get("cert"), key=config.get("key"),
                           delay=config.get("delay", 0.0),
                           port=int(config["port"]))
    server.start()
    print("kubeapi emulator serving %s" % server.url, flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
