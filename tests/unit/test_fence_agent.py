"""fence_agent driver against a scripted fence agent: no process, no sleep.

The fake agent reads its stdin the way the ClusterLabs fencing library does
(``_parse_input_stdin`` in fencing.py: each line stripped, ``#`` lines
skipped, split at the first ``=``, one pair of surrounding double quotes
removed) and answers with the library's exit codes and messages.
"""

import base64
import os
import re
import stat

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers.fencing import FIELDS, base, inventory, load_driver
from instanceha.drivers.fencing import fence_agent, fence_agent_run

PASSWORD = "s3cr3t-pw"
AGENT_DIR = "/opt/fake-agents"


def parse_agent_stdin(text):
    """fencing.py's reading of stdin (names as given, values unquoted)."""
    opts = {}
    for line in text.splitlines(keepends=True):
        line = line.strip()
        if line.startswith("#") or not line:
            continue
        name, value = (line + "=").split("=", 1)
        value = re.sub(r'^"(.*)"$', r"\1", value[:-1])
        opts[name] = value
    return opts


class FakeAgent:
    """Answers fence-agent runs like fence_ipmilan would, on a fake clock."""

    def __init__(self, power="on", off_after=0.0):
        self.power = power
        self.off_after = off_after     # seconds from action=off to Off
        self.now = 0.0
        self.off_at = None
        self.calls = []                # (argv, options, env, timeout)
        self.refuse = False            # the BMC ignores power changes
        self.unreachable = 0           # this many next runs cannot connect
        self.wrong_password = False    # echoes the password, as a bad agent might
        self.hang = 0                  # this many next runs time out
        self.status_answer = None      # (rc, stdout) forced for status

    def __call__(self, argv, stdin, env, timeout):
        opts = parse_agent_stdin(stdin)
        self.calls.append((list(argv), opts, dict(env), timeout))
        action = opts.get("action")
        if self.hang:
            self.hang -= 1
            return None, "", "no answer within %g s" % timeout
        if self.unreachable:
            self.unreachable -= 1
            return 1, "", ("2024-05-01 10:00:00,001 ERROR: Connection timed "
                           "out\n\n2024-05-01 10:00:00,001 ERROR: Please use "
                           "'-h' for usage\n")
        if self.wrong_password:
            secret = opts.get("password", "")
            basic = base64.b64encode(("admin:%s" % secret).encode()).decode()
            return 1, "", ("DEBUG: sent password=%s Authorization: Basic %s\n"
                           "2024-05-01 10:00:00,001 ERROR: Unable to obtain "
                           "correct plug status or plug is not available "
                           "(login %s refused)\n" % (secret, basic, secret))
        if self.off_at is not None and self.now >= self.off_at:
            self.power, self.off_at = "off", None
        if action == "status":
            if self.status_answer is not None:
                return self.status_answer[0], self.status_answer[1], ""
            if self.power == "off":
                return 2, "Status: OFF\n", ""
            return 0, "Status: ON\n", ""
        if action == "off":
            if self.power == "off":
                return 0, "Success: Already OFF\n", ""
            if self.refuse:
                return 1, "", ("2024-05-01 10:00:20,001 ERROR: Failed: Timed "
                               "out waiting to power OFF\n\n")
            self.off_at = self.now + self.off_after
            return 0, "Success: Powered OFF\n", ""
        if action == "on":
            self.power = "on"
            return 0, "Success: Powered ON\n", ""
        return 1, "", "ERROR: Failed: Unrecognised action '%s'\n" % action

    def sleep(self, seconds):
        self.now += seconds

    def clock(self):
        return self.now

    def actions(self):
        return [opts.get("action") for _, opts, _, _ in self.calls]


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 10, "poll_interval": 1,
                                      "retries": 3}})


@pytest.fixture
def agent_dir(tmp_path):
    """A search directory holding executable fake agents (never run)."""
    for name in ("fence_ipmilan", "fence_redfish", "fence_kdump"):
        path = tmp_path / name
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    return tmp_path


