"""Peer witnesses from end to end (issue 37, section 1), on injected
clocks: the real agents' peer probing (:class:`instanceha.agent.peers.Peers`,
no watchdog) over a fake network, their beats (the real guardian's
report, signed, proven fresh by the engine's challenges) into the real
heartbeat source, its events into the state machine. A host that dies is
fenced seconds after its silence, on its peers' word, without waiting
for the heartbeat Nova owes; a host cut off from the engines alone, still
heard by its peers, is not."""

import itertools

from instanceha.agent import guardian as guardian_mod
from instanceha.agent import peers as peers_mod
from instanceha.agent import watchdog
from instanceha.events import Event, EventKind as E, ServiceReport
from instanceha.fsm import machine
from instanceha.fsm.states import State as S
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers
from tests.unit.test_heartbeat_source import T0, make

PEER_KEYRING = keys.Keyring(keys.Key.from_secret(b"p" * 40))
NAMES = ["compute-1", "compute-2", "compute-3", "compute-4"]
ADDR = {n: ("127.0.0.1", 7000 + i) for i, n in enumerate(NAMES)}
IDS = {n: "id-" + n for n in NAMES}
# grace 10 s, Nova reports every 10 s: without peers, a death is fenced
# no sooner than Nova's owed heartbeat
POLICY = machine.Policy(grace_period=10, nova_report_interval=10,
                        nova_seen_lag=3, peer_witnesses=2, peer_grace=3)


class Net:
    """Datagrams between the agents, delivered by the test; ``cut``:
    the hosts whose datagrams are lost (both ways)."""

    def __init__(self):
        self.queue = []
        self.cut = set()

    def sock(self, owner):
        net = self

        class Sock:
            def sendto(self, data, to):
                net.queue.append((owner, data, to))
        return Sock()

    def deliver(self, agents):
        by_addr = {ADDR[n]: a for n, a in agents.items()}
        while self.queue:
            owner, data, to = self.queue.pop(0)
            target = by_addr.get(to)
            if target is None or owner in self.cut or \
                    target.name in self.cut or not target.alive:
                continue
            target.peers.handle(data, ADDR[owner])


class SimAgent:
    def __init__(self, name, net, clock):
        self.name = name
        self.alive = True
        others = [(n, ADDR[n]) for n in NAMES if n != name]
        n = itertools.count(1)
        self.guardian = guardian_mod.Guardian(
            watchdog.Absent(), 20.0, 2.0, name,
            keys.Keyring(keys.Key.for_host(b"h" * 40, name)),
            peers=[o for o, _ in others], monotonic=clock,
            random=lambda size: bytes([next(n) % 256]) * size)
        self.peers = peers_mod.Peers(
            name, others, PEER_KEYRING, self.guardian, net.sock(name),
            clock, random=lambda size: bytes([next(n) % 256]) * size,
            window=3.0)
        self.seq = 0

    def beat(self, now, echoes):
        self.seq += 1
        return protocol.encode_beat(helpers.beat(
            host=self.name, seq=self.seq, sent_at=now, echoes=echoes,
            watchdog=self.guardian.report(now)), helpers.KEY)


class World:
    def __init__(self):
        self.now = T0
        self.src, self.sink, _, _ = make(
            hosts=[(IDS[n], n) for n in NAMES], silence_timeout=3.0)
        self.net = Net()
        self.agents = {n: SimAgent(n, self.net, lambda: self.now)
                       for n in NAMES}
        self.silent_to_engines = set()
        self.records = {n: machine.HostRecord(id=IDS[n], name=n)
                        for n in NAMES}
        self.taken = 0

    def step(self, dt=0.5):
        """Half a second: probes every second, beats every second, the
        engine's challenge every 2 s and its silence check."""
        self.now += dt
        now = self.now
        whole = abs(now - round(now)) < 1e-9
        if whole and int(round(now)) % 2 == 0:
            self.src.challenge(now)
        if whole:
            for a in self.agents.values():
                if a.alive:
                    a.peers.probe(now)
            self.net.deliver(self.agents)
            self.net.deliver(self.agents)     # the answers
            for a in self.agents.values():
                if a.alive and a.name not in self.silent_to_engines:
                    self.src.handle_datagram(
                        a.beat(now, (self.src.challenges.newest,)),
                        ("192.0.2.9", 40000), now=now)
        self.src.check(now)
        self.fsm(now)

    def fsm(self, now):
        for ev in self.sink.events[self.taken:]:
            r = self.records[ev.name]
            self.records[ev.name], _ = machine.step(r, ev, POLICY)
        self.taken = len(self.sink.events)
        for name, r in self.records.items():
            self.records[name], _ = machine.step(
                r, Event(E.TICK, r.id, now, source="timer",
                         cluster_ok=True), POLICY)

    def nova_up(self, now):
        """Nova still says every host is up (a heartbeat seen at T0)."""
        for name, r in self.records.items():
            self.records[name], _ = machine.step(r, Event(
                E.HEARTBEAT_OK, r.id, now, source="reconciler",
                payload=ServiceReport(updated_at=1000.0, read_at=now)),
                POLICY)

    def run_until(self, end):
        while self.now < end - 1e-9:
            self.step()


