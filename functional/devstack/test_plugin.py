"""devstack/plugin.sh, phase by phase, under a harness providing the
DevStack functions it calls (shims.sh), pointed at the simulated cloud:
its Keystone takes DevStack's password credentials from the generated
clouds.yaml, its Nova and hosts are what the generated configuration and
noop inventory describe. Then the service it started recovers a host.

DevStack itself cannot run on the test machine. The same plugin against
the real-peer bed (real Nova behind a real Keystone, real BMC emulators):
test_plugin_realbed.py.
"""

import configparser
import getpass
import os
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from functional import waiting
from functional.peers.procs import pid_alive as _alive
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STACK = os.path.join(HERE, "stack.sh")
HOSTS = ["compute-0", "compute-1", "compute-2"]

#: What a local.conf [[post-config|$INSTANCEHA_CONF]] block would hold to
#: match the simulator's fast heartbeats (fencing is noop: nothing to tune).
LOCAL_CONF = [(group, key, value)
              for group, values in simrun.FAST.items()
              if group not in ("DEFAULT", "api", "fencing")
              for key, value in values.items()]


@pytest.fixture
def cloud():
    sim = SimCloud(hosts=len(HOSTS), servers_per_host=2,
                   evacuation_time=0.2)
    server = SimServer(sim).start()
    yield sim, server
    server.stop()


class Stack:
    def __init__(self, tmp_path, server, **env):
        self.tmp = tmp_path
        self.shim = tmp_path / "shim"
        self.shim.mkdir()
        self.conf_dir = tmp_path / "etc" / "instanceha"
        self.state_dir = tmp_path / "data" / "instanceha"
        local = tmp_path / "local.conf.lines"
        local.write_text("".join("%s %s %s\n" % line for line in LOCAL_CONF))
        self.env = dict(
            os.environ,
            PYTHONPATH=REPO,
            SHIM_DIR=str(self.shim), SHIM_PYTHON=sys.executable,
            SHIM_LOCAL_CONF=str(local),
            DEST=str(tmp_path / "opt"), DATA_DIR=str(tmp_path / "data"),
            STACK_USER=getpass.getuser(),
            ADMIN_PASSWORD=server.cloud.password,
            KEYSTONE_SERVICE_URI=server.url + "/identity",
            REGION_NAME=server.cloud.region,
            HOST_IP="192.0.2.10", SERVICE_HOST="192.0.2.10",
            INSTANCEHA_DIR=REPO,
            INSTANCEHA_CONF_DIR=str(self.conf_dir),
            INSTANCEHA_COMPUTE_HOSTS=" ".join(HOSTS),
            INSTANCEHA_API_PORT="0")
        self.env.update(env)

    def run(self, *phases, xtrace=False):
        cmd = ["bash"] + (["-x"] if xtrace else []) + [STACK, REPO]
        return subprocess.run(cmd + list(phases), env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)

    def conf(self):
        parser = configparser.RawConfigParser()
        parser.read(self.conf_dir / "instanceha.conf")
        return parser

    def pid(self):
        path = self.shim / "instanceha.pid"
        return int(path.read_text()) if path.exists() else None

    def log(self):
        path = self.shim / "instanceha.log"
        return path.read_text() if path.exists() else ""

    def states(self):
        import json
        try:
            with open(self.state_dir / "status.json") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return {h["name"]: h["state"] for h in data.get("hosts", [])}


