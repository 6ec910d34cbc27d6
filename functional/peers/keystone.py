"""A real Keystone on loopback: the identity service of a Keystone-mode bed.

``Keystone(workdir, run_id)`` does what an operator does, in this order:

1. a database ``iha_<run>_keystone`` on the machine's MariaDB
   (``infra.MariaDB``, dropped at the end);
2. ``keystone.conf`` (fernet tokens, ``[token] expiration``, cheap bcrypt
   rounds for a test bed, CADF ``identity.authenticate`` notifications
   written to Keystone's own log);
3. ``keystone-manage db_sync``, ``fernet_setup``, ``credential_setup`` and
   ``bootstrap`` (admin user, project ``admin``, roles admin/manager/member/
   reader/service, the identity service and its endpoints);
4. ``keystone.wsgi.api:application`` served over HTTP like nova-api
   (``novaside/serve_wsgi.py``);
5. through Keystone's own API: project ``service`` with users ``nova`` and
   ``placement`` (roles admin and service), user ``instanceha`` (admin on
   ``service``: what instanceha authenticates as), project ``demo`` with
   ``demo`` (member) and ``observer`` (reader).

Compute and placement endpoints are added by :meth:`add_endpoint` once
their ports are known. Keystone runs from its own venv
(``tools/realpeers/install.sh``). :meth:`restart` starts the same Keystone
again with another token lifetime (keys and database are kept), so a test
can make tokens short-lived without a new bed.
"""

import configparser
import json
import os
import pathlib
import threading
import time

import requests

from functional.peers import infra, procs, venvs
from functional.peers.errors import PeerError

HERE = pathlib.Path(__file__).resolve().parent
NOVASIDE = HERE / "novaside"
START_TIMEOUT = float(os.environ.get("INSTANCEHA_NOVA_START_TIMEOUT", "240"))
REGION = "RegionOne"
DOMAIN = "Default"

#: name -> (password, project, roles on that project)
USERS = {
    "nova": ("nova-secret-pw", "service", ("admin", "service")),
    "placement": ("placement-secret-pw", "service", ("admin", "service")),
    "instanceha": ("instanceha-secret-pw", "service", ("admin",)),
    "demo": ("demo-secret-pw", "demo", ("member",)),
    "observer": ("observer-secret-pw", "demo", ("reader",)),
}
ADMIN_PASSWORD = "admin-secret-pw"