def host_entry(**fields):
    entry = {"driver": "fence_agent", "agent": "fence_ipmilan",
             "address": "192.0.2.10", "username": "admin",
             "password": PASSWORD,
             "params": {"lanplus": 1, "ipport": 6230, "cipher": 3}}
    entry.update(fields)
    entry = {k: v for k, v in entry.items() if v is not None}
    return inventory.parse({"hosts": {"compute-0": entry}},
                           FIELDS)["compute-0"]


def make(conf, fake, agent_dir):
    return fence_agent.FenceAgentDriver(conf, runner=fake, sleep=fake.sleep,
                                        clock=fake.clock,
                                        search_path=[str(agent_dir)],
                                        path_env="")


# -- registry and inventory -----------------------------------------------

def test_registry_builds_fence_agent_driver(conf):
    assert isinstance(load_driver("fence_agent", conf),
                      fence_agent.FenceAgentDriver)


def test_inventory_accepts_the_documented_entry():
    bmc = host_entry(agent_timeout=30)
    assert bmc.options["agent"] == "fence_ipmilan"
    assert bmc.options["params"] == {"lanplus": 1, "ipport": 6230, "cipher": 3}
    assert FIELDS["fence_agent"] == {"agent", "params", "agent_timeout"}


# -- the stdin protocol ---------------------------------------------------

def test_agent_runs_without_arguments_and_reads_everything_on_stdin(
        conf, agent_dir):
    fake = FakeAgent()
    make(conf, fake, agent_dir).power_state(host_entry())
    argv, opts, env, timeout = fake.calls[0]
    assert argv == [str(agent_dir / "fence_ipmilan")]
    assert opts == {"action": "status", "ip": "192.0.2.10",
                    "username": "admin", "password": PASSWORD,
                    "lanplus": "1", "ipport": "6230", "cipher": "3"}
    assert timeout == 10.0                      # [fencing] timeout
    assert PASSWORD not in " ".join(argv)
    assert PASSWORD not in " ".join("%s=%s" % kv for kv in env.items())


@pytest.mark.parametrize("value", [
    "trailing blanks  ", '"quoted"', "a=b=c", "#not a comment", " lead",
    "", "it's", "back\\slash"])
def test_values_reach_the_agent_exactly(conf, agent_dir, value):
    fake = FakeAgent()
    bmc = host_entry(password=value or None,
                     params={"plug": value, "lanplus": True,
                             "ssl_insecure": False, "power_wait": 0.5})
    make(conf, fake, agent_dir).power_state(bmc)
    opts = fake.calls[0][1]
    assert opts["plug"] == value
    if value:
        assert opts["password"] == value
    else:
        assert "password" not in opts           # no password: none sent
    assert (opts["lanplus"], opts["ssl_insecure"], opts["power_wait"]) == \
        ("1", "0", "0.5")


@pytest.mark.parametrize("name", ["ip", "ipaddr"])
def test_params_ip_wins_over_address(conf, agent_dir, name):
    fake = FakeAgent()
    make(conf, fake, agent_dir).power_state(
        host_entry(params={name: "198.51.100.7"}))
    opts = fake.calls[0][1]
    assert opts[name] == "198.51.100.7"
    assert list(opts).count("ip") + list(opts).count("ipaddr") == 1


def test_no_address_sends_no_ip(conf, agent_dir):
    fake = FakeAgent()
    make(conf, fake, agent_dir).power_state(
        host_entry(address=None, params={"plug": "vm-compute-0",
                                         "namespace": "cluster"}))
    assert "ip" not in fake.calls[0][1]


def test_agent_environment_is_not_pacemakers(conf, agent_dir, monkeypatch):
    monkeypatch.setenv("PCMK_service", "pacemaker-fenced")
    fake = FakeAgent()
    make(conf, fake, agent_dir).power_state(host_entry())
    env = fake.calls[0][2]
    assert "PCMK_service" not in env            # would disable its timeouts
    assert env["LANG"] == "C"


def test_agent_timeout_field_is_the_runner_timeout(conf, agent_dir):
    fake = FakeAgent()
    make(conf, fake, agent_dir).power_state(host_entry(agent_timeout=45))
    assert fake.calls[0][3] == 45.0


# -- power off ------------------------------------------------------------

