"""devstack/plugin.sh with INSTANCEHA_AGENT=True, under the shims of
test_plugin.py: the engine's [agent] listener and the shared key on the
instanceha node, an instanceha-agent per compute host on n-cpu nodes.

On an all-in-one node with fake computes the agents run_process starts
are the real agent processes, and the real engine (against the simulated
cloud) hears every host's beats. A compute-only node of a multi-node cloud
is checked on its written files and command lines (its engine is
elsewhere). The key never shows in the output, with xtrace on.
"""

import configparser
import os
import signal
import socket
import stat
import sys

from functional import waiting
from functional.devstack.test_plugin import Stack, _alive, cloud  # noqa: F401
from functional.devstack.test_plugin import HOSTS

AGENT_BIN = os.path.join(os.path.dirname(sys.executable), "instanceha-agent")
KEY = "k3y-0f-the-test-" + "x" * 24                  # 40 characters


def _free_udp_port(address="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _ini(path):
    parser = configparser.RawConfigParser()
    assert parser.read(path), "%s was not written" % path
    return parser


def _agent_pids(stack):
    return {p.stem: int(p.read_text()) for p in stack.shim.glob("*.pid")
            if p.stem.startswith("instanceha-agent")}


def _kill_all(stack):
    for path in stack.shim.glob("*.pid"):
        pid = int(path.read_text())
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _agent_states(stack):
    import json
    try:
        with open(stack.state_dir / "status.json") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {h["name"]: h.get("agent") for h in data.get("hosts", [])}


def _calls(stack):
    return (stack.shim / "calls.log").read_text()


def test_all_in_one_fake_computes_each_beat_to_the_engine(tmp_path, cloud):
    """One agent per fake compute, each its own DevStack service, process
    and loopback address; the engine listens where they send and hears
    them all; unstack stops them and clean removes their files and the
    generated key."""
    _, server = cloud
    port = _free_udp_port()
    nova_conf = tmp_path / "nova.conf"
    nova_conf.write_text("[DEFAULT]\nreport_interval = 4\n")
    stack = Stack(tmp_path, server, INSTANCEHA_AGENT="True",
                  ENABLED_SERVICES="n-cpu", VIRT_DRIVER="fake",
                  HOST_IP="127.0.0.1", SERVICE_HOST="127.0.0.1",
                  INSTANCEHA_AGENT_PORT=str(port),
                  NOVA_CONF=str(nova_conf),
                  NOVA_CPU_CONF=str(tmp_path / "absent-nova-cpu.conf"))
    try:
        result = stack.run("install", "post-config", "local", "extra",
                           xtrace=True)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out

        # The generated key: once, 0600, the stack user's, never shown.
        key_file = stack.conf_dir / "agent.key"
        st = key_file.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.getuid()
        key = key_file.read_text().strip()
        assert len(key) == 64 and int(key, 16) >= 0
        assert key not in out and key not in _calls(stack)

        engine = stack.conf()
        listen = "127.0.0.1:%d" % port
        assert engine.get("agent", "listen_addresses") == listen
        assert engine.get("agent", "key_file") == str(key_file)
        assert engine.get("agent", "request_port") == "7414"
        assert engine.get("agent", "restart_compute") == "False"
        # From nova.conf's [DEFAULT] report_interval (no nova-cpu.conf).
        assert engine.get("agent", "nova_report_interval") == "4"

        calls = _calls(stack)
        for n, host in enumerate(HOSTS, start=1):
            name = "instanceha-agent-%s" % host
            path = stack.conf_dir / ("%s.conf" % name)
            agent = _ini(path)
            assert dict(agent.items("agent")) == {
                "engines": listen, "key_file": str(key_file),
                "host": host, "libvirt_check": "none",
                "count_guests": "False",
                "paths": "mgmt=127.0.100.%d" % n,
                "compute_units": "devstack@n-cpu-%d.service" % n}
            assert "enable_service %s" % name in calls
            assert "run_process %s %s --config-file %s" % (
                name, AGENT_BIN, path) in calls
        # The engine starts before the agents (its listener is bound).
        assert calls.index("run_process instanceha ") < \
            calls.index("run_process instanceha-agent-")

        # The real engine hears each host's real agent.
        waiting.wait_for(
            lambda: _agent_states(stack) == {h: "agent beating"
                                             for h in HOSTS}, 30,
            lambda: "every host's agent heard (%s); engine log:\n%s"
            % (_agent_states(stack), stack.log()[-2000:]))
        for host in HOSTS:
            log = (stack.shim / ("instanceha-agent-%s.log" % host)) \
                .read_text()
            assert "event='agent.started' host='%s'" % host in log
            assert key not in log
        assert key not in stack.log()

        # Stacking again keeps the generated key.
        pids = _agent_pids(stack)
        assert sorted(pids) == ["instanceha-agent-%s" % h for h in HOSTS]
        assert stack.run("unstack").returncode == 0
        waiting.wait_for(lambda: not any(_alive(p) for p in pids.values()),
                         15, "the agents to stop")
        result = stack.run("post-config")
        assert result.returncode == 0, result.stderr
        assert key_file.read_text().strip() == key

        assert stack.run("clean").returncode == 0
        assert not stack.conf_dir.exists()
    finally:
        _kill_all(stack)


def _compute_node(tmp_path, server, **env):
    """A compute-only node of a multi-node cloud: n-cpu here, the
    instanceha service disabled in local.conf, the engine elsewhere.
    Documentation addresses: nothing can be reached or bound."""
    values = dict(INSTANCEHA_AGENT="True", ENABLED_SERVICES="n-cpu",
                  DISABLED_SERVICES="instanceha", VIRT_DRIVER="libvirt",
                  HOST_IP="198.51.100.11", SERVICE_HOST="198.51.100.1",
                  NOVA_CPU_CONF="/etc/nova/nova-cpu.conf")
    values.update(env)
    return Stack(tmp_path, server, **values)


def test_a_compute_node_writes_its_agent_and_the_given_key(tmp_path,
                                                          cloud):
    _, server = cloud
    stack = _compute_node(tmp_path, server, INSTANCEHA_AGENT_KEY=KEY,
                          INSTANCEHA_AGENT_RESTART_COMPUTE="True")
    try:
        result = stack.run("install", "post-config", "extra", xtrace=True)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        assert KEY not in out and KEY not in _calls(stack)
        key_file = stack.conf_dir / "agent.key"
        assert key_file.read_text() == KEY + "\n"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        # No engine here.
        assert not (stack.conf_dir / "instanceha.conf").exists()
        path = stack.conf_dir / "instanceha-agent.conf"
        assert dict(_ini(path).items("agent")) == {
            "engines": "198.51.100.1:7413", "key_file": str(key_file),
            "nova_conf": "/etc/nova/nova-cpu.conf",
            "paths": "mgmt=198.51.100.11",
            "compute_units": "devstack@n-cpu.service",
            "control_addresses": "198.51.100.11:7414",
            "restart_compute": "True",
            "restart_command": "sudo,-n,systemctl,--no-block,restart,"
                               "{unit}"}
        calls = _calls(stack)
        assert "setup_develop" in calls
        assert "run_process instanceha-agent %s --config-file %s" % (
            AGENT_BIN, path) in calls
        assert "run_process instanceha " not in calls
        assert stack.run("unstack").returncode == 0
        assert "stop_process instanceha-agent" in _calls(stack)
        assert stack.run("clean").returncode == 0
        assert not stack.conf_dir.exists()
    finally:
        _kill_all(stack)


def test_a_compute_node_needs_a_long_enough_key(tmp_path, cloud):
    _, server = cloud
    stack = _compute_node(tmp_path, server)
    result = stack.run("install", "post-config", xtrace=True)
    assert result.returncode == 1
    assert "needs INSTANCEHA_AGENT_KEY" in result.stderr
    assert not (stack.conf_dir / "agent.key").exists()

    short = "s3cret-but-short-" + "y" * 10             # 27 characters
    (tmp_path / "short").mkdir()
    stack = _compute_node(tmp_path / "short", server,
                          INSTANCEHA_AGENT_KEY=short)
    result = stack.run("install", "post-config", xtrace=True)
    assert result.returncode == 1
    assert "INSTANCEHA_AGENT_KEY must be one line of at least 32 characters" \
        in result.stderr
    assert short not in result.stdout + result.stderr
    assert not (stack.conf_dir / "instanceha-agent.conf").exists()


def test_the_agent_is_off_by_default(tmp_path, cloud):
    _, server = cloud
    stack = Stack(tmp_path, server, ENABLED_SERVICES="n-cpu")
    result = stack.run("install", "post-config")
    assert result.returncode == 0, result.stderr
    assert not stack.conf().has_section("agent")
    assert sorted(p.name for p in stack.conf_dir.iterdir()) == [
        "bmc.yaml", "clouds.yaml", "instanceha.conf"]
    assert "instanceha-agent" not in _calls(stack)
