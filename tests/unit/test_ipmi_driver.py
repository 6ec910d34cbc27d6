"""IPMI driver against a scripted ipmitool: no process, no sleep."""

import os

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers.fencing import FIELDS, base, inventory, load_driver
from instanceha.drivers.fencing import ipmi

PASSWORD = "s3cr3t-pw"


class FakeBMC:
    """Answers ipmitool command lines like a BMC would, on a fake clock."""

    def __init__(self, power="on", off_after=0.0):
        self.power = power
        self.off_after = off_after     # seconds from 'power off' to Off
        self.now = 0.0
        self.off_at = None
        self.calls = []
        self.refuse = False
        self.unreachable = 0           # this many next calls get no session

    # the runner signature the driver uses
    def __call__(self, argv, env, timeout):
        self.calls.append((list(argv), dict(env), timeout))
        if self.unreachable:
            self.unreachable -= 1
            return 1, "", ("Error: Unable to establish IPMI v2 / RMCP+ session\n")
        command = argv[argv.index("-R") + 2:]
        if self.off_at is not None and self.now >= self.off_at:
            self.power, self.off_at = "off", None
        if command == ["chassis", "power", "status"]:
            return 0, "Chassis Power is %s\n" % self.power, ""
        if command[:2] == ["chassis", "power"]:
            if self.refuse:
                return 1, "", "Set Chassis Power Control to Down/Off failed: Unspecified error\n"
            if command[2] == "off":
                self.off_at = self.now + self.off_after
                return 0, "Chassis Power Control: Down/Off\n", ""
            if command[2] == "on":
                self.power = "on"
                return 0, "Chassis Power Control: Up/On\n", ""
        return 1, "", "Invalid command\n"

    def sleep(self, seconds):
        self.now += seconds

    def clock(self):
        return self.now


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 10, "poll_interval": 1,
                                      "retries": 3}})


@pytest.fixture
def bmc_entry():
    return inventory.parse({"hosts": {"compute-0": {
        "driver": "ipmi", "address": "192.0.2.10", "username": "admin",
        "password": PASSWORD, "port": 6230}}}, FIELDS)["compute-0"]


def make(conf, fake):
    return ipmi.IPMIDriver(conf, runner=fake, sleep=fake.sleep, clock=fake.clock)


def test_registry_builds_ipmi_driver(conf):
    assert isinstance(load_driver("ipmi", conf), ipmi.IPMIDriver)


def test_command_line_has_lanplus_cipher_3_and_no_password(conf, bmc_entry):
    fake = FakeBMC()
    make(conf, fake).power_state(bmc_entry)
    argv, env, _ = fake.calls[0]
    assert argv[:1] == ["ipmitool"]
    assert argv[argv.index("-I") + 1] == "lanplus"
    assert argv[argv.index("-C") + 1] == "3"
    assert argv[argv.index("-p") + 1] == "6230"
    assert argv[argv.index("-H") + 1] == "192.0.2.10"
    assert "-E" in argv
    assert not any(PASSWORD in a for a in argv)
    assert env["IPMI_PASSWORD"] == PASSWORD


def test_inherited_ipmitool_password_is_not_passed_on(conf, bmc_entry, monkeypatch):
    monkeypatch.setenv("IPMITOOL_PASSWORD", "other")
    fake = FakeBMC()
    make(conf, fake).power_state(bmc_entry)
    env = fake.calls[0][1]
    assert "IPMITOOL_PASSWORD" not in env and env["IPMI_PASSWORD"] == PASSWORD


def test_cipher_suite_and_interface_from_inventory(conf):
    entry = inventory.parse({"hosts": {"h": {
        "driver": "ipmi", "address": "a", "username": "u", "password": "p",
        "cipher_suite": 17, "interface": "lan"}}}, FIELDS)["h"]
    fake = FakeBMC()
    make(conf, fake).power_state(entry)
    argv = fake.calls[0][0]
    assert argv[argv.index("-C") + 1] == "17"
    assert argv[argv.index("-I") + 1] == "lan"
    assert argv[argv.index("-p") + 1] == "623"


@pytest.mark.parametrize("text,state", [
    ("Chassis Power is on\n", base.PowerState.ON),
    ("Chassis Power is off\n", base.PowerState.OFF),
    ("Chassis Power is offline\n", None),
    ("power is off", None),
    ("", None),
])
def test_parse_status_is_exact(text, state):
    assert ipmi.parse_status(text) is state


