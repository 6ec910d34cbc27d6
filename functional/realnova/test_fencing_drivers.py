"""Our fencing drivers against the real BMC peers, with the compute link.

A driver's power-off must reach the emulated BMC, and the BMC link must then
take that host's nova-compute down, as losing power would. The options and
failures of each driver (session auth over TLS, wrong password, unreachable
BMC, a BMC that never reaches Off, 409 to a reset of a system already off)
run against BMC peers of their own, without Nova.
"""

import pathlib

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base, inventory, load_driver
from functional.peers import harness, ipmi, procs, redfish
from functional.peers.errors import PeerMissing


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 20, "poll_interval": 0.2}})


def entry(bed, host):
    data = {"hosts": {host: bed.bmc(host).inventory_entry()}}
    return inventory.parse(data, fencing.FIELDS)[host]


@pytest.mark.parametrize("kind", ["ipmi", "redfish"])
def test_driver_fences_host_and_compute_dies(clean_bed, conf, kind):
    bed = clean_bed
    host = bed.hosts[1]
    bmc = bed.use_ipmi(host) if kind == "ipmi" else bed.use_redfish(host)
    driver = load_driver(kind, conf)
    bmc_entry = entry(bed, host)
    assert driver.power_state(bmc_entry) is base.PowerState.ON
    driver.power_off(bmc_entry)
    assert bmc.power_state() == "off"
    assert driver.power_state(bmc_entry) is base.PowerState.OFF
    procs.wait_until(lambda: not bed.cloud.compute_running(host), 10,
                     "killed by the BMC link", "bmclink")
    driver.power_off(bmc_entry)            # idempotent on an Off host
    driver.power_on(bmc_entry)
    procs.wait_until(lambda: bed.cloud.compute_running(host), 10,
                     "started by the BMC link", "bmclink")
    procs.wait_until(lambda: bed.cloud.service(host)["state"] == "up", 60,
                     "up again", "nova-compute-%s" % host,
                     bed.cloud.log_of("nova-compute-%s" % host))


@pytest.mark.parametrize("kind", ["ipmi", "redfish"])
def test_refused_power_off_is_fence_error_and_host_keeps_running(clean_bed, conf, kind):
    bed = clean_bed
    host = bed.hosts[1]
    if kind == "ipmi":
        bmc = bed.use_ipmi(host)
        bmc.refuse_power_off(True)
    else:
        bmc = bed.use_redfish(host)
        bmc.restart(refuse_power_off=True)
    bmc_entry = entry(bed, host)
    with pytest.raises(base.FenceError) as err:
        load_driver(kind, conf).power_off(bmc_entry)
    assert host in str(err.value)
    assert bmc_entry.password not in str(err.value)
    assert bmc.power_state() == "on"
    assert bed.cloud.compute_running(host)


def test_ipmi_password_never_on_command_line(clean_bed, conf):
    bed = clean_bed
    bmc = bed.use_ipmi(bed.hosts[2])
    bmc_entry = entry(bed, bed.hosts[2])
    argv = load_driver("ipmi", conf).argv(bmc_entry, "chassis", "power", "status")
    assert bmc.password not in " ".join(argv)


# -- the drivers' options and failures against BMC peers of their own -------
# (no Nova needed: each test starts the emulator it needs in its tmp dir)

@pytest.fixture
def peers(tmp_path):
    """start(kind, **behaviours) -> a started RedfishBMC / IPMIBMC, stopped
    after the test; a missing peer skips (fails under REQUIRE)."""
    started = []

    def start(kind, host="compute-x", **kwargs):
        cls = redfish.RedfishBMC if kind == "redfish" else ipmi.IPMIBMC
        try:
            bmc = cls(host, tmp_path, **kwargs)
            started.append(bmc)
            return bmc.start()
        except PeerMissing as e:
            harness.handle_missing(e)
    yield start
    for bmc in started:
        bmc.stop()


def fast_conf(**fencing_opts):
    values = {"timeout": 10, "poll_interval": 0.1, "retries": 2}
    values.update(fencing_opts)
    return iha_conf.make({"fencing": values})


def own_entry(bmc, **options):
    data = dict(bmc.inventory_entry(), **options)
    return inventory.parse({"hosts": {bmc.host: data}},
                           fencing.FIELDS)[bmc.host]


def test_redfish_session_auth_over_tls(peers):
    bmc = peers("redfish", session_only=True)      # basic auth refused
    driver = load_driver("redfish", fast_conf())
    entry = own_entry(bmc, auth="session")
    assert driver.power_state(entry) is base.PowerState.ON
    driver.power_off(entry)
    assert bmc.power_state() == "off"
    stats = bmc.stats()
    assert stats["created"] == 1 and stats["live"] == 1   # one, reused
    assert stats["basic_requests"] == 0 and stats["token_requests"] >= 4
    # the BMC forgets the session: the driver opens a new one, once
    bmc.expire_sessions()
    driver.power_on(entry)
    assert bmc.power_state() == "on"
    stats = bmc.stats()
    assert stats["created"] == 2 and stats["token_refused"] == 1
    driver.close()
    stats = bmc.stats()
    assert stats["live"] == 0 and stats["deleted"] == 1


