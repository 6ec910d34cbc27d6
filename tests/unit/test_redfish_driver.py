"""The Redfish fencing driver against the simulated BMCs over HTTP.

The simulator runs on a fake clock and the driver's injected sleep advances
that clock, so polls and retries take no real time.
"""

import time

from oslo_config import cfg
import pytest
import requests

from instanceha.conf import fencing as fencing_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.redfish import RedfishDriver
from instanceha.sim import SimCloud, SimServer


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.t += seconds


@pytest.fixture
def clock():
    return Clock()


def make_conf(**overrides):
    conf = cfg.ConfigOpts()
    fencing_conf.register_opts(conf)
    conf([], project="instanceha-test")
    values = dict(timeout=10, poll_interval=0.5, retries=3)
    values.update(overrides)
    for key, value in values.items():
        conf.set_override(key, value, group="fencing")
    return conf


@pytest.fixture
def world(clock, tmp_path):
    def start(**params):
        cloud = SimCloud(hosts=3, servers_per_host=1, clock=clock, **params)
        srv = SimServer(cloud).start()
        started.append(srv)
        _, bmc_yaml = srv.write_client_files(str(tmp_path))
        return cloud, srv, inventory.load(bmc_yaml, fencing.FIELDS)
    started = []
    yield start
    for srv in started:
        srv.stop()


def power(cloud, host):
    return cloud.snapshot()["hosts"][host]["power"]


def test_registry_builds_the_driver():
    assert isinstance(fencing.load_driver("redfish", make_conf()),
                      RedfishDriver)


def test_power_off_waits_for_off(world, clock):
    cloud, _, bmcs = world(power_delay=2.0)
    driver = RedfishDriver(make_conf(), sleep=clock.sleep)
    assert driver.power_state(bmcs["compute-0"]) == base.PowerState.ON
    driver.power_off(bmcs["compute-0"])
    assert power(cloud, "compute-0") == "off"
    assert cloud.snapshot()["hosts"]["compute-0"]["compute_alive"] is False
    assert clock.sleeps == [0.5] * 4     # PoweringOff until 2 s had passed
    assert driver.power_state(bmcs["compute-0"]) == base.PowerState.OFF


def test_power_off_without_delay_needs_no_poll_sleep(world, clock):
    cloud, _, bmcs = world()
    RedfishDriver(make_conf(), sleep=clock.sleep).power_off(bmcs["compute-1"])
    assert power(cloud, "compute-1") == "off"
    assert clock.sleeps == []


def test_power_off_times_out(world, clock):
    cloud, _, bmcs = world(power_delay=1000.0)
    driver = RedfishDriver(make_conf(timeout=5, poll_interval=1),
                           sleep=clock.sleep)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmcs["compute-0"])
    assert "compute-0" in str(err.value)
    assert "within 5s" in str(err.value)
    assert sum(clock.sleeps) <= 6


def test_already_off_sends_no_reset(world, clock):
    cloud, _, bmcs = world()
    cloud.power("compute-2", on=False)
    # a reset would now be refused: returning proves none was sent
    cloud.set_bmc("compute-2", refuse_power_off=True)
    RedfishDriver(make_conf(), sleep=clock.sleep).power_off(bmcs["compute-2"])
    assert power(cloud, "compute-2") == "off"


def test_unreachable_bmc_fails_quickly(world):
    cloud, _, bmcs = world()
    cloud.set_bmc("compute-1", reachable=False)
    driver = RedfishDriver(make_conf(poll_interval=0.05, retries=3))
    started = time.monotonic()
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmcs["compute-1"])
    assert time.monotonic() - started < 10
    assert "compute-1" in str(err.value)
    assert "unreachable after 3 attempts" in str(err.value)
    assert power(cloud, "compute-1") == "on"