def test_already_off_sends_no_off(conf, agent_dir):
    fake = FakeAgent(power="off")
    make(conf, fake, agent_dir).power_off(host_entry())
    assert fake.actions() == ["status"]


def test_off_then_status_polled_until_off(conf, agent_dir):
    fake = FakeAgent(off_after=3)
    make(conf, fake, agent_dir).power_off(host_entry())
    assert fake.actions() == ["status", "off"] + ["status"] * 4
    assert fake.power == "off"
    assert fake.now == 3.0                      # fake sleeps only


def test_off_never_confirmed_is_fence_error(conf, agent_dir):
    fake = FakeAgent(off_after=1000)
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry())
    assert "compute-0" in str(err.value)
    assert "still reports power on" in str(err.value)
    assert fake.now >= 10


def test_refused_off_fails_at_once(conf, agent_dir):
    fake = FakeAgent()
    fake.refuse = True
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry())
    msg = str(err.value)
    assert "compute-0" in msg and "fence_ipmilan" in msg
    assert "Timed out waiting to power OFF" in msg
    assert fake.actions() == ["status", "off"]  # not retried
    assert PASSWORD not in msg


def test_wrong_password_never_in_the_error(conf, agent_dir):
    fake = FakeAgent()
    fake.wrong_password = True
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry())
    msg = str(err.value)
    assert "compute-0" in msg and "Unable to obtain correct plug" in msg
    assert PASSWORD not in msg
    assert base64.b64encode(("admin:" + PASSWORD).encode()).decode() not in msg
    assert fake.actions() == ["status"]


def test_unreachable_is_retried_then_fence_error(conf, agent_dir):
    fake = FakeAgent()
    fake.unreachable = 99
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry())
    msg = str(err.value)
    assert "compute-0" in msg and "after 3 attempt(s)" in msg
    assert "Connection timed out" in msg and "-h" not in msg
    assert len(fake.calls) == 3
    assert fake.now == 2.0                      # two waits of poll_interval


def test_unreachable_once_then_fenced(conf, agent_dir):
    fake = FakeAgent()
    fake.unreachable = 1
    make(conf, fake, agent_dir).power_off(host_entry())
    assert fake.power == "off"
    assert fake.actions() == ["status", "status", "off", "status"]


def test_agent_timeout_is_fence_error_not_retried(conf, agent_dir):
    fake = FakeAgent()
    fake.hang = 1
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry(agent_timeout=7))
    msg = str(err.value)
    assert "compute-0" in msg and "within 7 s" in msg and "agent_timeout" in msg
    assert len(fake.calls) == 1


@pytest.mark.parametrize("rc,out", [
    (2, ""),                      # 2 without 'Status: OFF': not documented
    (2, "Status: ON\n"),
    (0, "Status: OFF\n"),         # exit 0 is on; the output contradicts it
    (3, "Status: OFF\n"),
])
def test_undocumented_status_answer_is_not_off(conf, agent_dir, rc, out):
    fake = FakeAgent()
    fake.status_answer = (rc, out)
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry())
    assert "compute-0" in str(err.value)
    assert "off" not in fake.actions()


def test_status_on_and_off(conf, agent_dir):
    fake = FakeAgent()
    driver = make(conf, fake, agent_dir)
    assert driver.power_state(host_entry()) is base.PowerState.ON
    fake.power = "off"
    assert driver.power_state(host_entry()) is base.PowerState.OFF


def test_power_on(conf, agent_dir):
    fake = FakeAgent(power="off")
    make(conf, fake, agent_dir).power_on(host_entry())
    assert fake.actions() == ["on"] and fake.power == "on"


# -- the agent on disk ----------------------------------------------------

def test_agent_not_installed_names_agent_and_host(conf, tmp_path):
    fake = FakeAgent()
    driver = fence_agent.FenceAgentDriver(conf, runner=fake, sleep=fake.sleep,
                                          clock=fake.clock,
                                          search_path=[str(tmp_path)],
                                          path_env="")
    with pytest.raises(base.FenceError) as err:
        driver.power_off(host_entry(agent="fence_idrac"))
    assert "compute-0" in str(err.value)
    assert "fence agent fence_idrac is not installed" in str(err.value)
    assert fake.calls == []


