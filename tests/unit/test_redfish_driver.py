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

def _make_tls(tmp_path):
    """A throwaway CA and a server certificate for 127.0.0.1."""
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
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(pem))
    chain = tmp_path / "server.pem"
    chain.write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()) + leaf.public_bytes(pem))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(chain))
    return ctx, str(ca_path)


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
