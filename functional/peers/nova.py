"""A real Nova control plane with fake-driver computes, on loopback.

``NovaCloud(workdir, hosts)`` starts, in this order:

1. per-run databases on MariaDB and a per-run RabbitMQ vhost (``infra``);
2. the image/network stand-ins (``stubsvc``);
3. ``placement`` and ``nova-api`` as WSGI apps over HTTP, ``nova-conductor``,
   ``nova-scheduler``;
4. one ``nova-compute`` per host (Nova's ``fake.FakeDriverWithoutFakeNodes``
   through ``novaside/iha_fakevirt.py``, whose live migrations a test may
   hold in ``running``: :meth:`NovaCloud.hold_live_migrations`; its own
   ``state_path``) so a host can be killed and started again like a real
   one.

Nova and Placement run from the venv ``tools/realpeers/install.sh`` builds;
nothing of Nova is faked, only the image service and the network service,
and, in the default ``noauth`` mode, Keystone (an admin-context paste
filter). In ``keystone`` mode (``auth="keystone"`` with a running
:class:`functional.peers.keystone.Keystone`, or :meth:`NovaCloud.switch_auth`
on a running cloud) nova-api and placement keep their own paste pipelines
with keystonemiddleware's ``auth_token`` against that Keystone, and every
Nova service reaches placement and the network stub as the ``nova`` service
user. Heartbeats are fast
(``report_interval = 2``, ``service_down_time = 8``) so a killed compute is
seen ``down`` after 6–8 s.

Every process logs to ``<workdir>/logs/<name>.log``; a process that dies or a
service that does not come up raises ``PeerError`` naming it and that log.
"""

import configparser
import json
import os
import pathlib
import sys
import threading
import time
import uuid

import requests

from functional.peers import evacwatch, infra, procs, venvs
from functional.peers.errors import PeerError
from functional.peers.faultproxy import HttpFaultProxy

HERE = pathlib.Path(__file__).resolve().parent
NOVASIDE = HERE / "novaside"
CELL_NAME = "cell1"
IMAGE_ID = "6a1d3a0e-4c2f-4c55-9a58-1f0d2b7c9e01"  # any id is an image
FLAVOR_ID = "iha.tiny"
#: the computes' virt driver: Nova's fake.FakeDriverWithoutFakeNodes whose
#: live migrations can be held running (novaside/iha_fakevirt.py)
COMPUTE_DRIVER = "iha_fake.HeldLiveMigrationDriver"
HOLD_FILE = "hold-live-migrations"   # iha_fakevirt.HOLD_FILE
#: guests a test turned off (novaside/iha_fakevirt.py POWER_FILE)
POWER_FILE = "guest-power"
#: the computes' [DEFAULT] sync_power_state_interval, seconds
SYNC_POWER_STATE = 5
DEFAULT_HOSTS = ("compute-0", "compute-1", "compute-2")
START_TIMEOUT = float(os.environ.get("INSTANCEHA_NOVA_START_TIMEOUT", "240"))