def test_every_phase_then_a_host_failure_is_recovered(tmp_path, cloud):
    sim, server = cloud
    stack = Stack(tmp_path, server)
    try:
        result = stack.run("install", "post-config", "local", "extra",
                           xtrace=True)
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout + result.stderr
        # The noop driver is said loudly, and `instanceha check` passed.
        assert "fencing driver NOOP for compute-0 compute-1 compute-2" in out
        assert "WARNING" in out and "hosts are NOT powered off" in out
        assert "RESULT: ready to recover, with" in out
        # xtrace was on: the admin password never reached the output.
        assert server.cloud.password not in out

        calls = (stack.shim / "calls.log").read_text()
        assert "setup_develop %s" % REPO in calls
        assert "run_process instanceha %s run --config-file %s" % (
            os.path.join(os.path.dirname(sys.executable), "instanceha"),
            stack.conf_dir / "instanceha.conf") in calls

        conf = stack.conf()
        assert conf.get("fencing", "allow_unfenced") == "True"
        assert conf.get("fencing", "inventory") == \
            str(stack.conf_dir / "bmc.yaml")
        assert conf.get("journal", "connection") == \
            "sqlite:///%s" % (stack.state_dir / "journal.sqlite")
        assert conf.get("DEFAULT", "cloud") == "devstack-instanceha"
        inventory = yaml.safe_load((stack.conf_dir / "bmc.yaml").read_text())
        assert inventory == {"hosts": {h: {"driver": "noop"}
                                       for h in HOSTS}}
        clouds = stack.conf_dir / "clouds.yaml"
        assert stat.S_IMODE(clouds.stat().st_mode) == 0o600
        auth = yaml.safe_load(clouds.read_text())[
            "clouds"]["devstack-instanceha"]["auth"]
        assert auth["auth_url"] == server.url + "/identity/v3"

        # The service run_process started recovers a lost host.
        waiting.wait_for(lambda: len(stack.states()) == len(HOSTS), 30,
                         lambda: "the service to see every host; log:\n"
                         + stack.log()[-2000:])
        victims = {sid for sid, s in sim.snapshot()["servers"].items()
                   if s["host"] == "compute-1"}
        sim.kill("compute-1")
        waiting.wait_for(lambda: stack.states().get("compute-1")
                         == "evacuated", 60,
                         lambda: "compute-1 evacuated (%s); log:\n%s"
                         % (stack.states(), stack.log()[-2000:]))
        snap = sim.snapshot()
        for sid in victims:
            assert snap["servers"][sid]["host"] in ("compute-0",
                                                    "compute-2")
            assert snap["servers"][sid]["status"] == "ACTIVE"
        assert snap["services"]["compute-1"]["forced_down"]
        # noop: nothing was powered off, as the plugin warned.
        assert snap["hosts"]["compute-1"]["power"] == "on"
        assert "host_not_fenced" in stack.log()

        pid = stack.pid()
        result = stack.run("unstack")
        assert result.returncode == 0, result.stderr
        waiting.wait_for(lambda: not _alive(pid), 10, "the service to stop")

        result = stack.run("clean")
        assert result.returncode == 0, result.stderr
        assert not stack.conf_dir.exists()
        assert not stack.state_dir.exists()
    finally:
        pid = stack.pid()
        if pid is not None and _alive(pid):
            os.kill(pid, 9)


def test_noop_is_refused_on_a_multi_node_cloud(tmp_path, cloud):
    _, server = cloud
    stack = Stack(tmp_path, server, SERVICE_HOST="192.0.2.1")
    result = stack.run("install", "post-config")
    assert result.returncode == 1
    assert "allowed only on an all-in-one node" in result.stderr
    assert not (stack.conf_dir / "instanceha.conf").exists()


def test_a_given_inventory_is_used_and_noop_not_allowed(tmp_path, cloud):
    _, server = cloud
    mine = tmp_path / "my-bmc.yaml"
    mine.write_text(yaml.safe_dump(server.bmc_inventory()))
    stack = Stack(tmp_path, server, INSTANCEHA_BMC_INVENTORY=str(mine),
                  INSTANCEHA_FENCING_DRIVER="redfish",
                  SERVICE_HOST="192.0.2.1")
    result = stack.run("install", "post-config", "local")
    assert result.returncode == 0, result.stderr
    assert "NOOP" not in result.stdout
    assert not stack.conf().has_option("fencing", "allow_unfenced")
    copied = stack.conf_dir / "bmc.yaml"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o600
    # `instanceha check` reads the real (simulated) BMCs through it.
    check = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "check",
         "--config-file", str(stack.conf_dir / "instanceha.conf")],
        env=stack.env, cwd=REPO, capture_output=True, text=True,
        timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "OK    fencing compute-1: redfish" in check.stdout


def test_shellcheck():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (tools/test-packages.sh "
                    "installs it)")
    result = subprocess.run(
        [shellcheck, "-x", "devstack/plugin.sh", "devstack/settings",
         "functional/devstack/shims.sh", "functional/devstack/stack.sh"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


def test_notifications_through_devstacks_broker(tmp_path, cloud, vhost):
    """INSTANCEHA_NOTIFICATIONS=True: the listener is configured with
    DevStack's notification URL (get_notification_url), `instanceha
    check` connects to it, and the service starts with it."""
    _, server = cloud
    stack = Stack(tmp_path, server, INSTANCEHA_NOTIFICATIONS="True",
                  SHIM_NOTIFICATION_URL=vhost.url)
    try:
        result = stack.run("install", "post-config", "local", "extra")
        assert result.returncode == 0, result.stdout + result.stderr
        conf = stack.conf()
        assert conf.get("notifications", "enabled") == "True"
        assert conf.get("notifications", "transport_url") == vhost.url
        assert any(line.startswith("OK    notifications: ")
                   and line.endswith(": connected")
                   for line in result.stdout.splitlines()), result.stdout
        waiting.wait_for(lambda: len(stack.states()) == len(HOSTS), 30,
                         lambda: "the service to see every host; log:\n"
                         + stack.log()[-2000:])
        pid = stack.pid()
        assert stack.run("unstack").returncode == 0
        waiting.wait_for(lambda: not _alive(pid), 10, "the service to stop")
    finally:
        pid = stack.pid()
        if pid is not None and _alive(pid):
            os.kill(pid, 9)