class Keystone(procs.StartedOnEnter):
    peer = "keystone"

    def __init__(self, workdir, run_id, token_expiration=3600):
        self.workdir = pathlib.Path(workdir)
        self.run_id = run_id
        self.token_expiration = token_expiration
        self.logs = self.workdir / "logs"
        self.etc = self.workdir / "etc"
        self.keys = self.workdir / "keys"
        self.port = None
        self.proc = None
        self.db = None
        self.ids = {}          # users, projects and roles by name
        self.timings = {}
        self._tokens = {}      # (user, project) -> (token, renew_after)
        self._lock = threading.Lock()
        self._http = requests.Session()
        self._http.trust_env = False

    # ------------------------------------------------------------ layout
    @property
    def venv(self):
        return venvs.keystone_venv()

    def _bin(self, name):
        return str(self.venv / "bin" / name)

    @property
    def log(self):
        return self.logs / "keystone.log"

    @property
    def setup_log(self):
        return self.logs / "keystone-setup.log"

    @property
    def url(self):
        """The identity endpoint (``auth_url``), ``http://127.0.0.1:P/v3``."""
        return "http://127.0.0.1:%d/v3" % self.port

    @property
    def running(self):
        return self.proc is not None and self.proc.running()

    # ------------------------------------------------------------ start
    def start(self):
        t0 = time.monotonic()
        for d in (self.logs, self.etc, self.keys / "fernet",
                  self.keys / "credential", self.keys / "receipts"):
            d.mkdir(parents=True, exist_ok=True)
        for d in (self.keys, self.keys / "fernet", self.keys / "credential",
                  self.keys / "receipts"):
            d.chmod(0o700)    # Keystone warns about readable key dirs
        self.venv  # builds the venv on a fresh machine
        self.db = infra.MariaDB(self.run_id, self.logs / "mariadb.log")
        self.db.check()
        (self.dbname,) = self.db.create("keystone")
        self.port = procs.free_port()
        self._write_config()
        manage = [self._bin("keystone-manage"), "--config-file", self.conf]
        env = self._env()
        procs.run("keystone-manage", manage + ["db_sync"], self.setup_log, env=env)
        self.timings["db_sync"] = time.monotonic() - t0
        for what in ("fernet_setup", "credential_setup"):
            procs.run("keystone-manage", manage + [
                what, "--keystone-user", str(os.getuid()),
                "--keystone-group", str(os.getgid())], self.setup_log, env=env)
        env = dict(env, OS_BOOTSTRAP_PASSWORD=ADMIN_PASSWORD)
        procs.run("keystone-manage", manage + [
            "bootstrap", "--bootstrap-username", "admin",
            "--bootstrap-project-name", "admin",
            "--bootstrap-role-name", "admin",
            "--bootstrap-service-name", "keystone",
            "--bootstrap-region-id", REGION,
            "--bootstrap-public-url", self.url,
            "--bootstrap-internal-url", self.url,
            "--bootstrap-admin-url", self.url], self.setup_log, env=env)
        self._serve()
        self._populate()
        self.timings["ready"] = time.monotonic() - t0
        return self

    @property
    def conf(self):
        return self.etc / "keystone.conf"

    def _env(self):
        env = dict(os.environ)
        for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(k, None)
        return env

    def _write_config(self):
        sections = {
            "DEFAULT": {
                "debug": "False",
                # Keystone's audit records of each authentication, in its log:
                # the tests count the tokens issued to a user from them.
                "notification_format": "cadf",
                "notification_opt_out": "identity.authenticate.pending",
            },
            "oslo_messaging_notifications": {"driver": "log"},
            "database": {"connection": self.db.url(self.dbname)},
            "token": {"provider": "fernet",
                      "expiration": str(self.token_expiration)},
            "fernet_tokens": {"key_repository": str(self.keys / "fernet")},
            "fernet_receipts": {"key_repository": str(self.keys / "receipts")},
            "credential": {"key_repository": str(self.keys / "credential")},
            # A test bed's passwords need no slow hash (bcrypt's minimum).
            "identity": {"password_hash_rounds": "4"},
            # One process: an in-memory cache spares the database a token
            # validation's role and catalog queries (seconds each on a
            # loaded 2-core machine without it).
            "cache": {"enabled": "True", "backend": "oslo_cache.dict"},
        }
        cp = configparser.RawConfigParser()
        cp.optionxform = str
        for section, values in sections.items():
            if section != "DEFAULT":
                cp.add_section(section)
            for k, v in values.items():
                cp.set(section, k, v)
        with open(self.conf, "w") as f:
            cp.write(f)

    def _serve(self):
        env = dict(self._env(), OS_KEYSTONE_CONFIG_DIR=str(self.etc))
        self.proc = procs.Proc("keystone", [
            self._bin("python"), NOVASIDE / "serve_wsgi.py",
            "keystone.wsgi.api:application", self.port],
            self.log, env=env, cwd=str(self.workdir)).start()
        procs.wait_until(lambda: self._answers(), START_TIMEOUT, "answering",
                         self.peer, self.log, procs=[self.proc])

    def _answers(self):
        try:
            return self._http.get(self.url, timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def restart(self, token_expiration=None):
        """Start Keystone again (same database and keys), optionally with
        another ``[token] expiration``. Tokens issued before stay valid
        until their own expiry (fernet keys are kept)."""
        if token_expiration is not None:
            self.token_expiration = token_expiration
        if self.proc is not None:
            self.proc.kill()
        self._write_config()
        with self._lock:
            self._tokens.clear()
        self._serve()
        return self

    # ------------------------------------------------------------ API
    def request(self, method, path, body=None, token=None, ok=(200, 201, 204)):
        headers = {"Accept": "application/json"}
        headers["X-Auth-Token"] = token or self.admin_token()
        resp = self._http.request(method, self.url + path, json=body,
                                  headers=headers, timeout=30)
        if ok is not None and resp.status_code not in ok:
            raise PeerError(self.peer, "%s %s answered %d: %s" % (
                method, path, resp.status_code, resp.text[:300]), self.log)
        return resp

    def authenticate(self, user, password, project, domain=DOMAIN):
        """POST /v3/auth/tokens with a password: ``(token, body)``."""
        body = {"auth": {"identity": {"methods": ["password"], "password": {
            "user": {"name": user, "domain": {"name": domain},
                     "password": password}}}}}
        if project:
            body["auth"]["scope"] = {"project": {
                "name": project, "domain": {"name": domain}}}
        resp = self._http.post(self.url + "/auth/tokens", json=body,
                               timeout=30)
        if resp.status_code != 201:
            raise PeerError(self.peer, "token for %s in %s refused: %d %s" % (
                user, project, resp.status_code, resp.text[:300]), self.log)
        return resp.headers["X-Subject-Token"], resp.json()["token"]

    def token(self, user, password=None, project=None):
        """A project-scoped token for ``user`` (cached until near expiry).

        ``password`` and ``project`` default to the bed's own for that
        user (see USERS; ``admin``/project ``admin``)."""
        if user == "admin":
            password = password or ADMIN_PASSWORD
            project = project or "admin"
        else:
            known = USERS.get(user, (None, None, None))
            password = password or known[0]
            project = project or known[1]
        key = (user, password, project)
        with self._lock:
            cached = self._tokens.get(key)
            if cached and time.monotonic() < cached[1]:
                return cached[0]
        token, _body = self.authenticate(user, password, project)
        renew = time.monotonic() + max(1.0, self.token_expiration / 2.0)
        with self._lock:
            self._tokens[key] = (token, renew)
        return token

    def admin_token(self):
        return self.token("admin")

    def forget_token(self, token):
        with self._lock:
            for key, (tok, _r) in list(self._tokens.items()):
                if tok == token:
                    del self._tokens[key]

    @property
    def admin_credentials(self):
        """What a client needs to authenticate as the bed's admin."""
        return self.credentials("admin")

    def credentials(self, user):
        """clouds.yaml-style ``auth`` for one of the bed's users."""
        if user == "admin":
            password, project = ADMIN_PASSWORD, "admin"
        else:
            password, project = USERS[user][0], USERS[user][1]
        return {"auth_url": self.url, "username": user, "password": password,
                "project_name": project, "user_domain_name": DOMAIN,
                "project_domain_name": DOMAIN}

    def _create(self, kind, plural, body, name):
        resp = self.request("POST", "/" + plural, {kind: body}, ok=(201, 409))
        if resp.status_code == 409:
            found = self.request("GET", "/%s?name=%s" % (plural, name)).json()
            return found[plural][0]["id"]
        return resp.json()[kind]["id"]

    def _populate(self):
        roles = {r["name"]: r["id"] for r in
                 self.request("GET", "/roles").json()["roles"]}
        self.ids.update(("role:" + k, v) for k, v in roles.items())
        domain = self.request("GET", "/domains?name=%s" % DOMAIN).json()
        domain_id = domain["domains"][0]["id"]
        for project in ("service", "demo"):
            self.ids["project:" + project] = self._create(
                "project", "projects", {"name": project, "domain_id": domain_id},
                project)
        for user, (password, project, user_roles) in USERS.items():
            uid = self.ids["user:" + user] = self._create(
                "user", "users", {"name": user, "password": password,
                                  "domain_id": domain_id}, user)
            for role in user_roles:
                self.request("PUT", "/projects/%s/users/%s/roles/%s" % (
                    self.ids["project:" + project], uid, roles[role]))
        self.ids["user:admin"] = self.request(
            "GET", "/users?name=admin").json()["users"][0]["id"]

    def add_endpoint(self, service_type, name, url):
        """Put a service with public and internal endpoints in the catalog."""
        services = self.request("GET", "/services?type=%s" % service_type).json()
        if services["services"]:
            sid = services["services"][0]["id"]
        else:
            sid = self.request("POST", "/services", {"service": {
                "type": service_type, "name": name}}).json()["service"]["id"]
        have = self.request("GET", "/endpoints?service_id=%s" % sid).json()
        for ep in have["endpoints"]:
            self.request("DELETE", "/endpoints/%s" % ep["id"])
        for interface in ("public", "internal"):
            self.request("POST", "/endpoints", {"endpoint": {
                "service_id": sid, "interface": interface, "url": url,
                "region_id": REGION}})

    def user_id(self, name):
        return self.ids["user:" + name]

    def application_credential(self, user, name, password=None):
        """Create an application credential for ``user`` (as that user, on
        its project): ``{"id": ..., "secret": ...}``."""
        token = self.token(user, password)
        resp = self.request("POST", "/users/%s/application_credentials"
                            % self.user_id(user),
                            {"application_credential": {"name": name}},
                            token=token)
        return resp.json()["application_credential"]

    def revoke_user_tokens(self, user):
        """Invalidate every token ``user`` holds, as Keystone does when a
        password is changed: set the same password again."""
        password = ADMIN_PASSWORD if user == "admin" else USERS[user][0]
        self.request("PATCH", "/users/%s" % self.user_id(user),
                     {"user": {"password": password}})
        with self._lock:
            for key in [k for k in self._tokens if k[0] == user]:
                del self._tokens[key]

    # ------------------------------------------------------------ records
    def authentications(self, user=None):
        """Keystone's CADF ``identity.authenticate`` records from its log,
        oldest first: dicts with ``time`` (epoch s), ``outcome``,
        ``user_id``."""
        out = []
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return out
        marker = "oslo.messaging.notification.identity.authenticate"
        for line in text.splitlines():
            if marker not in line:
                continue
            start = line.find("{")
            try:
                msg = json.loads(line[start:])
            except ValueError:
                continue
            payload = msg.get("payload", {})
            rec = {"outcome": payload.get("outcome"),
                   "user_id": (payload.get("initiator") or {}).get("id"),
                   "time": _cadf_time(payload.get("eventTime")),
                   "event_type": msg.get("event_type")}
            if user is None or rec["user_id"] == self.user_id(user):
                out.append(rec)
        return out

    # ------------------------------------------------------------ stop
    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc = None
        if self.db is not None:
            self.db.drop_all()


def _cadf_time(text):
    """CADF eventTime (``2026-11-25T07:01:53.123456+0000``) -> epoch s."""
    import datetime
    if not text:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            return datetime.datetime.strptime(text, fmt).timestamp()
        except ValueError:
            pass
    return None