def test_redfish_auth_auto_falls_back_to_basic(peers):
    bmc = peers("redfish")                          # no SessionService
    driver = load_driver("redfish", fast_conf())
    driver.power_off(own_entry(bmc, auth="auto"))
    assert bmc.power_state() == "off"


@pytest.mark.parametrize("auth", ["basic", "session"])
def test_redfish_wrong_password(peers, auth):
    bmc = peers("redfish", sessions=True)
    secret = "not-" + bmc.password
    driver = load_driver("redfish", fast_conf())
    with pytest.raises(base.FenceError) as err:
        driver.power_off(own_entry(bmc, auth=auth, password=secret))
    msg = str(err.value)
    assert bmc.host in msg and "rejected the credentials" in msg
    assert secret not in msg and bmc.password not in msg
    assert bmc.power_state() == "on"
    assert bmc.stats()["live"] == 0


@pytest.mark.parametrize("via", ["env", "file"])
def test_ipmi_wrong_password(peers, via):
    bmc = peers("ipmi")
    secret = "not" + bmc.password[:10]
    driver = load_driver("ipmi", fast_conf())
    with pytest.raises(base.FenceError) as err:
        driver.power_off(own_entry(bmc, password=secret, password_via=via))
    msg = str(err.value)
    assert bmc.host in msg and "refused the credentials" in msg
    assert "unreachable" not in msg
    assert secret not in msg and bmc.password not in msg
    assert bmc.power_state() == "on" and bmc.calls() == []


def test_ipmi_password_via_file_fences(peers, tmp_path, monkeypatch):
    import tempfile
    files = tmp_path / "pwfiles"
    files.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(files))
    bmc = peers("ipmi")
    driver = load_driver("ipmi", fast_conf())
    driver.power_off(own_entry(bmc, password_via="file"))
    assert bmc.power_state() == "off"
    assert list(files.iterdir()) == []       # every password file removed


def test_redfish_unreachable(peers):
    bmc = peers("redfish")
    bmc.stop()                               # nothing listens there now
    driver = load_driver("redfish", fast_conf())
    with pytest.raises(base.FenceError) as err:
        driver.power_off(own_entry(bmc))
    assert bmc.host in str(err.value)
    assert "unreachable after 2 attempts" in str(err.value)
    assert bmc.password not in str(err.value)


def test_ipmi_unreachable(peers):
    bmc = peers("ipmi")
    bmc.stop()
    driver = load_driver("ipmi", fast_conf())
    with pytest.raises(base.FenceError) as err:
        # one ipmitool run may last 1.5 s (its own retries take ~6 s)
        driver.power_off(own_entry(bmc, timeout=1.5))
    assert bmc.host in str(err.value) and "unreachable" in str(err.value)
    assert bmc.password not in str(err.value)
    assert bmc.power_state() == "on"


def test_redfish_accepting_but_never_off_times_out(peers):
    bmc = peers("redfish", ignore_power_off=True)
    driver = load_driver("redfish", fast_conf(timeout=1.5, poll_interval=0.25))
    with pytest.raises(base.FenceError) as err:
        driver.power_off(own_entry(bmc))
    assert bmc.host in str(err.value) and "within 1.5s" in str(err.value)
    assert bmc.power_state() == "on" and bmc.stats()["ignored"] == 1


def test_ipmi_accepting_but_never_off_times_out(peers):
    bmc = peers("ipmi")
    # chassis_control.sh writes POWERFILE.new then renames it: with a
    # directory in its way the write fails and the script still exits 0,
    # so the BMC acknowledges the power off and never carries it out.
    pathlib.Path(str(bmc.power_file) + ".new").mkdir()
    driver = load_driver("ipmi", fast_conf(timeout=1.5, poll_interval=0.25))
    with pytest.raises(base.FenceError) as err:
        driver.power_off(own_entry(bmc))
    assert bmc.host in str(err.value) and "still reports power on" in str(err.value)
    assert bmc.power_state() == "on"
    assert ["set", "power", "0"] in [c.split()[1:] for c in bmc.calls()]


@pytest.mark.parametrize("status", [409, 400])
def test_redfish_already_off_answering_conflict(peers, status):
    # the system loses power between the driver's read and its reset, and
    # the BMC answers the reset as many do for a system already off
    bmc = peers("redfish", off_race=True, off_conflict=status)
    driver = load_driver("redfish", fast_conf())
    driver.power_off(own_entry(bmc))
    assert bmc.power_state() == "off"
    stats = bmc.stats()
    assert stats["raced_off"] == 1 and stats["conflicts"] == 1


def test_redfish_graceful_reset_type(peers):
    bmc = peers("redfish")
    driver = load_driver("redfish", fast_conf())
    driver.power_off(own_entry(bmc, reset_type="GracefulShutdown"))
    assert bmc.power_state() == "off"