def test_power_off_polls_until_off(conf, bmc_entry):
    fake = FakeBMC(off_after=3)
    make(conf, fake).power_off(bmc_entry)
    assert fake.power == "off"
    commands = [c[0][-1] for c in fake.calls]
    assert commands[:2] == ["status", "off"]
    assert commands[2:] == ["status"] * (len(commands) - 2)
    assert fake.now == 3          # waited on the fake clock only


def test_power_off_already_off_sends_nothing(conf, bmc_entry):
    fake = FakeBMC(power="off")
    make(conf, fake).power_off(bmc_entry)
    assert [c[0][-1] for c in fake.calls] == ["status"]


def test_power_off_timeout_names_host_not_password(conf, bmc_entry):
    fake = FakeBMC(off_after=1000)
    with pytest.raises(base.FenceError) as err:
        make(conf, fake).power_off(bmc_entry)
    msg = str(err.value)
    assert "compute-0" in msg and "still reports power on" in msg
    assert PASSWORD not in msg
    assert 10 <= fake.now <= 11


def test_refused_power_off_is_not_retried(conf, bmc_entry):
    fake = FakeBMC()
    fake.refuse = True
    with pytest.raises(base.FenceError) as err:
        make(conf, fake).power_off(bmc_entry)
    assert "compute-0" in str(err.value) and "refused power off" in str(err.value)
    assert [c[0][-1] for c in fake.calls] == ["status", "off"]


def test_unreachable_is_retried_then_succeeds(conf, bmc_entry):
    fake = FakeBMC()
    fake.unreachable = 2
    assert make(conf, fake).power_state(bmc_entry) is base.PowerState.ON
    assert len(fake.calls) == 3


def test_unreachable_gives_up_after_retries(conf, bmc_entry):
    fake = FakeBMC()
    fake.unreachable = 99
    with pytest.raises(base.FenceError) as err:
        make(conf, fake).power_off(bmc_entry)
    assert "unreachable" in str(err.value) and "compute-0" in str(err.value)
    assert len(fake.calls) == 3


def test_ipmitool_timeout_counts_as_unreachable(conf, bmc_entry):
    calls = []

    def runner(argv, env, timeout):
        calls.append(timeout)
        return None, "", "timeout after 20 s"
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError, match="unreachable"):
        drv.power_state(bmc_entry)
    assert calls == [20.0] * 3


def test_password_echoed_by_tool_is_scrubbed(conf, bmc_entry):
    def runner(argv, env, timeout):
        return 1, "", "bad password %s\n" % PASSWORD
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError) as err:
        drv.power_state(bmc_entry)
    assert PASSWORD not in str(err.value)


def test_unrecognised_status_is_an_error(conf, bmc_entry):
    def runner(argv, env, timeout):
        return 0, "Chassis Power is maybe\n", ""
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError, match="unrecognised power status"):
        drv.power_state(bmc_entry)


def test_power_on(conf, bmc_entry):
    fake = FakeBMC(power="off")
    make(conf, fake).power_on(bmc_entry)
    assert fake.power == "on"


def test_missing_ipmitool_is_a_fence_error(conf, bmc_entry):
    drv = ipmi.IPMIDriver(conf, sleep=lambda s: None,
                          executable="/nonexistent/ipmitool")
    with pytest.raises(base.FenceError, match="compute-0"):
        drv.power_state(bmc_entry)


# -- password through a file (-f) instead of the environment (-E) -----------

def file_entry(**extra):
    fields = {"driver": "ipmi", "address": "192.0.2.10", "username": "admin",
              "password": PASSWORD, "password_via": "file"}
    fields.update(extra)
    return inventory.parse({"hosts": {"compute-0": fields}},
                           FIELDS)["compute-0"]


def test_password_via_file(conf, tmp_path):
    import stat
    seen = []
    fake = FakeBMC()

    def runner(argv, env, timeout):
        path = argv[argv.index("-f") + 1]
        seen.append((path, stat.S_IMODE(os.stat(path).st_mode),
                     open(path).read()))
        return fake(argv, env, timeout)
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=fake.sleep,
                          clock=fake.clock, tmpdir=str(tmp_path))
    drv.power_off(file_entry())
    assert fake.power == "off"
    for argv, env, _ in fake.calls:
        assert "-E" not in argv and not any(PASSWORD in a for a in argv)
        assert not set(ipmi.PASSWORD_VARS) & set(env)
    assert len(seen) == len(fake.calls) >= 2
    assert {mode for _, mode, _ in seen} == {0o600}
    assert {text for _, _, text in seen} == {PASSWORD}
    assert len({path for path, _, _ in seen}) == len(seen)   # one per run
    assert list(tmp_path.iterdir()) == []                    # all removed