def test_a_dead_host_is_fenced_on_its_peers_word_seconds_after():
    w = World()
    w.nova_up(T0)
    w.run_until(T0 + 10)
    assert all(r.state is S.ACTIVE for r in w.records.values())
    # compute-1 dies just after its beat at T0 + 10
    w.agents["compute-1"].alive = False
    died = w.now
    w.run_until(died + 3.5)
    r = w.records["compute-1"]
    assert r.state is S.SUSPECT and r.peers_watching == 3
    w.run_until(died + 6)
    r = w.records["compute-1"]
    assert r.state is S.FENCING, r
    assert (r.peers_unheard, r.peers_heard) == (3, 0)
    # long before Nova owed a heartbeat (T0 + 10 + 1) and before the
    # 10 s grace period
    assert r.since <= died + 5.5
    kinds = [e.kind for e in w.sink.events if e.name == "compute-1"]
    assert E.AGENT_SILENT in kinds
    assert all(w.records[n].state is S.ACTIVE for n in NAMES[1:])


def test_a_host_cut_off_from_the_engines_only_is_not_fenced_on_peers():
    w = World()
    w.nova_up(T0)
    w.run_until(T0 + 10)
    w.silent_to_engines.add("compute-1")   # its peers still hear it
    w.run_until(T0 + 19)
    r = w.records["compute-1"]
    assert r.state is S.SUSPECT
    assert (r.peers_unheard, r.peers_heard) == (0, 3)
    assert not machine.agent.corroborated(r, POLICY)


def test_a_host_cut_off_from_everyone_alive_is_fenced_on_its_peers_word():
    """What an attacker dropping its datagrams achieves: a power-off of
    a live host (the fencing), never more."""
    w = World()
    w.nova_up(T0)
    w.run_until(T0 + 10)
    w.silent_to_engines.add("compute-1")
    w.net.cut.add("compute-1")
    w.run_until(T0 + 16)
    assert w.records["compute-1"].state is S.FENCING


def test_the_engines_options_reach_the_policy():
    from instanceha import conf as ih_conf
    conf = ih_conf.make({"agent": {"peer_witnesses": 3,
                                   "peer_corroborated_grace": 1.5}})
    p = machine.Policy.from_conf(conf)
    assert (p.peer_witnesses, p.peer_grace) == (3, 1.5)
    p = machine.Policy.from_conf(ih_conf.make({}))
    assert (p.peer_witnesses, p.peer_grace) == (2, 3.0)


def test_the_engine_powers_off_then_evacuates_on_its_peers_word():
    """The real engine (fake Nova and BMC): the peers' word arrives in
    the silence, fencing starts at once, the host is powered off before
    anything is evacuated."""
    import dataclasses

    from instanceha.events import AgentReport, AgentSilence
    from tests.unit.test_engine import World

    w = World(hosts=3, servers=1)
    w.engine.policy = dataclasses.replace(
        w.engine.policy, grace_period=60.0, nova_report_interval=60.0,
        peer_witnesses=2, peer_grace=3.0)
    w.pass_()
    rec = w.engine.find("compute-1")
    w.engine.submit(Event(E.AGENT_BEATING, rec.id, w.clock(),
                          name="compute-1", source="agent",
                          payload=AgentReport(paths=("mgmt",), boot_id="b",
                                              last_beat_at=w.clock(),
                                              compute=True)))
    w.drain()
    w.compute.kill("compute-1")
    last = w.clock()
    w.clock.advance(3.0)
    w.engine.submit(Event(E.AGENT_SILENT, rec.id, w.clock(),
                          name="compute-1", source="agent",
                          payload=AgentSilence(last_beat_at=last,
                                               paths=("mgmt",),
                                               peers_watching=3)))
    w.drain()
    assert w.state("compute-1")[0] == "suspect"
    assert w.fencer.powered_off == []
    w.clock.advance(1.0)
    w.engine.submit(Event(E.AGENT_PEERS, rec.id, w.clock(),
                          name="compute-1", source="agent",
                          payload=AgentSilence(last_beat_at=last,
                                               paths=("mgmt",),
                                               peers_unheard=3,
                                               peers_watching=3)))
    w.drain()
    assert w.fencer.powered_off == ["compute-1"]
    assert w.state("compute-1")[0] in ("fencing", "fenced", "evacuating",
                                       "evacuated")