class NovaCloud(procs.StartedOnEnter):

    def __init__(self, workdir, hosts=DEFAULT_HOSTS, run_id=None,
                 report_interval=2, service_down_time=8, auth="noauth",
                 keystone=None):
        if auth not in ("noauth", "keystone"):
            raise ValueError("auth is 'noauth' or 'keystone', not %r" % auth)
        if auth == "keystone" and keystone is None:
            raise ValueError("auth='keystone' needs a Keystone")
        self.auth = auth
        self.keystone = keystone
        self.workdir = pathlib.Path(workdir)
        self.hosts = list(hosts)
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.report_interval = report_interval
        self.service_down_time = service_down_time
        self.logs = self.workdir / "logs"
        self.etc = self.workdir / "etc"
        self.state = self.workdir / "state"
        self.procs = {}
        self._lock = threading.Lock()
        self.setup_log = self.logs / "setup.log"
        self.db = None
        self.rabbit = None
        self.ports = {}
        self.timings = {}
        #: every evacuate request on its way to nova-api, with its host's
        #: power (TestBed sets ``power_of``); see functional/peers/evacwatch.py
        self.evacuations = evacwatch.EvacuateRecorder(self._server_host)
        #: the forwarding proxy every client reaches nova-api through
        self.front = None

    # ------------------------------------------------------------ layout
    @property
    def venv(self):
        return venvs.nova_venv()

    def _bin(self, name):
        return str(self.venv / "bin" / name)

    @property
    def api_url(self):
        """Where clients reach nova-api: through :attr:`front`, which
        records every evacuate request (:attr:`evacuations`)."""
        if self.front is not None:
            return self.front.url + "/v2.1"
        return self.nova_api_url

    @property
    def nova_api_url(self):
        """nova-api itself, behind no proxy."""
        return "http://127.0.0.1:%d/v2.1" % self.ports["api"]

    @property
    def placement_url(self):
        return "http://127.0.0.1:%d" % self.ports["placement"]

    def log_of(self, name):
        return self.logs / ("%s.log" % name)

    # ------------------------------------------------------------ start
    def start(self):
        t0 = time.monotonic()
        for d in (self.logs, self.etc, self.state):
            d.mkdir(parents=True, exist_ok=True)
        self.venv  # builds the venv on a fresh machine
        self.timings["venv"] = time.monotonic() - t0
        self.db = infra.MariaDB(self.run_id, self.log_of("mariadb"))
        self.rabbit = infra.RabbitVhost(self.run_id, self.log_of("rabbitmq"))
        self.db.check()
        self.rabbit.create()
        self.dbs = dict(zip(("api", "cell0", "cell1", "placement"),
                            self.db.create("api", "cell0", "cell1", "placement")))
        for key in ("api", "placement", "image", "network"):
            self.ports[key] = procs.free_port()
        self.front = HttpFaultProxy("http://127.0.0.1:%d" % self.ports["api"],
                                    inspect=self.evacuations.inspect)
        if self.auth == "keystone":
            self._register_endpoints()
        self._write_config()
        self._start_stubs()
        self._sync_databases()
        self.timings["db_sync"] = time.monotonic() - t0
        self._start_control()
        self.timings["api"] = time.monotonic() - t0
        for host in self.hosts:
            self.start_compute(host)
        self.wait_ready()
        self.timings["ready"] = time.monotonic() - t0
        self.ensure_flavor()
        return self

    def _python(self):
        return self._bin("python")

    def _start_control(self):
        """placement, nova-api, conductor, scheduler; waits for the APIs."""
        self._start("placement", [self._python(), NOVASIDE / "serve_wsgi.py",
                                  "placement.wsgi.api:application",
                                  self.ports["placement"]],
                    env={"OS_PLACEMENT_CONFIG_DIR": str(self.etc / "placement")})
        self._start("nova-api", [self._python(), NOVASIDE / "serve_wsgi.py",
                                 "nova.wsgi.osapi_compute:application",
                                 self.ports["api"]],
                    env={"OS_NOVA_CONFIG_DIR": str(self.etc / "nova"),
                         "PYTHONPATH": str(NOVASIDE)})
        for svc in ("conductor", "scheduler"):
            self._start("nova-" + svc, [self._bin("nova-" + svc),
                                        "--config-file", self.etc / "nova" / "nova.conf"])
        procs.wait_until(lambda: self._get_ok(self.placement_url + "/"),
                         START_TIMEOUT, "answering", "placement",
                         self.log_of("placement"), procs=[self.procs["placement"]])
        procs.wait_until(lambda: self._get_ok(self.api_url + "/"),
                         START_TIMEOUT, "answering", "nova-api",
                         self.log_of("nova-api"), procs=[self.procs["nova-api"]])

    def _register_endpoints(self):
        self.keystone.add_endpoint("compute", "nova", self.api_url)
        self.keystone.add_endpoint("placement", "placement", self.placement_url)

    # ------------------------------------------------------------ auth mode
    def switch_auth(self, auth, keystone=None):
        """Restart Nova's processes (not its databases) in another auth mode.

        Costs one restart of placement, nova-api, conductor, scheduler and
        the running computes (tens of seconds), against minutes for a new
        bed. Computes that were not running stay stopped. Call it on a
        clean cloud (no servers)."""
        if auth == self.auth and (keystone is None or keystone is self.keystone):
            return self
        if auth == "keystone" and (keystone or self.keystone) is None:
            raise ValueError("auth='keystone' needs a Keystone")
        t0 = time.monotonic()
        running = [h for h in self.hosts if self.compute_running(h)]
        for h in running:
            self.kill_compute(h)
        for name in ("nova-conductor", "nova-scheduler"):
            self.procs[name].kill()
        # A restarted service must prove itself with a heartbeat newer than
        # the last one of the process it replaces (read after the kill).
        seen = {(s["binary"], s["host"]): s["updated_at"]
                for s in self.get("/os-services")["services"]}
        for name in ("nova-api", "placement"):
            self.procs[name].kill()
        self.auth = auth
        if keystone is not None:
            self.keystone = keystone
        if auth == "keystone":
            self._register_endpoints()
        self._write_config()
        self._start_control()
        for h in running:
            self.start_compute(h)
        wanted = [("nova-conductor", "controller"), ("nova-scheduler", "controller")]
        wanted += [("nova-compute", h) for h in running]

        def fresh():
            now = {(s["binary"], s["host"]): s for s in
                   self.get("/os-services")["services"]}
            return all(k in now and now[k]["state"] == "up"
                       and now[k]["updated_at"] != seen.get(k) for k in wanted)

        procs.wait_until(fresh, START_TIMEOUT, "heartbeating after the switch "
                         "to %s" % auth, "nova", self.setup_log,
                         procs=[p for p in self.procs.values() if p.running()],
                         interval=0.5)
        self.timings["switch_to_" + auth] = time.monotonic() - t0
        return self

    def _start(self, name, argv, env=None):
        full_env = dict(os.environ)
        for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            full_env.pop(k, None)
        full_env["OS_NOVA_DISABLE_EVENTLET_PATCHING"] = full_env.get(
            "OS_NOVA_DISABLE_EVENTLET_PATCHING", "")
        if not full_env["OS_NOVA_DISABLE_EVENTLET_PATCHING"]:
            del full_env["OS_NOVA_DISABLE_EVENTLET_PATCHING"]
        full_env.update(env or {})
        with self._lock:
            proc = procs.Proc(name, argv, self.log_of(name), env=full_env,
                              cwd=str(self.workdir))
            self.procs[name] = proc
            proc.start()
        return proc

    def _start_stubs(self):
        proc = self._start("stubs", [sys.executable, HERE / "stubsvc.py",
                                     self.ports["image"], self.ports["network"]])
        procs.wait_until(lambda: procs.port_open(self.ports["image"]) and
                         procs.port_open(self.ports["network"]), 20,
                         "listening", "stubs", proc.log, procs=[proc])

    def _sync_databases(self):
        nova_conf = ["--config-file", self.etc / "nova" / "nova.conf"]
        log = self.setup_log
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        placement = procs.Proc("placement-db-sync",
                               [self._bin("placement-manage"), "--config-file",
                                self.etc / "placement" / "placement.conf",
                                "db", "sync"],
                               self.log_of("placement-db-sync"), env=env).start()
        nm = self._bin("nova-manage")
        procs.run("nova-db-sync", [nm] + nova_conf + ["api_db", "sync"], log, env=env)
        procs.run("nova-db-sync", [nm] + nova_conf + [
            "cell_v2", "map_cell0", "--database_connection",
            self.db.url(self.dbs["cell0"])], log, env=env)
        procs.run("nova-db-sync", [nm] + nova_conf + [
            "cell_v2", "create_cell", "--name", CELL_NAME,
            "--database_connection", self.db.url(self.dbs["cell1"]),
            "--transport-url", self.rabbit.url], log, env=env)
        procs.run("nova-db-sync", [nm] + nova_conf + ["db", "sync"], log, env=env)
        placement.popen.wait(timeout=300)
        if placement.popen.returncode != 0:
            raise PeerError("placement-db-sync", "exited with status %d"
                            % placement.popen.returncode, placement.log)

    # ------------------------------------------------------------ config
    def _write_config(self):
        nova_dir = self.etc / "nova"
        pl_dir = self.etc / "placement"
        nova_dir.mkdir(parents=True, exist_ok=True)
        pl_dir.mkdir(parents=True, exist_ok=True)
        self._write_paste(nova_dir / "api-paste.ini")
        (self.state / "controller").mkdir(parents=True, exist_ok=True)
        (self.state / "locks").mkdir(parents=True, exist_ok=True)
        if self.auth == "keystone":
            static_token = dict(self._service_auth("nova"),
                                valid_interfaces="public")
        else:
            static_token = {"auth_type": "admin_token", "token": "admin",
                            "region_name": "RegionOne"}
        nova = {
            "DEFAULT": {
                "debug": "True", "host": "controller", "my_ip": "127.0.0.1",
                "state_path": str(self.state / "controller"),
                "transport_url": self.rabbit.url,
                "compute_driver": "fake.FakeDriverWithoutFakeNodes",
                "use_rootwrap_daemon": "False",
                "heal_instance_info_cache_interval": "-1",
                "report_interval": str(self.report_interval),
                "service_down_time": str(self.service_down_time),
                "instance_usage_audit": "False",
            },
            "api": {"auth_strategy": "keystone"},
            "wsgi": {"api_paste_config": str(nova_dir / "api-paste.ini")},
            "api_database": {"connection": self.db.url(self.dbs["api"])},
            "database": {"connection": self.db.url(self.dbs["cell1"])},
            "conductor": {"workers": "1"},
            "scheduler": {"workers": "1",
                          "discover_hosts_in_cells_interval": "2"},
            "placement": dict(static_token, endpoint=self.placement_url,
                              endpoint_override=self.placement_url),
            "glance": {"api_servers": "http://127.0.0.1:%d" % self.ports["image"]},
            "neutron": dict(static_token,
                            endpoint="http://127.0.0.1:%d" % self.ports["network"],
                            endpoint_override="http://127.0.0.1:%d" % self.ports["network"]),
            "notifications": {"notification_format": "versioned",
                              "notify_on_state_change": "vm_and_task_state"},
            "oslo_messaging_notifications": {"driver": "messagingv2"},
            "oslo_concurrency": {"lock_path": str(self.state / "locks")},
            "service_user": {"send_service_user_token": "False"},
            "quota": {"instances": "1000", "cores": "10000", "ram": "10240000"},
            "filter_scheduler": {"host_subset_size": "1"},
        }
        if self.auth == "keystone":
            # Placement is found through Keystone's catalog; the network
            # stub is not in it.
            nova["placement"] = dict(static_token)
            nova["keystone_authtoken"] = self._authtoken("nova")
            nova["service_user"] = dict(self._service_auth("nova"),
                                        send_service_user_token="True")
        _write_ini(nova_dir / "nova.conf", nova)
        for host in self.hosts:
            hstate = self.state / host
            (hstate / "instances").mkdir(parents=True, exist_ok=True)
            _write_ini(nova_dir / ("%s.conf" % host), {"DEFAULT": {
                "host": host, "state_path": str(hstate),
                "instances_path": str(hstate / "instances"),
                # registered by novaside/compute_launch.py
                "compute_driver": COMPUTE_DRIVER,
                # Nova's power-state sync every few seconds (600 s by
                # default): a guest a test turns off in the driver
                # (guest_power_off) is stopped by Nova within seconds.
                # Other tests' servers are untouched: the bed's driver
                # reports the power state Nova last set for every other
                # guest, so the sync finds nothing to stop; a restarted
                # compute's driver has lost its guests (kept in memory),
                # which the sync only logs ("unexpectedly not found.
                # Ignore."), as its first run at each start already did.
                "sync_power_state_interval": str(SYNC_POWER_STATE)}})
        placement = {
            "DEFAULT": {"debug": "False"},
            "api": {"auth_strategy": "noauth2"},
            "placement_database": {"connection": self.db.url(self.dbs["placement"])},
        }
        if self.auth == "keystone":
            placement["api"]["auth_strategy"] = "keystone"
            placement["keystone_authtoken"] = self._authtoken("placement")
        _write_ini(pl_dir / "placement.conf", placement)

    def _service_auth(self, user):
        """keystoneauth password options for one of Keystone's service users."""
        creds = self.keystone.credentials(user)
        return {"auth_type": "password", "auth_url": creds["auth_url"],
                "username": user, "password": creds["password"],
                "project_name": creds["project_name"],
                "user_domain_name": creds["user_domain_name"],
                "project_domain_name": creds["project_domain_name"],
                "region_name": "RegionOne"}

    def _authtoken(self, user):
        """[keystone_authtoken] for nova-api or placement.

        ``token_cache_time = -1``: Keystone itself validates every
        request's token (its own cache makes that cheap), so a revoked
        token is refused at once; keystonemiddleware's in-process cache
        (a bed has no memcached) would accept one for up to 300 s. An
        expired token is refused either way."""
        return dict(self._service_auth(user),
                    www_authenticate_uri=self.keystone.url,
                    service_token_roles_required="True",
                    token_cache_time="-1")

    def _write_paste(self, dest):
        """Nova's own api-paste.ini; without Keystone, with Keystone's
        filters swapped for ours."""
        src = self.venv / "etc" / "nova" / "api-paste.ini"
        text = src.read_text()
        if self.auth == "keystone":
            dest.write_text(text)
            return
        if "authtoken keystonecontext" not in text:
            raise PeerError("nova-api", "unexpected api-paste.ini layout in %s"
                            % src, self.setup_log)
        text = text.replace("authtoken keystonecontext", "ihanoauth")
        text += ("\n[filter:ihanoauth]\n"
                 "paste.filter_factory = iha_noauth:NoAuthContext.factory\n")
        dest.write_text(text)

    # ------------------------------------------------------------ computes
    def start_compute(self, host):
        name = "nova-compute-%s" % host
        with self._lock:
            existing = self.procs.get(name)
            if existing is not None and existing.running():
                return existing
        proc = self._start(name, [self._python(),
                                  NOVASIDE / "compute_launch.py",
                                  "--config-file", self.etc / "nova" / "nova.conf",
                                  "--config-file", self.etc / "nova" / ("%s.conf" % host)])
        self._write_pidfile(host, proc.pid)
        return proc

    def guest_power_off(self, host, server_id, how="shutdown"):
        """The guest of ``server_id`` on ``host`` goes off by itself
        (``how``: shutdown, crashed or suspended) in the compute's driver
        (novaside/iha_fakevirt.py); Nova's power-state sync stops the
        server within SYNC_POWER_STATE seconds, with its own context."""
        path = self.state / host / POWER_FILE
        lines = path.read_text().splitlines() if path.exists() else []
        lines.append("%s %s %s" % (server_id, how, uuid.uuid4().hex))
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)

    def hold_live_migrations(self, host, servers=None, progress=True):
        """Keep the live migrations from ``host`` (those of ``servers``
        only, when given) ``running`` in its compute's driver until Nova
        aborts or force-completes them or :meth:`release_live_migrations`
        (novaside/iha_fakevirt.py). ``progress``: a held migration's
        record shows memory still to copy going down steadily; False:
        nothing reported (a stalled migration). Migrations already
        finished are not affected; the hold is read by each migration as
        it runs."""
        words = list(servers) if servers else ["*"]
        if not progress:
            words.append("stalled")
        path = self.state / host / HOLD_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(words) + "\n")
        os.replace(tmp, path)

    def release_live_migrations(self, host=None):
        """Lift the hold on ``host`` (every host by default): held live
        migrations complete."""
        for h in ([host] if host else self.hosts):
            try:
                (self.state / h / HOLD_FILE).unlink()
            except FileNotFoundError:
                pass

    def compute_pidfile(self, host):
        """The host's nova-compute pid file, as a service manager keeps
        one: written at each start, left behind when the process dies (a
        heartbeat agent on the host checks it with ``compute_check =
        pidfile``; the computes share one machine, so a process name
        would not tell them apart)."""
        return self.state / host / "nova-compute.pid"

    def _write_pidfile(self, host, pid):
        path = self.compute_pidfile(host)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("%d\n" % pid)
        os.replace(tmp, path)

    def kill_compute(self, host):
        """SIGKILL the host's compute: the nearest thing to pulling the plug."""
        proc = self.procs.get("nova-compute-%s" % host)
        if proc is not None:
            proc.kill()

    def readd_compute(self, host, timeout=120):
        """Give the cloud back a compute whose service was deleted
        (``DELETE /os-services/{id}``, a decommission), as an operator
        does: restart its nova-compute. Returns the seconds it took.

        What Nova 34 does, read in its source: the delete soft-deletes the
        service row and the host's compute node rows (``mapped`` set to 0,
        db/main/api.py ``service_destroy``), removes the host from its
        aggregates, deletes its resource provider (cascade) and its host
        mapping (api/openstack/compute/services.py ``delete``). A compute
        still running only logs that its service record is gone. Started
        again, nova-compute creates a new service row (enabled:
        ``enable_new_services``); the fake driver's node keeps the uuid
        of the ``compute_id`` file in its ``state_path``, so the resource
        tracker finds the soft-deleted compute node by that uuid and
        undeletes it (resource_tracker.py ``_init_compute_node``, read
        with read_deleted) and the report client creates its resource
        provider again; the scheduler's periodic host discovery
        (``discover_hosts_in_cells_interval``) maps the node (mapped 0)
        to the cell again. Waits for all of it: the service up and
        enabled, the hypervisor listed, its resource provider in
        Placement with inventory."""
        t0 = time.monotonic()
        self.kill_compute(host)
        self.start_compute(host)
        name = "nova-compute-%s" % host

        def back():
            svcs = self.get("/os-services?host=%s&binary=nova-compute"
                            % host, microversion="2.53")["services"]
            if not (svcs and svcs[0]["state"] == "up"
                    and svcs[0]["status"] == "enabled"):
                return False
            hv = self.get("/os-hypervisors/detail", "2.53")["hypervisors"]
            mine = [h for h in hv if h["service"]["host"] == host]
            if not mine:
                return False
            rp = self._session().get(
                "%s/resource_providers/%s/inventories"
                % (self.placement_url, mine[0]["id"]), timeout=10,
                headers={"X-Auth-Token": self._placement_token(),
                         "OpenStack-API-Version": "placement 1.14"})
            return rp.status_code == 200 and bool(
                rp.json().get("inventories"))

        procs.wait_until(back, timeout, "service, compute node and resource "
                         "provider back after a restart", name,
                         self.log_of(name), procs=[self.procs[name]],
                         interval=1)
        return time.monotonic() - t0

    def _placement_token(self):
        if self.auth == "keystone":
            return self.keystone.admin_token()
        return "admin"

    def compute_running(self, host):
        proc = self.procs.get("nova-compute-%s" % host)
        return proc is not None and proc.running()

    def wait_ready(self, timeout=START_TIMEOUT):
        """Wait until conductor, scheduler and every compute are up and mapped."""
        watched = [p for n, p in self.procs.items()
                   if n != "placement-db-sync" and p.running()]

        def services_up():
            svcs = self.get("/os-services")["services"]
            up = {(s["binary"], s["host"]) for s in svcs if s["state"] == "up"}
            missing = [b for b in ("nova-conductor", "nova-scheduler")
                       if not any(x[0] == b for x in up)]
            missing += ["nova-compute@" + h for h in self.hosts
                        if ("nova-compute", h) not in up]
            self._missing = missing
            return not missing

        self._missing = []
        try:
            procs.wait_until(services_up, timeout, "up", "nova", self.setup_log,
                             procs=watched)
        except PeerError as e:
            raise self._blame(e)

        def mapped():
            hv = self.get("/os-hypervisors")["hypervisors"]
            names = {h["hypervisor_hostname"] for h in hv}
            return all(h in names for h in self.hosts)

        procs.wait_until(mapped, timeout, "mapping every compute to the cell",
                         "nova-scheduler", self.log_of("nova-scheduler"),
                         procs=watched)

    def _blame(self, err):
        """Turn 'nova not up' into an error naming the service that is not."""
        for m in getattr(self, "_missing", []):
            if m.startswith("nova-compute@"):
                name = "nova-compute-" + m.split("@", 1)[1]
            else:
                name = m
            return PeerError(name, "service not up in os-services after start",
                             self.log_of(name))
        return err

    # ------------------------------------------------------------ API
    def _session(self):
        s = getattr(self, "_http", None)
        if s is None:
            s = self._http = requests.Session()
            s.trust_env = False
        return s

    def _get_ok(self, url):
        return self._session().get(url, timeout=5).status_code < 500

    def _token(self):
        if self.auth == "keystone":
            return self.keystone.admin_token()
        return "admin:admin"

    def call(self, method, path, body=None, microversion="2.1", ok=(200, 201, 202, 204)):
        """One compute API request as the admin (with a Keystone token in
        keystone mode; a token Nova refuses is renewed once)."""
        for attempt in (1, 2):
            token = self._token()
            headers = {"X-Auth-Token": token,
                       "OpenStack-API-Version": "compute %s" % microversion,
                       "Accept": "application/json"}
            resp = self._session().request(method, self.api_url + path, json=body,
                                           headers=headers, timeout=60)
            if resp.status_code != 401 or self.auth != "keystone":
                break
            self.keystone.forget_token(token)
        if ok is not None and resp.status_code not in ok:
            raise PeerError("nova-api", "%s %s (microversion %s) answered %d: %s"
                            % (method, path, microversion, resp.status_code,
                               resp.text[:500]), self.log_of("nova-api"))
        return resp

    def _server_host(self, server_id):
        """The server's host as nova-api has it now (asked directly, as
        the admin); None when there is no such server."""
        http = requests.Session()
        http.trust_env = False
        try:
            resp = http.get(
                "%s/servers/%s" % (self.nova_api_url, server_id), timeout=30,
                headers={"X-Auth-Token": self._token(),
                         "OpenStack-API-Version": "compute 2.74",
                         "Accept": "application/json"})
        finally:
            http.close()
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise PeerError("nova-api", "GET server %s answered %d"
                            % (server_id, resp.status_code),
                            self.log_of("nova-api"))
        return resp.json()["server"]["OS-EXT-SRV-ATTR:host"]

    def get(self, path, microversion="2.1"):
        return self.call("GET", path, microversion=microversion).json()

    def ensure_flavor(self):
        resp = self.call("GET", "/flavors/%s" % FLAVOR_ID, ok=None)
        if resp.status_code == 200:
            return
        self.call("POST", "/flavors", {"flavor": {
            "name": FLAVOR_ID, "id": FLAVOR_ID, "ram": 64, "vcpus": 1,
            "disk": 1}})

    def boot(self, host, count=1, name="iha", microversion="2.74",
             flavor=FLAVOR_ID):
        """Boot ``count`` servers on ``host``; returns their ids (not waited)."""
        ids = []
        for i in range(count):
            resp = self.call("POST", "/servers", {"server": {
                "name": "%s-%s-%d" % (name, host, i), "imageRef": IMAGE_ID,
                "flavorRef": flavor, "networks": "none", "host": host}},
                microversion=microversion)
            ids.append(resp.json()["server"]["id"])
        return ids

    def server(self, server_id, microversion="2.74"):
        return self.get("/servers/%s" % server_id, microversion)["server"]

    def wait_servers(self, ids, status="ACTIVE", timeout=120, host=None):
        def done():
            servers = [self.server(i) for i in ids]
            bad = [s for s in servers if s["status"] == "ERROR"]
            if bad:    # final: until now it waited out the whole timeout
                raise procs.Final(PeerError("nova", "server %s went ERROR: %s" % (
                    bad[0]["id"], bad[0].get("fault")), self.log_of("nova-conductor")))
            return all(s["status"] == status and s.get("OS-EXT-STS:task_state") is None
                       and (host is None or s["OS-EXT-SRV-ATTR:host"] == host)
                       for s in servers) and servers
        try:
            return procs.wait_until(done, timeout, "all %s" % status, "nova",
                                    self.log_of("nova-conductor"), interval=0.5)
        except PeerError as e:
            if "went ERROR" in str(e):
                raise
            raise PeerError("nova", "servers %s not all %s after %ds" % (
                ids, status, timeout), self.log_of("nova-conductor"))

    def service(self, host, binary="nova-compute"):
        for s in self.get("/os-services?host=%s&binary=%s" % (host, binary),
                          microversion="2.53")["services"]:
            return s
        raise PeerError("nova-api", "no %s service on %s" % (binary, host),
                        self.log_of("nova-api"))

    def migrations(self, host=None, mtype="evacuation"):
        q = "?migration_type=%s" % mtype if mtype else ""
        migs = self.get("/os-migrations" + q, microversion="2.59")["migrations"]
        if host:
            migs = [m for m in migs if m["source_compute"] == host]
        return migs

    def servers_on(self, host):
        doc = self.get("/servers/detail?all_tenants=1&host=%s" % host, "2.74")
        return [s for s in doc["servers"] if s["OS-EXT-SRV-ATTR:host"] == host]

    def delete_all_servers(self, timeout=120):
        doc = self.get("/servers?all_tenants=1", "2.74")
        ids = [s["id"] for s in doc["servers"]]
        for i in ids:
            self.call("DELETE", "/servers/%s" % i, ok=(204, 404))
        procs.wait_until(lambda: not self.get("/servers?all_tenants=1")["servers"],
                         timeout, "deleting every server", "nova",
                         self.log_of("nova-conductor"))

    # ------------------------------------------------------------ client files
    def clouds_yaml(self, path, cloud="realnova", auth=None):
        """A clouds.yaml openstacksdk accepts.

        noauth mode: no auth, fixed compute endpoint. keystone mode:
        ``auth`` is ``{"auth_type": ..., "auth": {...}}`` (default: the
        ``instanceha`` user's password) and the compute endpoint comes
        from Keystone's catalog."""
        if self.auth == "keystone":
            auth = auth or {"auth_type": "password",
                            "auth": self.keystone.credentials("instanceha")}
            entry = dict(auth, region_name="RegionOne", interface="public",
                         identity_api_version="3")
        else:
            entry = {"auth_type": "none",
                     "compute_endpoint_override": self.api_url,
                     "region_name": "RegionOne"}
        doc = {"clouds": {cloud: entry}}
        pathlib.Path(path).write_text(json.dumps(doc, indent=2))
        return path

    # ------------------------------------------------------------ stop
    def stop(self):
        with self._lock:
            items = list(self.procs.items())
        # computes first so they stop heartbeating into a dying conductor
        items.sort(key=lambda kv: 0 if kv[0].startswith("nova-compute") else 1)
        # A test bed keeps nothing: kill every group at once, no graceful wait.
        for _name, proc in items:
            proc.kill()
        if self.front is not None:
            self.front.close()
        if self.rabbit:
            self.rabbit.delete()
        if self.db:
            self.db.drop_all()


def _write_ini(path, sections):
    cp = configparser.RawConfigParser()
    cp.optionxform = str
    for section, values in sections.items():
        if section != "DEFAULT":
            cp.add_section(section)
        for k, v in values.items():
            cp.set(section, k, v)
    with open(path, "w") as f:
        cp.write(f)