def test_bmc_that_comes_back_during_retries(world, clock):
    cloud, _, bmcs = world()
    cloud.set_bmc("compute-1", reachable=False)

    def sleep(seconds):
        clock.sleep(seconds)
        cloud.set_bmc("compute-1", reachable=True)
    RedfishDriver(make_conf(), sleep=sleep).power_off(bmcs["compute-1"])
    assert power(cloud, "compute-1") == "off"
    assert clock.sleeps == [0.5]


def test_refused_power_off(world, clock):
    cloud, _, bmcs = world()
    cloud.set_bmc("compute-0", refuse_power_off=True)
    with pytest.raises(base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=clock.sleep).power_off(
            bmcs["compute-0"])
    assert "compute-0" in str(err.value)
    assert "refused" in str(err.value)
    assert clock.sleeps == []            # a refusal is not retried
    assert power(cloud, "compute-0") == "on"


def test_wrong_password_never_shows_the_password(world, clock, capsys):
    cloud, srv, bmcs = world()
    good = bmcs["compute-0"]
    secret = "hunter2-" + good.password
    bad = inventory.BMC(host=good.host, driver="redfish",
                        address=good.address, username=good.username,
                        password=secret, options=dict(good.options))
    with pytest.raises(base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=clock.sleep).power_off(bad)
    assert "compute-0" in str(err.value)
    assert "credentials" in str(err.value)
    assert secret not in str(err.value)
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    assert power(cloud, "compute-0") == "on"


def test_default_system_and_power_on(world, clock):
    cloud, _, bmcs = world()
    entry = bmcs["compute-1"]
    no_id = inventory.BMC(host=entry.host, driver="redfish",
                          address=entry.address, username=entry.username,
                          password=entry.password, options={"verify": False})
    driver = RedfishDriver(make_conf(), sleep=clock.sleep)
    driver.power_off(no_id)
    assert power(cloud, "compute-1") == "off"
    driver.power_on(no_id)
    assert driver.power_state(no_id) == base.PowerState.ON
    clock.sleep(cloud.boot_time)
    assert cloud.snapshot()["hosts"]["compute-1"]["compute_alive"] is True


def test_unknown_system_id(world, clock):
    _, _, bmcs = world()
    entry = bmcs["compute-1"]
    wrong = inventory.BMC(host=entry.host, driver="redfish",
                          address=entry.address, username=entry.username,
                          password=entry.password,
                          options={"verify": False,
                                   "system_id": "/redfish/v1/Systems/x"})
    with pytest.raises(base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=clock.sleep).power_state(wrong)
    assert "compute-1" in str(err.value)


def test_nothing_listening(clock):
    bmc = inventory.BMC(host="compute-9", driver="redfish",
                        address="http://127.0.0.1:9", username="u",
                        password="p", options={"verify": False})
    with pytest.raises(base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=clock.sleep).power_off(bmc)
    assert "compute-9" in str(err.value)
    assert len(clock.sleeps) == 2


@pytest.mark.parametrize("value, expected", [
    (False, False), ("false", False), ("/etc/bmc-ca.pem", "/etc/bmc-ca.pem"),
])
def test_verify_option(value, expected):
    bmc = inventory.BMC(host="h", driver="redfish", address="https://x",
                        options={"verify": value})
    assert RedfishDriver(make_conf())._verify(bmc) == expected


