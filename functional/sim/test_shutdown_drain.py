"""Orderly shutdown drains first (issue 38), end to end: the real agent
of compute-1 (instanceha.agent.main.Agent, real UDP, its logind client
speaking D-Bus through jeepney) holds a delay inhibitor of a fake logind
on a private dbus-daemon; the real engine (``instanceha run`` against the
simulator, the other hosts' agents simulated) drains the host when logind
says it shuts down, and the agent releases its lock once the engine says
drained. The host then dies: in maintenance, it is not fenced.

Skipped without dbus-daemon (Debian's dbus package,
tools/test-packages.sh), failed then under INSTANCEHA_REQUIRE_SERVICES=1.

Budgets: beats every 0.2 s, the simulator's migrations 0.5 s, a drain
pass every second; waits of 60-90 s, which a loaded 2-core machine meets.
"""

import os
import threading

import pytest

from functional import fake_logind
from functional import waiting
from functional.engine_process import EngineProcess
from instanceha import simrun
from instanceha.agent import main as agent_main
from instanceha.agent import shutdown
from instanceha.conf import agent as agent_conf
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

HOST = "compute-1"
FACTS = protocol.Facts(compute=True, libvirt=True, guests=2)


class Reader:
    """The host's facts as the simulator has them (nova-compute runs)."""
    compute_unit = "nova-compute.service"

    def read(self):
        return FACTS


def agent_conf_for(engines, interval):
    conf = agent_conf.new_conf()
    conf([], project="instanceha", default_config_files=[])
    for name, value in dict(
            engines=engines, host=HOST, interval=interval,
            system_uuid_file="", nonce_file="", guest_events=False,
            drain_on_shutdown=True, shutdown_drain_timeout=90.0).items():
        conf.set_override(name, value, "agent")
    return conf


@pytest.fixture
def bed(tmp_path):
    if fake_logind.dbus_daemon() is None:
        if os.environ.get("INSTANCEHA_REQUIRE_SERVICES") == "1":
            pytest.fail("dbus-daemon not found (Debian's dbus package)")
        pytest.skip("dbus-daemon not found (Debian's dbus package)")
    cloud = SimCloud(hosts=4, servers_per_host=2, boot_time=1.0,
                     service_down_time=3.0, live_migration_time=0.5,
                     cold_migration_time=0.5)
    srv = SimServer(cloud).start()
    setup = simrun.agent_setup(str(tmp_path), interval=0.2, host_keys=True)
    conf_path = simrun.write_config(str(tmp_path), srv, {
        "detection": {"delta": 3.0},
        "drain": {"poll_interval": 1},
        "agent": {"silence_timeout": 1.5, "nova_report_interval": 1.0}},
        agents=setup)
    args = setup.sim_args()
    agents = SimAgents(cloud, hosts=[h for h in cloud.hosts if h != HOST],
                       **args).start()
    bus = fake_logind.PrivateBus(tmp_path)
    logind = fake_logind.FakeLogind(bus.address, delay_max=120.0)
    ring = keys.Keyring(keys.derive_host_key(args["master_key"], HOST))
    agent = agent_main.Agent(
        agent_conf_for(list(args["engines"]), 0.2), ring, host=HOST,
        reader=Reader(), logind=shutdown.SystemLogind(bus=bus.address))
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    engine = EngineProcess(str(tmp_path), conf_path,
                           os.path.join(str(tmp_path), "status.json"),
                           "sqlite:///" + os.path.join(str(tmp_path),
                                                       "journal.sqlite"))
    try:
        agent.start()
        runner.start()
        engine.start(len(cloud.hosts), timeout=60)
        engine.wait(lambda: all(
            h.get("agent") for h in engine.status().get("hosts", [])),
            60, "every host's agent to be heard")
        yield cloud, engine, agent, logind
    finally:
        stop.set()
        runner.join(10)
        engine.stop()
        agents.stop()
        logind.close()
        bus.close()
        srv.stop()


def _on(cloud, host):
    return {sid for sid, s in cloud.snapshot()["servers"].items()
            if s["host"] == host}


def test_a_shutdown_waits_for_the_drain_then_the_dead_host_is_not_fenced(
        bed):
    cloud, engine, agent, logind = bed
    # The lock, taken at start.
    assert logind.locks and logind.locks[0][:4] == (
        "shutdown", "instanceha-agent", "drain servers before shutdown",
        "delay")
    assert logind.held()
    servers = _on(cloud, HOST)
    assert servers
    logind.prepare(True)
    engine.wait_state(HOST, "draining", 60)
    # Held while the servers move.
    waiting.wait_for(lambda: not _on(cloud, HOST) and
                     engine.states()[HOST][0] == "maintenance", 90,
                     "compute-1 drained to maintenance")
    waiting.wait_for(lambda: not logind.held(), 30,
                     "the agent to release its lock")
    assert agent.shutdown.outcomes[0][0] == shutdown.DRAINED
    log = engine.log_text()
    assert "shutdown_drain_asked" in log and "orderly shutdown" in log
    # Each server runs on another host.
    snap = cloud.snapshot()["servers"]
    assert all(snap[sid]["host"] not in (None, HOST) for sid in servers)
    # The shutdown goes on: the host and its agent stop. Nova calls it
    # down after 3 s, the engine's silence timeout is 1.5 s: in
    # maintenance, it is neither fenced nor evacuated.
    agent.sender.close()
    cloud.kill(HOST)
    waiting.wait_for(lambda: any(
        "agent_silent" in line and "'%s'" % HOST in line
        for line in engine.log_text().splitlines()), 30,
        "the engine to hear compute-1's agent silent")
    waiting.wait_for(lambda: cloud.snapshot()["services"][HOST].get(
        "state") == "down", 30, "Nova to call compute-1 down")
    # Some detection rounds later (delta 3 s), still untouched.
    waiting.poll(lambda: engine.states()[HOST][0] != "maintenance"
                 or cloud.snapshot()["hosts"][HOST]["power"] != "on", 10)
    assert engine.states()[HOST][0] == "maintenance"
    assert cloud.snapshot()["hosts"][HOST]["power"] == "on"
