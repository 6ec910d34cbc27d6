"""Soft fencing on the simulator: one dispatcher routes the engines'
signed requests to the real Control of the host they name, whose restart
restarts the simulated nova-compute. Fake clock and sockets."""

import pytest

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sim import SimCloud
from instanceha.sim.agents import SimAgents
from tests.unit.sim.agent_fakes import KEYRING, SocketFactory

PATHS = {"mgmt": "127.0.0.1", "storage": "127.0.0.2"}


def make(clock, **kw):
    cloud = SimCloud(hosts=3, servers_per_host=1, boot_time=2.0,
                     clock=clock)
    factory = SocketFactory()
    kw.setdefault("request_port", 7412)
    agents = SimAgents(cloud, ["127.0.0.1:7411"], KEYRING, paths=PATHS,
                       socket_factory=factory, **kw)
    for _ in range(20):             # every agent starts (its first beat)
        agents.run_due(clock.t)
        clock.advance(0.05)
    return cloud, agents, factory


def request(host, sent_at, seq=None, kind=protocol.RESTART_COMPUTE,
            key=KEYRING.current):
    return protocol.encode_request(protocol.Request(
        kind=kind, host=host, seq=seq or protocol.request_seq(sent_at),
        sent_at=sent_at, reason="test: compute down, host beating"), key)


def compute_alive(cloud, host):
    return cloud.snapshot()["hosts"][host]["compute_alive"]


def test_a_signed_request_restarts_the_hosts_compute(clock):
    cloud, agents, _ = make(clock)
    cloud.kill_compute("compute-1")
    assert agents.dispatcher.dispatch(request("compute-1", clock.t),
                                      "127.0.0.1:5000") == "accepted"
    clock.advance(cloud.boot_time)
    assert compute_alive(cloud, "compute-1")
    control = agents.agent("compute-1").control
    assert control.counts["accepted"] == 1
    assert [a[1:3] for a in control.attempts] == [("request", "done")]
    assert agents.dispatcher.counts["accepted"] == 1


def test_the_dispatcher_binds_the_request_port_on_every_path_address(clock):
    _, agents, factory = make(clock)
    assert agents.dispatcher.open() == [("127.0.0.1", 7412),
                                        ("127.0.0.2", 7412)]


def test_requests_are_received_from_the_socket(clock):
    cloud, agents, _ = make(clock)
    agents.dispatcher.open()
    cloud.kill_compute("compute-2")
    sock = agents.dispatcher.sockets[1]
    sock.inbox.append((request("compute-2", clock.t), ("127.0.0.1", 999)))
    agents.dispatcher.drain(sock)
    clock.advance(cloud.boot_time)
    assert compute_alive(cloud, "compute-2")


@pytest.mark.parametrize("data,reason", [
    (b"junk", "bad_magic"),
    (request("compute-1", 1_800_000_000.0,
             key=keys.Key.from_secret(b"z" * 32)), "unknown_key"),
    (request("nowhere", 1_800_000_000.0), "no_agent"),
])
def test_what_the_dispatcher_drops(clock, data, reason):
    cloud, agents, _ = make(clock)
    cloud.kill_compute("compute-1")
    assert agents.dispatcher.dispatch(data) == reason
    assert agents.dispatcher.counts[reason] == 1
    clock.advance(cloud.boot_time)
    assert not compute_alive(cloud, "compute-1")


def test_a_beat_is_not_a_request(clock):
    _, agents, _ = make(clock)
    beat = protocol.encode_beat(protocol.Beat(
        host="compute-1", boot_id="b", seq=1, sent_at=clock.t, path="mgmt",
        facts=protocol.UNKNOWN_FACTS), KEYRING.current)
    assert agents.dispatcher.dispatch(beat) == "not_a_request"


def test_no_agent_listens_on_a_hung_host_or_a_stopped_agent(clock):
    cloud, agents, _ = make(clock)
    cloud.kill("compute-1")
    agents.stop_agent("compute-2")
    clock.advance(1.0)
    agents.run_due(clock.t)
    for host in ("compute-1", "compute-2"):
        assert agents.dispatcher.dispatch(
            request(host, clock.t)) == "no_agent"


def test_the_agents_own_checks_apply(clock):
    cloud, agents, _ = make(clock)
    cloud.kill_compute("compute-1")
    data = request("compute-1", clock.t)
    assert agents.dispatcher.dispatch(data) == "accepted"
    assert agents.dispatcher.dispatch(data) == "replayed"
    # the host's clock: a request older than its replay window is stale
    assert agents.dispatcher.dispatch(
        request("compute-1", clock.t - 60,
                seq=protocol.request_seq(clock.t) + 1)) == "stale"
    assert agents.dispatcher.dispatch(request(
        "compute-1", clock.t, kind="reboot")) == "unknown_kind"


def test_a_host_clock_off_by_more_than_the_window_refuses(clock):
    cloud, agents, _ = make(clock)
    agents.set_clock_offset(90.0, host="compute-1")
    for _ in range(20):             # restarted at its next beat
        clock.advance(0.05)
        agents.run_due(clock.t)
    assert agents.dispatcher.dispatch(
        request("compute-1", clock.t)) == "stale"


def test_restarts_are_rate_limited(clock):
    cloud, agents, _ = make(clock)
    outcomes = []
    for i in range(4):
        cloud.kill_compute("compute-1")
        outcomes.append(agents.dispatcher.dispatch(
            request("compute-1", clock.t)))
        clock.advance(cloud.boot_time)
    assert outcomes == ["accepted"] * 3 + ["rate_limited"]


def test_agents_that_do_not_allow_restarts_refuse(clock):
    cloud, agents, _ = make(clock, restart_compute=False)
    cloud.kill_compute("compute-1")
    assert agents.dispatcher.dispatch(
        request("compute-1", clock.t)) == "disabled"


def test_a_restart_on_a_host_that_died_meanwhile_fails(clock):
    cloud, agents, _ = make(clock)
    control = agents.agent("compute-1").control
    cloud.kill("compute-1")         # the agent has not noticed yet
    assert control.handle(request("compute-1", clock.t)) == "accepted"
    assert [a[2] for a in control.attempts] == ["failed"]


def test_without_a_request_port_there_is_no_dispatcher(clock):
    _, agents, _ = make(clock, request_port=None)
    assert agents.dispatcher is None and agents.request_addresses == []
    assert agents.conf.agent.restart_compute is False


def test_the_self_restart_policy_runs_on_the_simulator(clock):
    cloud, agents, _ = make(clock, self_restart=True)
    agents.conf.set_override("self_restart_after", 5.0, group="agent")
    cloud.kill_compute("compute-1")
    for _ in range(7):
        clock.advance(1.0)
        agents.run_due(clock.t)
    clock.advance(cloud.boot_time)
    assert compute_alive(cloud, "compute-1")
    control = agents.agent("compute-1").control
    assert [a[1] for a in control.attempts] == ["self"]