def test_password_file_removed_when_ipmitool_fails(conf, tmp_path):
    def runner(argv, env, timeout):
        assert os.path.exists(argv[argv.index("-f") + 1])
        return None, "", "timeout after 20 s"
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None,
                          tmpdir=str(tmp_path))
    with pytest.raises(base.FenceError, match="unreachable"):
        drv.power_state(file_entry())
    assert list(tmp_path.iterdir()) == []


def test_password_file_removed_when_the_runner_raises(conf, tmp_path):
    def runner(argv, env, timeout):
        raise RuntimeError("boom")
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None,
                          tmpdir=str(tmp_path))
    with pytest.raises(RuntimeError):
        drv.power_state(file_entry())
    assert list(tmp_path.iterdir()) == []


def test_password_file_cannot_be_created(conf, tmp_path):
    drv = ipmi.IPMIDriver(conf, runner=FakeBMC(), sleep=lambda s: None,
                          tmpdir=str(tmp_path / "missing"))
    with pytest.raises(base.FenceError) as err:
        drv.power_state(file_entry())
    assert "compute-0" in str(err.value) and "password file" in str(err.value)
    assert PASSWORD not in str(err.value)


def test_password_via_env_is_the_default(conf, bmc_entry):
    fake = FakeBMC()
    make(conf, fake).power_state(bmc_entry)
    argv, env, _ = fake.calls[0]
    assert "-E" in argv and "-f" not in argv and env["IPMI_PASSWORD"] == PASSWORD


def test_unknown_password_via_names_host_and_field(conf):
    fake = FakeBMC()
    with pytest.raises(base.FenceError) as err:
        make(conf, fake).power_state(file_entry(password_via="argv"))
    assert "compute-0" in str(err.value) and "password_via" in str(err.value)
    assert fake.calls == []


# -- a wrong password says so (ipmitool -v output, as from ipmi_sim) --------

VERBOSE_NOISE = "Loading IANA PEN Registry...\n"


@pytest.mark.parametrize("stderr", [
    VERBOSE_NOISE + "> RAKP 2 HMAC is invalid\n"
    "Error: Unable to establish IPMI v2 / RMCP+ session\n",
    VERBOSE_NOISE + "RAKP 2 message indicates an error : unauthorized name\n"
    "Error: Unable to establish IPMI v2 / RMCP+ session\n",
])
def test_wrong_credentials_are_refused_not_unreachable(conf, bmc_entry,
                                                       stderr):
    calls = []

    def runner(argv, env, timeout):
        calls.append(argv)
        return 1, "", stderr
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError) as err:
        drv.power_off(bmc_entry)
    msg = str(err.value)
    assert "compute-0" in msg and "refused the credentials of user admin" in msg
    assert "unreachable" not in msg and PASSWORD not in msg
    assert "Loading IANA" not in msg and "\n" not in msg
    assert len(calls) == 1                  # not retried


def test_no_answer_in_verbose_mode_is_unreachable(conf, bmc_entry):
    calls = []

    def runner(argv, env, timeout):
        calls.append(argv)
        return 1, "", (VERBOSE_NOISE + "Get Auth Capabilities error\n"
                       "Error issuing Get Channel Authentication Capabilities "
                       "request\nError: Unable to establish IPMI v2 / RMCP+ "
                       "session\n")
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError) as err:
        drv.power_state(bmc_entry)
    assert "unreachable" in str(err.value) and len(calls) == 3


def test_cipher_suite_mismatch_is_a_refusal_naming_the_option(conf, bmc_entry):
    calls = []

    def runner(argv, env, timeout):
        calls.append(argv)
        return 1, "", (VERBOSE_NOISE + "Error in open session response "
                       "message : invalid authentication algorithm\n\n"
                       "Error: Unable to establish IPMI v2 / RMCP+ session\n")
    drv = ipmi.IPMIDriver(conf, runner=runner, sleep=lambda s: None)
    with pytest.raises(base.FenceError) as err:
        drv.power_state(bmc_entry)
    assert "cipher_suite" in str(err.value) and len(calls) == 1


def test_ipmitool_runs_verbose(conf, bmc_entry):
    fake = FakeBMC()
    make(conf, fake).power_state(bmc_entry)
    assert "-v" in fake.calls[0][0]
