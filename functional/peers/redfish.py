"""Redfish BMCs: sushy-tools' emulator with its fake systems driver.

One emulator process per host, so each host's BMC can misbehave on its own
(``refuse_power_off``). Each serves one system over TLS (a self-signed
certificate made per run, its file usable as the CA bundle) with HTTP basic
auth (bcrypt htpasswd). Power changes apply after ``power_delay`` seconds
(default 0). State lives in a per-run directory, so a restarted emulator
keeps its power state.

sushy-tools has no SessionService and answers every reset the same way, so
a BMC can be started with behaviours of real BMCs it lacks (each off unless
asked for; the emulator then runs behind :class:`_Extras`, a WSGI layer of
ours, see :func:`_emulate`):

``sessions``
    a Redfish SessionService: POST .../Sessions with UserName/Password
    answers 201 with X-Auth-Token and Location; the token authenticates
    until the session is deleted or expires (``session_ttl`` seconds idle,
    or :meth:`RedfishBMC.expire_sessions`).
``session_only``
    basic auth is refused (401) on every resource: only a session works.
    (Our own client, ``_get``/``_post``, is exempt.)
``off_conflict``
    an HTTP status (409, 400) answered to a power-off reset of a system
    that is already Off, as many BMCs do (the emulator answers 204).
``off_race``
    the system goes Off just before a power-off reset is handled, as if it
    lost power between the client's read and its reset.
``ignore_power_off``
    a power-off reset is accepted (204) and never carried out.
``health``
    the emulator reports every ``Status.Health`` as OK: with this, the
    health :meth:`RedfishBMC.set_health` sets replaces the ``Health`` of
    one resource (the System, the Thermal's fan N ...) in the emulator's
    own answers, the rest of each answer as the emulator made it.

:meth:`RedfishBMC.stats` counts what happened (sessions created, deleted,
expired; requests by token and by basic auth; conflicts; ignored resets).
"""

import base64
import io
import json
import os
import pathlib
import re
import secrets
import subprocess
import sys
import threading
import time
import uuid

import requests

from functional.peers import procs, venvs
from functional.peers.errors import PeerError, PeerMissing

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: header our own client sends: exempt from ``session_only``
PEER_HEADER = "X-IHA-Peer"