def test_agent_found_on_path_and_must_be_executable(conf, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "fence_idrac").write_text("not executable")
    (second / "fence_idrac").write_text("#!/bin/sh\n")
    (second / "fence_idrac").chmod(0o755)
    assert fence_agent.find_agent("fence_idrac", [str(first)],
                                  str(second)) == str(second / "fence_idrac")
    assert not os.stat(first / "fence_idrac").st_mode & stat.S_IXUSR
    assert fence_agent.find_agent("fence_idrac", [str(first)], "") is None


# -- validation: every error names the host and the field ------------------

@pytest.mark.parametrize("fields,field,words", [
    ({"agent": None}, "agent", "missing"),
    ({"agent": "ipmitool"}, "agent", "not a fence agent name"),
    ({"agent": "../sbin/fence_x"}, "agent", "not a fence agent name"),
    ({"agent": "fence_x; rm -rf /"}, "agent", "not a fence agent name"),
    ({"agent": "fence_kdump"}, "agent", "powers nothing off"),
    ({"params": ["lanplus"]}, "params", "must be a mapping"),
    ({"params": {"lanplus": None}}, "params.lanplus", "string, number or"),
    ({"params": {"plug": [1, 2]}}, "params.plug", "string, number or"),
    ({"params": {"a=b": 1}}, "params", "not an agent parameter name"),
    ({"params": {"#x": 1}}, "params", "not an agent parameter name"),
    ({"params": {"plug": "vm1\npassword=x"}}, "params.plug", "line break"),
    ({"params": {"plug": "vm1\rx=y"}}, "params.plug", "line break"),
    ({"params": {"plug": "vm1\u2028x=y"}}, "params.plug", "line break"),
    ({"params": {"password": "x"}}, "params.password", "password field"),
    ({"params": {"passwd": "x"}}, "params.passwd", "password field"),
    ({"params": {"login": "x"}}, "params.login", "username field"),
    ({"params": {"action": "reboot"}}, "params.action", "chooses the action"),
    ({"params": {"ssl-insecure": 1, "ssl_insecure": 1}},
     "params.ssl_insecure", "given twice"),
    ({"password": "pw\nipport=1"}, "password", "line break"),
    ({"username": "admin\nx=y"}, "username", "line break"),
    ({"address": "10.0.0.1\x00"}, "address", "line break"),
    ({"address": "https://10.0.0.1"}, "address", "is a URL"),
    ({"agent_timeout": 0}, "agent_timeout", "positive number"),
    ({"agent_timeout": "soon"}, "agent_timeout", "positive number"),
    ({"agent_timeout": True}, "agent_timeout", "positive number"),
])
def test_invalid_settings_name_host_and_field(conf, agent_dir, fields, field,
                                               words):
    fake = FakeAgent()
    with pytest.raises(base.FenceError) as err:
        make(conf, fake, agent_dir).power_off(host_entry(**fields))
    msg = str(err.value)
    assert msg.startswith("compute-0: field %s: " % field), msg
    assert words in msg
    assert "pw\nipport" not in msg and PASSWORD not in msg
    assert fake.calls == []                     # nothing ran


# -- what the agent said, on one line -------------------------------------

def test_detail_keeps_error_lines_and_drops_noise():
    err = ("/usr/sbin/fence_ipmilan:5: DeprecationWarning: 'pipes' is "
           "deprecated\n  from pipes import quote\n"
           "2024-05-01 10:00:00,001 WARNING: Parse error: Ignoring unknown "
           "option 'foo=1'\n"
           "2024-05-01 10:00:00,002 ERROR: Failed: Timed out waiting to "
           "power OFF\n\n2024-05-01 10:00:00,003 ERROR: Please use '-h' "
           "for usage\n")
    assert fence_agent_run.detail("", err) == \
        "Failed: Timed out waiting to power OFF"


def test_detail_of_a_crash_is_its_last_line():
    err = ("Traceback (most recent call last):\n  File \"/usr/sbin/fence_"
           "redfish\", line 100, in find_systems_resource\n    for member "
           "in data[u'Members']:\nKeyError: 'Members'\n")
    assert fence_agent_run.detail("", err) == "agent crashed: KeyError: 'Members'"
