"""The simulated agents with each host's own key (issue 34, part 2), fed
to the engine's real heartbeat source: root on compute-2 sends beats
naming compute-1 while compute-1 hangs; the engine drops them
(wrong_host) and reports compute-1 silent as early as without them; with
the shared key the same forgery would keep compute-1 beating. Fake
clock and sockets: nothing sleeps."""

from instanceha import conf as ih_conf
from instanceha.events import EventKind
from instanceha.heartbeat import keys
from instanceha.sim import SimCloud
from instanceha.sim.agents import SimAgents
from instanceha.sources import heartbeat
from tests.unit.sim.agent_fakes import KEYRING, SocketFactory
from tests.unit.sources.helpers import Sink

MASTER = keys.Key.from_secret(b"M" * 40)
PATHS = {"mgmt": "127.0.0.1"}


def world(clock, master):
    cloud = SimCloud(hosts=3, servers_per_host=1, boot_time=1.0,
                     clock=clock)
    factory = SocketFactory()
    agents = SimAgents(cloud, ["127.0.0.1:7411"], KEYRING, paths=PATHS,
                       socket_factory=factory, master_key=master)
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"],
                                   "silence_timeout": 3.0}})
    ring = keys.HostKeyring(MASTER, shared=KEYRING, accept_shared=True)
    sink = Sink()
    # The engine's challenges reach the simulated agents on their one
    # path (as a real engine's reach the address the beats came from).
    src = heartbeat.HeartbeatSource(
        conf, sink, clock, lambda: [(n, n) for n in cloud.hosts],
        keyring=ring,
        sendto=lambda via, data, address: agents.challenge(data, "mgmt"))
    src.refresh(clock.t)
    return cloud, agents, factory, src, sink


def deliver(factory, src, delivered, now):
    """Hand the engine every datagram sent since the last call."""
    for sock in factory.made:
        for data, _ in sock.sent[delivered.get(id(sock), 0):]:
            src.handle_datagram(data, sock.address, now=now)
        delivered[id(sock)] = len(sock.sent)


def silent_at(clock, master, forge):
    cloud, agents, factory, src, sink = world(clock, master)
    delivered = {}
    if forge:
        agents.impersonate("compute-2", "compute-1")
    t0, hung = clock.t, None
    next_challenge = t0
    while clock.t < t0 + 20:
        if hung is None and clock.t >= t0 + 5:
            hung = clock.t
            cloud.kill("compute-1")
        if clock.t >= next_challenge:
            src.challenge(clock.t)
            next_challenge = clock.t + 2.0
        agents.run_due(clock.t)
        deliver(factory, src, delivered, clock.t)
        src.check(clock.t)
        clock.advance(0.1)
    silent = [e.at - hung for e in sink.events
              if e.kind == EventKind.AGENT_SILENT and e.name == "compute-1"]
    again = [e for e in sink.events if e.name == "compute-1"
             and e.kind == EventKind.AGENT_BEATING and silent
             and e.at > hung + silent[0]]
    return (silent[0] if silent else None), bool(again), src.health()


def test_root_on_one_host_cannot_keep_a_hung_host_beating(clock):
    at, again, health = silent_at(clock, MASTER, forge=True)
    assert at is not None and at <= 3.0 + 1.1 and not again
    assert health["dropped"].get("wrong_host", 0) >= 10
    assert health["hosts_on_shared_key"] == 0
    plain, _, _ = silent_at(clock, MASTER, forge=False)
    assert abs(at - plain) < 0.15


def test_with_the_shared_key_the_same_forgery_would_hold(clock):
    at, _, health = silent_at(clock, None, forge=True)
    assert at is None
    assert health["hosts_on_shared_key"] == 3