def make_cert(directory, log):
    """Self-signed certificate for 127.0.0.1; returns (cert, key) paths."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    if not cert.exists():
        procs.run("redfish-tls", ["openssl", "req", "-x509", "-newkey", "rsa:2048",
                                  "-nodes", "-keyout", key, "-out", cert,
                                  "-days", "3", "-subj", "/CN=127.0.0.1",
                                  "-addext", "subjectAltName=IP:127.0.0.1"], log)
    return cert, key


class RedfishBMC:
    driver = "redfish"

    def __init__(self, host, workdir, username="admin", password=None,
                 power_delay=0, refuse_power_off=False, sessions=False,
                 session_ttl=None, session_only=False, off_conflict=None,
                 off_race=False, ignore_power_off=False, health=False):
        self.host = host
        self.dir = pathlib.Path(workdir) / ("redfish-%s" % host)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.username = username
        self.password = password or secrets.token_urlsafe(12)
        self.power_delay = power_delay
        self.refuse_power_off = refuse_power_off
        #: behaviours of real BMCs the emulator lacks (see the module doc)
        self.extras = {k: v for k, v in dict(
            sessions=bool(sessions or session_only), session_ttl=session_ttl,
            session_only=bool(session_only), off_conflict=off_conflict,
            off_race=bool(off_race),
            ignore_power_off=bool(ignore_power_off),
            health=bool(health)).items() if v}
        self.system_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, host))
        self.port = procs.free_port()
        self.log = self.dir / "emulator.log"
        self.proc = None
        self.cert = self.key = None
        self._http = requests.Session()
        self._http.trust_env = False  # this machine exports REQUESTS_CA_BUNDLE

    @property
    def address(self):
        return "https://127.0.0.1:%d" % self.port

    @property
    def system_path(self):
        return "/redfish/v1/Systems/%s" % self.system_uuid

    def inventory_entry(self):
        return {"driver": "redfish", "address": self.address,
                "username": self.username, "password": self.password,
                "system_id": self.system_path, "verify": str(self.cert)}

    def _write_files(self):
        import_bcrypt = ("import bcrypt,sys; sys.stdout.write(bcrypt.hashpw("
                         "sys.stdin.buffer.read(), bcrypt.gensalt(4)).decode())")
        res = subprocess.run([str(venvs.sushy_venv() / "bin" / "python"), "-c",
                              import_bcrypt], input=self.password.encode(),
                             capture_output=True, timeout=60)
        if res.returncode != 0:
            raise PeerError("redfish-%s" % self.host, "cannot hash password: %s"
                            % res.stderr.decode()[-300:], self.log)
        (self.dir / "htpasswd").write_text("%s:%s\n" % (self.username,
                                                       res.stdout.decode()))
        self.cert, self.key = make_cert(self.dir, self.log)
        conf = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(self.cert),
            "SUSHY_EMULATOR_SSL_KEY": str(self.key),
            "SUSHY_EMULATOR_AUTH_FILE": str(self.dir / "htpasswd"),
            "SUSHY_EMULATOR_STATE_DIR": str(self.dir / "state"),
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_DISABLE_POWER_OFF": bool(self.refuse_power_off),
            "SUSHY_EMULATOR_FAKE_SYSTEMS": [{
                "uuid": self.system_uuid, "name": self.host,
                "power_state": "On", "external_notifier": False,
                "nics": [{"mac": "52:54:00:aa:bb:%02x" % (self.port % 256),
                          "ip": "127.0.0.1"}]}],
        }
        (self.dir / "emulator.conf").write_text(
            "".join("%s = %r\n" % kv for kv in conf.items()))

    def start(self):
        if self.proc is None:
            self._write_files()
        env = dict(os.environ, IHA_REDFISH_POWER_DELAY=str(int(self.power_delay)))
        env.pop("PYTHONPATH", None)
        python = venvs.sushy_venv() / "bin" / "python"
        if not python.exists():
            raise PeerMissing("redfish-%s" % self.host, "no sushy venv at %s"
                              % python, self.log)
        argv = [python, HERE / "sushy_launch.py"]
        if self.extras:
            # this module, run in the sushy venv, wraps the emulator
            argv = [python, "-m", "functional.peers.redfish", "--emulate"]
            env["PYTHONPATH"] = str(REPO)
            env["IHA_REDFISH_EXTRAS"] = json.dumps(self.extras)
        self.proc = procs.Proc("redfish-%s" % self.host,
                               argv + ["--config", self.dir / "emulator.conf"],
                               self.log, env=env, cwd=str(REPO))
        self.proc.start()
        procs.wait_until(lambda: self._get("/redfish/v1/").status_code == 200,
                         30, "answering over TLS", "redfish-%s" % self.host,
                         self.log, procs=[self.proc])
        return self

    def stop(self):
        if self.proc:
            self.proc.kill()

    def restart(self, refuse_power_off=None):
        """Restart the emulator (power state is kept), optionally changing
        whether it refuses power-off."""
        if refuse_power_off is not None:
            self.refuse_power_off = refuse_power_off
        self.stop()
        self._write_files()
        return self.start()

    # -- a client of our own, used by the BMC link and by assertions
    def _get(self, path):
        return self._http.get(self.address + path, auth=(self.username, self.password),
                              verify=str(self.cert), timeout=5,
                              headers={PEER_HEADER: "1"})

    def _post(self, path, body):
        return self._http.post(self.address + path, json=body,
                               auth=(self.username, self.password),
                               verify=str(self.cert), timeout=5,
                               headers={PEER_HEADER: "1"})

    def stats(self):
        """What the extras saw: {"created", "deleted", "expired", "live",
        "token_requests", "basic_requests", "basic_refused", "conflicts",
        "ignored", ...} (needs an extra behaviour)."""
        resp = self._get(_STATS)
        if resp.status_code != 200:
            raise PeerError("redfish-%s" % self.host, "GET stats answered %d"
                            % resp.status_code, self.log)
        return resp.json()

    def expire_sessions(self):
        """Every open session expires now, as after its idle timeout."""
        resp = self._post(_STATS + "/expire", {})
        if resp.status_code != 204:
            raise PeerError("redfish-%s" % self.host, "expiring sessions "
                            "answered %d" % resp.status_code, self.log)

    def set_health(self, path, health, member=None):
        """The emulator's answer at ``path`` reports ``health`` (OK,
        Warning, Critical) in its ``Status.Health``, or in that of the
        ``member`` = (list key, index) of it (``("Fans", 0)``). Needs the
        ``health`` extra."""
        resp = self._post(_HEALTH, {"path": path, "health": health,
                                    "member": list(member) if member
                                    else None})
        if resp.status_code != 204:
            raise PeerError("redfish-%s" % self.host, "setting health "
                            "answered %d" % resp.status_code, self.log)

    def power_state(self):
        """'on' or 'off' as the emulator reports it (applies due changes)."""
        resp = self._get(self.system_path)
        if resp.status_code != 200:
            raise PeerError("redfish-%s" % self.host, "GET system answered %d"
                            % resp.status_code, self.log)
        return resp.json()["PowerState"].lower()

    def reset(self, reset_type):
        resp = self._post(self.system_path + "/Actions/ComputerSystem.Reset",
                          {"ResetType": reset_type})
        if resp.status_code >= 400:
            raise PeerError("redfish-%s" % self.host, "reset %s answered %d: %s"
                            % (reset_type, resp.status_code, resp.text[:200]),
                            self.log)

    def power_on(self):
        self.reset("On")

    def power_off(self):
        self.reset("ForceOff")


def start_bmcs(hosts, workdir, **kwargs):
    bmcs = {}
    try:
        for host in hosts:
            bmcs[host] = RedfishBMC(host, workdir, **kwargs).start()
    except BaseException:
        for b in bmcs.values():
            b.stop()
        raise
    return bmcs


# -- inside the sushy venv: the emulator behind our extra behaviours ---------

SESSION_SERVICE = "/redfish/v1/SessionService"
SESSIONS = SESSION_SERVICE + "/Sessions"
_STATS = "/iha-peer/stats"
_HEALTH = "/iha-peer/health"
_RESET = re.compile(r"^/redfish/v1/Systems/([^/]+)/Actions/"
                    r"ComputerSystem\.Reset/?$")
_OFF_RESETS = ("ForceOff", "GracefulShutdown", "PushPowerButton")
_PUBLIC = ("", "/redfish", "/redfish/v1")


class _Extras:
    """WSGI layer in front of the emulator (outside its basic-auth layer)
    adding the behaviours named in ``opts`` (see the module doc)."""

    def __init__(self, emulator, inner, opts):
        from sushy_tools.emulator import auth_basic
        self.emulator = emulator          # the Flask app: its systems driver
        self.inner = inner
        self.opts = opts
        self.auth_file = emulator.config.get("SUSHY_EMULATOR_AUTH_FILE")
        self._authenticate = auth_basic.authenticate
        self.lock = threading.Lock()
        self.sessions = {}                # id -> {token, user, password, used}
        #: path -> {(list key, index) or None: Health} (the health extra)
        self.health = {}
        self.stats = dict.fromkeys(
            ("created", "deleted", "expired", "refused", "token_requests",
             "token_refused", "basic_requests", "basic_refused", "conflicts",
             "raced_off", "ignored"), 0)

    # -- small WSGI helpers
    @staticmethod
    def _reply(start_response, status, body=None, headers=()):
        reasons = {200: "OK", 201: "Created", 204: "No Content",
                   400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                   409: "Conflict"}
        data = b"" if body is None else json.dumps(body).encode()
        hdrs = list(headers)
        if body is not None:
            hdrs.append(("Content-Type", "application/json"))
        hdrs.append(("Content-Length", str(len(data))))
        start_response("%d %s" % (status, reasons.get(status, "Error")), hdrs)
        return [data]

    @staticmethod
    def _error(start_response, status, message, headers=()):
        return _Extras._reply(start_response, status, {"error": {
            "code": "Base.1.8.GeneralError", "message": message,
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.GeneralError",
                                       "Message": message}]}}, headers)

    @staticmethod
    def _body(env):
        length = int(env.get("CONTENT_LENGTH") or 0)
        data = env["wsgi.input"].read(length) if length else b""
        env["wsgi.input"] = io.BytesIO(data)
        try:
            return json.loads(data or b"{}")
        except ValueError:
            return {}

    def _capture(self, env):
        seen = {}

        def start_response(status, headers, exc_info=None):
            seen["status"], seen["headers"] = status, headers
            return lambda data: None
        result = self.inner(env, start_response)
        try:
            body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return seen["status"], seen["headers"], body

    def _check(self, user, password):
        try:
            self._authenticate(self.auth_file, user, password.encode())
            return True
        except Exception:          # noqa: BLE001 - sushy-tools' Unauthorized
            return False

    def _basic(self, env):
        value = env.get("HTTP_AUTHORIZATION") or ""
        if not value.lower().startswith("basic "):
            return None, None
        try:
            user, _, password = base64.b64decode(value[6:]).decode().partition(":")
        except ValueError:
            return None, None
        return user, password

    def _authorized(self, env):
        user, password = self._basic(env)
        return user is not None and self._check(user, password)

    # -- the layer
    def __call__(self, env, start_response):
        path = env.get("PATH_INFO", "").rstrip("/")
        method = env.get("REQUEST_METHOD", "GET")
        peer = env.get("HTTP_" + PEER_HEADER.upper().replace("-", "_")) == "1"
        if path in (_STATS, _STATS + "/expire"):
            return self._stats(env, start_response, method)
        if path == _HEALTH and method == "POST":
            return self._set_health(env, start_response)
        if self.opts.get("sessions"):
            if path == SESSIONS and method == "POST":
                return self._open(env, start_response)
            token = env.pop("HTTP_X_AUTH_TOKEN", None)
            if token is not None:
                session = self._by_token(token)
                if session is None:
                    return self._error(start_response, 401,
                                       "The session is not valid or expired.")
                env["HTTP_AUTHORIZATION"] = "Basic " + base64.b64encode(
                    ("%s:%s" % (session["user"], session["password"]))
                    .encode()).decode()
            elif env.get("HTTP_AUTHORIZATION") and not peer:
                with self.lock:
                    self.stats["basic_requests"] += 1
                if self.opts.get("session_only") and path not in _PUBLIC:
                    with self.lock:
                        self.stats["basic_refused"] += 1
                    return self._error(start_response, 401, "Basic "
                                       "authentication is disabled; open a "
                                       "session.")
            if path in _PUBLIC[2:] and method == "GET":
                return self._root(env, start_response)
            if path.startswith(SESSION_SERVICE):
                return self._session_service(env, start_response, path,
                                             method)
        elif env.get("HTTP_AUTHORIZATION") and not peer:
            with self.lock:
                self.stats["basic_requests"] += 1
        match = _RESET.match(path)
        if match and method == "POST":
            return self._reset(env, start_response, match.group(1))
        with self.lock:
            patch = dict(self.health.get(path) or {})
        if patch and method == "GET":
            return self._with_health(env, start_response, patch)
        return self.inner(env, start_response)

    def _set_health(self, env, start_response):
        if not self._authorized(env):
            return self._error(start_response, 401, "Unauthorized")
        body = self._body(env)
        member = tuple(body["member"]) if body.get("member") else None
        with self.lock:
            self.health.setdefault(body["path"].rstrip("/"), {})[member] = \
                body["health"]
        return self._reply(start_response, 204)

    def _with_health(self, env, start_response, patch):
        status, headers, body = self._capture(env)
        try:
            doc = json.loads(body)
        except ValueError:
            start_response(status, headers)
            return [body]
        for member, health in patch.items():
            target = doc if member is None else doc[member[0]][member[1]]
            target.setdefault("Status", {})["Health"] = health
        return self._reply(start_response, int(status.split()[0]), doc)

    def _stats(self, env, start_response, method):
        if not self._authorized(env):
            return self._error(start_response, 401, "Unauthorized")
        with self.lock:
            if method == "POST":
                for session in self.sessions.values():
                    session["used"] = float("-inf")
                return self._reply(start_response, 204)
            self._expire()
            body = dict(self.stats, live=len(self.sessions))
        return self._reply(start_response, 200, body)

    def _expire(self):
        """Drop idle sessions (called with self.lock held)."""
        ttl = self.opts.get("session_ttl")
        now = time.monotonic()
        for sid, session in list(self.sessions.items()):
            if session["used"] == float("-inf") or (
                    ttl and now - session["used"] > ttl):
                del self.sessions[sid]
                self.stats["expired"] += 1

    def _by_token(self, token):
        with self.lock:
            self._expire()
            for session in self.sessions.values():
                if secrets.compare_digest(session["token"], token):
                    session["used"] = time.monotonic()
                    self.stats["token_requests"] += 1
                    return session
            self.stats["token_refused"] += 1
        return None

    def _open(self, env, start_response):
        body = self._body(env)
        user = str(body.get("UserName") or "")
        password = str(body.get("Password") or "")
        if not self._check(user, password):
            with self.lock:
                self.stats["refused"] += 1
            return self._error(start_response, 401, "Incorrect username or "
                               "password")
        sid = uuid.uuid4().hex[:12]
        token = secrets.token_urlsafe(24)
        with self.lock:
            self.sessions[sid] = {"token": token, "user": user,
                                  "password": password,
                                  "used": time.monotonic()}
            self.stats["created"] += 1
        location = "%s/%s" % (SESSIONS, sid)
        return self._reply(start_response, 201, self._session(sid, user),
                           [("X-Auth-Token", token), ("Location", location)])

    @staticmethod
    def _session(sid, user):
        return {"@odata.type": "#Session.v1_0_0.Session",
                "@odata.id": "%s/%s" % (SESSIONS, sid), "Id": sid,
                "Name": "User Session", "UserName": user}

    def _root(self, env, start_response):
        status, headers, body = self._capture(env)
        try:
            doc = json.loads(body)
        except ValueError:
            start_response(status, headers)
            return [body]
        doc["SessionService"] = {"@odata.id": SESSION_SERVICE}
        doc.setdefault("Links", {})["Sessions"] = {"@odata.id": SESSIONS}
        return self._reply(start_response, int(status.split()[0]), doc)

    def _session_service(self, env, start_response, path, method):
        if not self._authorized(env):
            return self._error(start_response, 401, "Unauthorized")
        if path == SESSION_SERVICE and method == "GET":
            return self._reply(start_response, 200, {
                "@odata.type": "#SessionService.v1_1_0.SessionService",
                "@odata.id": SESSION_SERVICE, "Id": "SessionService",
                "Name": "Session Service", "ServiceEnabled": True,
                "SessionTimeout": int(self.opts.get("session_ttl") or 1800),
                "Sessions": {"@odata.id": SESSIONS}})
        with self.lock:
            self._expire()
            if path == SESSIONS and method == "GET":
                members = [{"@odata.id": "%s/%s" % (SESSIONS, sid)}
                           for sid in self.sessions]
                return self._reply(start_response, 200, {
                    "@odata.type": "#SessionCollection.SessionCollection",
                    "@odata.id": SESSIONS, "Name": "Session Collection",
                    "Members@odata.count": len(members), "Members": members})
            sid = path[len(SESSIONS) + 1:]
            session = self.sessions.get(sid) if "/" not in sid else None
            if session is None:
                return self._error(start_response, 404, "No session %s" % sid)
            if method == "DELETE":
                del self.sessions[sid]
                self.stats["deleted"] += 1
                return self._reply(start_response, 204)
            if method == "GET":
                return self._reply(start_response, 200,
                                   self._session(sid, session["user"]))
        return self._error(start_response, 400, "Unsupported")

    def _reset(self, env, start_response, identity):
        reset = self._body(env).get("ResetType")
        if reset not in _OFF_RESETS or not self._authorized(env):
            return self.inner(env, start_response)
        systems = self.emulator.systems
        try:
            if self.opts.get("off_race"):
                systems.set_power_state(identity, "ForceOff")
                with self.lock:
                    self.stats["raced_off"] += 1
            state = systems.get_power_state(identity)
        except Exception:           # noqa: BLE001 - let the emulator answer
            return self.inner(env, start_response)
        if self.opts.get("off_conflict") and state == "Off":
            with self.lock:
                self.stats["conflicts"] += 1
            return self._error(start_response, int(self.opts["off_conflict"]),
                               "The system is already powered off.")
        if self.opts.get("ignore_power_off"):
            with self.lock:
                self.stats["ignored"] += 1
            return self._reply(start_response, 204)
        return self.inner(env, start_response)


def _emulate(argv):
    """Run sushy-tools' emulator (with the fixed power delay of
    sushy_launch) behind :class:`_Extras`; options in $IHA_REDFISH_EXTRAS."""
    import functional.peers.sushy_launch  # noqa: F401 - fixes the delay
    from sushy_tools.emulator import main as emulator

    opts = json.loads(os.environ.get("IHA_REDFISH_EXTRAS") or "{}")
    app = emulator.app
    run = app.run

    def run_wrapped(*args, **kwargs):
        # after main() configured the app (and its basic-auth layer)
        app.wsgi_app = _Extras(app, app.wsgi_app, opts)
        return run(*args, **kwargs)
    app.run = run_wrapped
    sys.argv = [sys.argv[0]] + list(argv)
    return emulator.main()


if __name__ == "__main__" and sys.argv[1:2] == ["--emulate"]:
    sys.exit(_emulate(sys.argv[2:]))
elif __name__ == "__main__":  # manual check: python -m functional.peers.redfish DIR
    b = RedfishBMC("compute-x", sys.argv[1]).start()
    print(b.address, b.power_state())
    b.power_off()
    print(b.power_state())
    b.stop()