def test_verify_true_is_not_replaced_by_the_environment(monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/bundle.pem")
    bmc = inventory.BMC(host="h", driver="redfish", address="https://x")
    assert RedfishDriver(make_conf())._verify(bmc) == requests.certs.where()


def test_verify_garbage_is_a_fence_error():
    bmc = inventory.BMC(host="h", driver="redfish", address="https://x",
                        options={"verify": 3})
    with pytest.raises(base.FenceError):
        RedfishDriver(make_conf())._verify(bmc)


# -- TLS: the inventory's verify value wins over $REQUESTS_CA_BUNDLE ---------

def _make_tls(tmp_path, client=False):
    """A throwaway CA and a server certificate for 127.0.0.1; with
    ``client`` also a client certificate from the same CA, returned as
    (cert path, key path, combined path)."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, sign_key, ca):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(
                       NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(
                       NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca,
                                                        path_length=None),
                                  critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        return builder.sign(sign_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("sim test CA", "sim test CA", ca_key, ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = cert("127.0.0.1", "sim test CA", key, ca_key, False)
    pem = serialization.Encoding.PEM

    def key_bytes(k):
        return k.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(pem))
    chain = tmp_path / "server.pem"
    chain.write_bytes(key_bytes(key) + leaf.public_bytes(pem))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(chain))
    if not client:
        return ctx, str(ca_path)
    ckey = ec.generate_private_key(ec.SECP256R1())
    ccert = cert("instanceha", "sim test CA", ckey, ca_key, False)
    paths = (tmp_path / "client.crt", tmp_path / "client.key",
             tmp_path / "client.pem")
    paths[0].write_bytes(ccert.public_bytes(pem))
    paths[1].write_bytes(key_bytes(ckey))
    paths[2].write_bytes(key_bytes(ckey) + ccert.public_bytes(pem))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(str(ca_path))
    return ctx, str(ca_path), tuple(str(p) for p in paths)


@pytest.fixture
def tls_bmc(clock, tmp_path, monkeypatch):
    ctx, ca_path = _make_tls(tmp_path)
    # The machine's bundle does not know our CA; requests would use it for
    # verify=True and, without care, for anything else too.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates"
                                             ".crt")
    cloud = SimCloud(hosts=1, servers_per_host=0, clock=clock)
    srv = SimServer(cloud, ssl_context=ctx).start()
    h = cloud.hosts["compute-0"]

    def entry(verify):
        return inventory.BMC(host="compute-0", driver="redfish",
                             address=srv.url, username=h.bmc_username,
                             password=h.bmc_password,
                             options={"verify": verify})
    try:
        yield cloud, entry, ca_path
    finally:
        srv.stop()


def test_tls_with_ca_bundle_path(tls_bmc, clock):
    cloud, entry, ca_path = tls_bmc
    driver = RedfishDriver(make_conf(), sleep=clock.sleep)
    driver.power_off(entry(ca_path))
    assert power(cloud, "compute-0") == "off"


def test_tls_verify_false(tls_bmc, clock):
    _, entry, _ = tls_bmc
    driver = RedfishDriver(make_conf(), sleep=clock.sleep)
    assert driver.power_state(entry(False)) == base.PowerState.ON


def test_tls_unknown_ca_fails_without_retry(tls_bmc, clock):
    cloud, entry, _ = tls_bmc
    with pytest.raises(base.FenceError) as err:
        RedfishDriver(make_conf(), sleep=clock.sleep).power_off(entry(True))
    assert "compute-0" in str(err.value)
    assert "TLS" in str(err.value)
    assert clock.sleeps == []
    assert power(cloud, "compute-0") == "on"


# -- a Redfish BMC with what the simulator lacks: sessions, several systems,
#    409 to a reset of a system that is off, client certificates ----------

class FakeBMC:
    """A small Redfish service on a loopback port (HTTP, or HTTPS with
    ``ssl_context``). Power changes apply at once. Records what it saw."""

    SESSIONS = "/redfish/v1/SessionService/Sessions"

    def __init__(self, systems=("1",), sessions=True, ssl_context=None,
                 user="admin", password="pw-1234"):
        import http.server
        import threading

        self.user, self.password = user, password
        self.power = {sid: "On" for sid in systems}
        self.allowed = ["On", "ForceOff", "GracefulShutdown",
                        "PushPowerButton", "ForceRestart"]
        self.with_sessions = sessions
        self.sessions = {}            # id -> token
        self.created = self.deleted = 0
        self.resets = []              # reset types received
        self.auth_seen = []           # "token" / "basic" per request
        self.off_conflict = None      # status for an off-reset when Off
        self.off_race = False         # goes Off just before a reset
        self.busy = False             # 409 to every reset, power unchanged
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.handle(self, "GET")

            def do_POST(self):
                fake.handle(self, "POST")

            def do_DELETE(self):
                fake.handle(self, "DELETE")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if ssl_context is not None:
            self.httpd.socket = ssl_context.wrap_socket(self.httpd.socket,
                                                        server_side=True)
        scheme = "https" if ssl_context else "http"
        self.url = "%s://127.0.0.1:%d" % (scheme, self.httpd.server_port)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def expire_sessions(self):
        with self.lock:
            self.sessions.clear()

    def entry(self, host="compute-0", password=None, **options):
        options.setdefault("verify", False)
        return inventory.BMC(host=host, driver="redfish", address=self.url,
                             username=self.user,
                             password=self.password if password is None
                             else password, options=options)

    # -- HTTP
    def reply(self, h, status, body=None, headers=()):
        import json
        data = json.dumps(body).encode() if body is not None else b""
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        if body is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def error(self, h, status, message):
        self.reply(h, status, {"error": {"code": "Base.1.8.GeneralError",
                                         "message": message}})

    def authenticated(self, h):
        import base64
        token = h.headers.get("X-Auth-Token")
        with self.lock:
            if token is not None:
                self.auth_seen.append("token")
                return token in self.sessions.values()
            value = h.headers.get("Authorization") or ""
            if not value.startswith("Basic "):
                return False
            self.auth_seen.append("basic")
        user, _, pw = base64.b64decode(value[6:]).decode().partition(":")
        return (user, pw) == (self.user, self.password)

    def handle(self, h, method):
        import json
        import secrets
        path = h.path.rstrip("/")
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"{}") if length else {}
        if path == "/redfish/v1" and method == "GET":
            root = {"@odata.id": "/redfish/v1/", "Id": "Root",
                    "Name": "fake", "RedfishVersion": "1.6.0",
                    "Systems": {"@odata.id": "/redfish/v1/Systems"}}
            if self.with_sessions:
                root["SessionService"] = {
                    "@odata.id": "/redfish/v1/SessionService"}
                root["Links"] = {"Sessions": {"@odata.id": self.SESSIONS}}
            return self.reply(h, 200, root)
        if path == self.SESSIONS and method == "POST" and self.with_sessions:
            if (body.get("UserName"), body.get("Password")) != (
                    self.user, self.password):
                return self.error(h, 401, "bad credentials")
            with self.lock:
                self.created += 1
                sid = "s%d" % self.created
                token = secrets.token_hex(8)
                self.sessions[sid] = token
            return self.reply(h, 201, {"@odata.id": self.SESSIONS + "/" + sid,
                                       "Id": sid},
                              [("X-Auth-Token", token),
                               ("Location", self.SESSIONS + "/" + sid)])
        if not self.authenticated(h):
            return self.error(h, 401, "unauthorized")
        if path.startswith(self.SESSIONS + "/") and method == "DELETE":
            with self.lock:
                if self.sessions.pop(path.rsplit("/", 1)[1], None) is None:
                    return self.error(h, 404, "no such session")
                self.deleted += 1
            return self.reply(h, 204)
        if path == "/redfish/v1/Systems" and method == "GET":
            return self.reply(h, 200, {
                "@odata.id": "/redfish/v1/Systems", "Name": "Systems",
                "Members@odata.count": len(self.power),
                "Members": [{"@odata.id": "/redfish/v1/Systems/" + s}
                            for s in self.power]})
        parts = path.split("/")
        sid = parts[4] if len(parts) > 4 else None
        if sid not in self.power:
            return self.error(h, 404, "not found")
        if len(parts) == 5 and method == "GET":
            target = path + "/Actions/ComputerSystem.Reset"
            return self.reply(h, 200, {
                "@odata.id": path, "Id": sid, "Name": sid,
                "PowerState": self.power[sid],
                "Actions": {"#ComputerSystem.Reset": {
                    "target": target,
                    "ResetType@Redfish.AllowableValues": self.allowed}}})
        if parts[5:] == ["Actions", "ComputerSystem.Reset"] \
                and method == "POST":
            reset = body.get("ResetType")
            with self.lock:
                self.resets.append(reset)
                if self.off_race:
                    self.power[sid] = "Off"
                if reset == "On":
                    self.power[sid] = "On"
                    return self.reply(h, 204)
                if self.off_conflict and self.power[sid] == "Off":
                    return self.error(h, self.off_conflict,
                                      "already powered off")
                if self.busy:
                    return self.error(h, 409, "busy")
                self.power[sid] = "Off"
            return self.reply(h, 204)
        return self.error(h, 405, "not allowed")


@pytest.fixture
def fake_bmc():
    made = []

    def make(**kwargs):
        bmc = FakeBMC(**kwargs)
        made.append(bmc)
        return bmc
    yield make
    for bmc in made:
        bmc.stop()


def driver(clock, **conf):
    return RedfishDriver(make_conf(**conf), sleep=clock.sleep)


# -- auth: basic | session | auto

def test_session_auth_opens_one_session_for_many_calls(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    entry = bmc.entry(auth="session")
    assert drv.power_state(entry) == base.PowerState.ON
    drv.power_off(entry)
    assert drv.power_state(entry) == base.PowerState.OFF
    assert bmc.power["1"] == "Off"
    assert bmc.created == 1 and len(bmc.sessions) == 1
    assert set(bmc.auth_seen) == {"token"}


def test_one_session_however_the_address_is_spelt(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    drv.power_state(bmc.entry(auth="session"))
    spelt = bmc.entry(auth="session")
    spelt = inventory.BMC(host="compute-1", driver="redfish",
                          address=bmc.url.upper() + "/",
                          username=spelt.username, password=spelt.password,
                          options=dict(spelt.options))
    drv.power_state(spelt)
    assert bmc.created == 1


def test_basic_auth_is_the_default_and_opens_no_session(fake_bmc, clock):
    bmc = fake_bmc()
    driver(clock).power_off(bmc.entry())
    assert bmc.power["1"] == "Off"
    assert bmc.created == 0 and set(bmc.auth_seen) == {"basic"}


def test_session_shared_by_threads_of_the_worker_pool(fake_bmc, clock):
    import concurrent.futures
    bmc = fake_bmc()
    drv = driver(clock)
    entry = bmc.entry(auth="session")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        states = list(pool.map(lambda _: drv.power_state(entry), range(32)))
    assert states == [base.PowerState.ON] * 32
    assert bmc.created == 1


def test_expired_session_is_reestablished_once(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    entry = bmc.entry(auth="session")
    drv.power_state(entry)
    bmc.expire_sessions()
    drv.power_off(entry)
    assert bmc.power["1"] == "Off"
    assert bmc.created == 2 and len(bmc.sessions) == 1


def test_refused_reauthentication_discards_the_client(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    entry = bmc.entry(auth="session")
    drv.power_state(entry)
    bmc.expire_sessions()
    bmc.password = "changed-on-the-bmc"
    with pytest.raises(base.FenceError) as err:
        drv.power_off(entry)
    assert "compute-0" in str(err.value) and "credentials" in str(err.value)
    assert entry.password not in str(err.value)
    assert bmc.power["1"] == "On" and bmc.created == 1
    assert all(c.root is None for c in drv._clients.values())
    # fixed on the BMC: the next call opens a fresh session
    bmc.password = entry.password
    assert drv.power_state(entry) == base.PowerState.ON
    assert bmc.created == 2


def test_close_deletes_the_session(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    drv.power_state(bmc.entry(auth="session"))
    drv.close()
    assert bmc.deleted == 1 and bmc.sessions == {}
    drv.close()                      # nothing left to close
    assert bmc.deleted == 1


def test_close_of_an_expired_session_opens_no_new_one(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    drv.power_state(bmc.entry(auth="session"))
    bmc.expire_sessions()
    drv.close()
    assert bmc.created == 1 and bmc.sessions == {}


def test_changed_password_replaces_the_session(fake_bmc, clock):
    bmc = fake_bmc()
    drv = driver(clock)
    drv.power_state(bmc.entry(auth="session"))
    bmc.password = "new-password"
    drv.power_state(bmc.entry(auth="session", password="new-password"))
    assert bmc.created == 2 and bmc.deleted == 1 and len(bmc.sessions) == 1


def test_session_auth_wrong_password(fake_bmc, clock, capsys):
    bmc = fake_bmc()
    secret = "wrong-" + bmc.password
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry(auth="session", password=secret))
    assert "compute-0" in str(err.value)
    assert "rejected the credentials of user admin" in str(err.value)
    assert secret not in str(err.value)
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    assert bmc.power["1"] == "On" and clock.sleeps == []


def test_auto_falls_back_to_basic_without_a_session_service(fake_bmc, clock):
    bmc = fake_bmc(sessions=False)
    driver(clock).power_off(bmc.entry(auth="auto"))
    assert bmc.power["1"] == "Off" and bmc.created == 0


def test_auto_uses_a_session_when_offered(fake_bmc, clock):
    bmc = fake_bmc()
    driver(clock).power_off(bmc.entry(auth="auto"))
    assert bmc.created == 1 and "basic" not in bmc.auth_seen


def test_session_auth_without_a_session_service_fails(fake_bmc, clock):
    bmc = fake_bmc(sessions=False)
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry(auth="session"))
    assert "compute-0" in str(err.value)
    assert bmc.power["1"] == "On"


def test_unknown_auth_mode_names_host_and_field(clock):
    bmc = inventory.BMC(host="compute-7", driver="redfish",
                        address="https://192.0.2.1", options={"auth": "digest"})
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc)
    assert "compute-7" in str(err.value) and "auth" in str(err.value)
    assert "basic, session, auto" in str(err.value)


def test_inventory_accepts_the_new_fields():
    bmcs = inventory.parse({"hosts": {"c0": {
        "driver": "redfish", "address": "https://x", "auth": "session",
        "password": "pw",
        "cert_file": "/c.pem", "key_file": "/k.pem",
        "reset_type": "GracefulShutdown", "system_id": "/redfish/v1/Systems/1",
    }}}, fencing.FIELDS)
    assert bmcs["c0"].options["auth"] == "session"


# -- reset type

def test_reset_type_is_sent(fake_bmc, clock):
    bmc = fake_bmc()
    driver(clock).power_off(bmc.entry(reset_type="gracefulshutdown"))
    assert bmc.resets == ["GracefulShutdown"] and bmc.power["1"] == "Off"


def test_default_reset_type_is_force_off(fake_bmc, clock):
    bmc = fake_bmc()
    driver(clock).power_off(bmc.entry())
    assert bmc.resets == ["ForceOff"]


@pytest.mark.parametrize("value, words", [
    ("Bogus", "not a Redfish reset type"),
    ("On", "does not power the system off"),
    ("ForceRestart", "does not power the system off"),
])
def test_invalid_reset_type_names_host_and_field(fake_bmc, clock, value,
                                                 words):
    bmc = fake_bmc()
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry(reset_type=value))
    assert "compute-0" in str(err.value) and "reset_type" in str(err.value)
    assert words in str(err.value)
    assert bmc.resets == [] and bmc.auth_seen == []   # nothing was asked


def test_reset_type_the_system_does_not_offer(fake_bmc, clock):
    bmc = fake_bmc()
    bmc.allowed = ["On", "ForceOff"]
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry(reset_type="GracefulShutdown"))
    assert "compute-0" in str(err.value) and "does not offer" in str(err.value)
    assert bmc.resets == []


# -- system choice

def test_several_systems_and_no_id_lists_them(fake_bmc, clock):
    bmc = fake_bmc(systems=("node-a", "node-b"))
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry())
    msg = str(err.value)
    assert "compute-0" in msg and "2 systems" in msg and "system_id" in msg
    assert "/redfish/v1/Systems/node-a" in msg
    assert "/redfish/v1/Systems/node-b" in msg
    assert bmc.resets == []


def test_several_systems_with_an_id(fake_bmc, clock):
    bmc = fake_bmc(systems=("node-a", "node-b"))
    driver(clock).power_off(bmc.entry(system_id="/redfish/v1/Systems/node-b"))
    assert bmc.power == {"node-a": "On", "node-b": "Off"}


def test_no_system_at_all(fake_bmc, clock):
    bmc = fake_bmc(systems=())
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_state(bmc.entry())
    assert "compute-0" in str(err.value) and "no system" in str(err.value)


# -- a BMC answering 409 / 400 to a power-off of a system already off

@pytest.mark.parametrize("status", [409, 400])
def test_already_off_answering_conflict_is_success(fake_bmc, clock, status):
    bmc = fake_bmc()
    bmc.off_conflict, bmc.off_race = status, True
    driver(clock).power_off(bmc.entry())
    assert bmc.resets == ["ForceOff"] and bmc.power["1"] == "Off"
    assert clock.sleeps == []


def test_conflict_while_still_on_is_a_refusal(fake_bmc, clock):
    bmc = fake_bmc()
    bmc.busy = True
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry())
    msg = str(err.value)
    assert "compute-0" in msg and "refused" in msg and "409" in msg
    assert "power on" in msg
    assert bmc.power["1"] == "On" and clock.sleeps == []


# -- TLS client certificate

@pytest.fixture
def mtls_bmc(fake_bmc, tmp_path, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates"
                                             ".crt")
    ctx, ca_path, client = _make_tls(tmp_path, client=True)
    return fake_bmc(ssl_context=ctx), ca_path, client


def test_client_certificate_and_key(mtls_bmc, clock):
    bmc, ca, (crt, key, _) = mtls_bmc
    driver(clock).power_off(bmc.entry(verify=ca, cert_file=crt, key_file=key,
                                      auth="session"))
    assert bmc.power["1"] == "Off"


def test_client_certificate_in_one_file(mtls_bmc, clock):
    bmc, ca, (_, _, both) = mtls_bmc
    driver(clock).power_off(bmc.entry(verify=ca, cert_file=both))
    assert bmc.power["1"] == "Off"


def test_without_the_client_certificate_tls_fails(mtls_bmc, clock):
    bmc, ca, _ = mtls_bmc
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc.entry(verify=ca))
    assert "compute-0" in str(err.value)
    assert "TLS" in str(err.value) and clock.sleeps == []
    assert bmc.power["1"] == "On"


def test_key_file_without_cert_file(clock, tmp_path):
    key = tmp_path / "k.pem"
    key.write_text("x")
    bmc = inventory.BMC(host="compute-3", driver="redfish",
                        address="https://192.0.2.1",
                        options={"key_file": str(key)})
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc)
    assert "compute-3" in str(err.value) and "key_file" in str(err.value)


def test_missing_cert_file(clock, tmp_path):
    bmc = inventory.BMC(host="compute-3", driver="redfish",
                        address="https://192.0.2.1",
                        options={"cert_file": str(tmp_path / "nope.pem")})
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_off(bmc)
    assert "compute-3" in str(err.value) and "cert_file" in str(err.value)


def test_cert_is_passed_to_requests(fake_bmc, clock, tmp_path):
    crt, key = tmp_path / "c.pem", tmp_path / "k.pem"
    crt.write_text("c")
    key.write_text("k")
    bmc = fake_bmc()
    drv = driver(clock)
    entry = bmc.entry(cert_file=str(crt), key_file=str(key))
    assert drv.settings(entry).cert == (str(crt), str(key))


def test_bad_request_timeout_option(clock):
    bmc = inventory.BMC(host="compute-3", driver="redfish",
                        address="https://192.0.2.1", options={"timeout": "x"})
    with pytest.raises(base.FenceError) as err:
        driver(clock).power_state(bmc)
    assert "compute-3" in str(err.value) and "timeout" in str(err.value)
