"""Watchdog self-fencing, the whole loop in one process (issue 37,
sections 2 and 3): agents (the real Guardian, SelfFence, Peers, test
watchdog devices played by FileHardware), engines (the real heartbeat
listener and its book, the real ``watchdog`` fencing method), and a
network the test cuts at will. One fake clock for everyone; nothing
sleeps. Each case of doc/safety.md, rule 25, has a test here."""

from instanceha import conf as ih_conf
from instanceha.agent import guardian as guardian_mod
from instanceha.agent import peers as peers_mod
from instanceha.agent import selffence as sf
from instanceha.agent import watchdog
from instanceha.drivers.fencing import watchdog as wd_fencing
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.heartbeat import challenge
from instanceha.heartbeat import keys
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.agent.watchdog_hw import FileHardware
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import FakeClock, Sink

ISO = 10.0          # isolation timeout
WDT = 5             # watchdog timeout
CHECK = 1.0         # the agents' check interval (and the step)
MARGIN = 3.0
T0 = 5000.0
PEER_KEYRING = keys.Keyring(keys.Key.from_secret(b"p" * 40))


class Engine:
    def __init__(self, name, clock, hosts, acting=True):
        self.name = name
        self.clock = clock
        self.up = True
        self.sent = []
        conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"],
                                       "challenge_interval": 2.0}})
        self.src = heartbeat.HeartbeatSource(
            conf, Sink(), lambda: T0 + clock(),
            lambda: [("id-" + h, h) for h in hosts],
            keyring=helpers.KEYRING,
            sendto=lambda via, data, address: self.sent.append(
                (data, address)),
            acting=lambda: acting, monotonic=clock)
        self.src.refresh(T0)
        self.src.challenge(T0)


class Host:
    def __init__(self, name, index, names, tmp_path, clock, net):
        self.name = name
        self.address = ("192.0.2.%d" % (10 + index), 4001)
        self.peer_address = ("192.0.2.%d" % (10 + index), 4002)
        self.hw = FileHardware(tmp_path / ("dev-%s" % name), timeout=WDT)
        self.guardian = guardian_mod.Guardian(
            watchdog.Device(self.hw.path, WDT), ISO, CHECK, name,
            helpers.KEYRING, peers=[n for n in names if n != name],
            monotonic=clock)
        self.peers = None
        self.net = net
        self.echoes = challenge.Echoes()
        self.seq = 0
        self.alive = True

    def connect(self, addresses):
        self.peers = peers_mod.Peers(
            self.name, [(n, a) for n, a in addresses.items()
                        if n != self.name],
            PEER_KEYRING, self.guardian, self.net.socket(self), self.clock)

    @property
    def clock(self):
        return self.net.clock


class Net:
    """Who hears whom: ``cut`` holds frozen pairs (a, b) of names (an
    engine's or a host's), both directions."""

    def __init__(self, clock):
        self.clock = clock
        self.cut = set()
        self.queue = []

    def link(self, a, b):
        return (a, b) not in self.cut and (b, a) not in self.cut

    def isolate(self, name, others):
        for other in others:
            self.cut.add((name, other))

    def socket(self, host):
        net = self

        class Sock:
            def sendto(self, data, address):
                net.queue.append((host, data, address))

            def setblocking(self, flag):
                pass

            def close(self):
                pass
        return Sock()


class Cloud:
    def __init__(self, tmp_path, count=5, engines=("engine-1",),
                 standby=()):
        self.clock = FakeClock(0.0)
        self.net = Net(self.clock)
        names = ["compute-%d" % i for i in range(1, count + 1)]
        self.hosts = {n: Host(n, i, names, tmp_path, self.clock, self.net)
                      for i, n in enumerate(names)}
        addresses = {n: h.peer_address for n, h in self.hosts.items()}
        for h in self.hosts.values():
            h.connect(addresses)
        self.engines = [Engine(e, self.clock, names) for e in engines] + [
            Engine(e, self.clock, names, acting=False) for e in standby]
        self.by_peer_address = {h.peer_address: h
                                for h in self.hosts.values()}
        self.by_address = {h.address: h for h in self.hosts.values()}
        self.decisions = []

    @property
    def resets(self):
        return sum(h.hw.resets for h in self.hosts.values())

    def step(self):
        now = self.clock()
        live = [h for h in self.hosts.values() if h.alive]
        for h in live:                                      # beats
            h.seq += 1
            data = protocol.encode_beat(helpers.beat(
                host=h.name, boot_id="b", seq=h.seq, sent_at=T0 + now,
                path="mgmt", echoes=h.echoes.current(now),
                watchdog=h.guardian.report(now)), helpers.KEY)
            for e in self.engines:
                if e.up and self.net.link(h.name, e.name):
                    e.src.handle_datagram(data, h.address, now=T0 + now)
        for e in self.engines:                              # answers
            if e.up and int(now) % 2 == 0:
                e.src.challenge(T0 + now)
            sent, e.sent = e.sent, []
            for data, address in sent:
                h = self.by_address.get(address)
                if h is None or not h.alive or not e.up \
                        or not self.net.link(h.name, e.name):
                    continue
                msg = protocol.decode_signed(data, helpers.KEYRING, {
                    protocol.CHALLENGE: challenge.read_body,
                    peer.RELAY: peer.read_relay})[0]
                if type(msg) is peer.Relay:
                    h.peers.keep_relay(msg)
                else:
                    h.echoes.heard(msg, now)
                    h.guardian.on_challenge(msg, data)
        for h in live:                                      # peers
            h.peers.probe(now)
        for _ in range(2):                  # probes, then their answers
            queue, self.net.queue = self.net.queue, []
            for frm, data, address in queue:
                to = self.by_peer_address[address]
                if to.alive and self.net.link(frm.name, to.name):
                    to.peers.handle(data, frm.peer_address)
        for h in live:                                      # feed
            d = h.guardian.tick(now)
            self.decisions.append((now, h.name, d))
        for h in live:
            if h.hw.poll(now):
                h.alive = False         # the watchdog reset it
        self.clock.advance(CHECK)

    def run(self, seconds):
        for _ in range(int(round(seconds / CHECK))):
            self.step()

    def reasons(self, host, since):
        return {d.reason for t, n, d in self.decisions
                if n == host and t >= since}

    def fence(self, host, engine=0):
        """The engine's watchdog method on ``host``, the cloud running
        while it waits; returns the time it counted the host dead."""
        conf = ih_conf.make({"fencing": {"watchdog_margin": MARGIN}})
        drv = wd_fencing.WatchdogDriver(conf, self.engines[engine].src,
                                        sleep=self.run_for)
        drv.power_off(BMC(host=host, driver="watchdog", address=""))
        return self.clock()

    def run_for(self, seconds):
        self.run(max(CHECK, seconds))


def test_engines_gone_for_ten_isolation_timeouts_no_host_resets(tmp_path):
    """Section 3: every engine stopped for 10x the isolation timeout,
    the peers hearing each other: 0 resets."""
    cloud = Cloud(tmp_path, count=5, engines=("engine-1", "engine-2"))
    cloud.run(20)
    assert cloud.resets == 0
    stopped = cloud.clock()
    for e in cloud.engines:
        e.up = False
    cloud.run(10 * ISO)
    assert cloud.resets == 0
    for h in cloud.hosts.values():
        assert cloud.reasons(h.name, stopped + ISO + CHECK) == {
            sf.ENGINES_GONE}
    # the engines come back: the hosts hear them again
    for e in cloud.engines:
        e.up = True
    cloud.run(5)
    assert cloud.reasons("compute-1", cloud.clock() - 2) == {sf.ENGINE}


def test_engines_cut_off_from_every_host_no_host_resets(tmp_path):
    cloud = Cloud(tmp_path, count=4)
    cloud.run(10)
    for h in cloud.hosts:
        cloud.net.isolate(h, ["engine-1"])
    cloud.run(10 * ISO)
    assert cloud.resets == 0


def test_host_cut_off_from_everyone_resets_before_the_engine_counts_it(
        tmp_path):
    cloud = Cloud(tmp_path, count=5)
    cloud.run(10)
    cut = cloud.clock()
    cloud.net.isolate("compute-1", ["engine-1"] + [
        h for h in cloud.hosts if h != "compute-1"])
    dead_at = cloud.fence("compute-1")
    x = cloud.hosts["compute-1"]
    assert x.hw.resets == 1 and x.hw.reset_at <= dead_at
    # it stopped feeding once isolated, and reset within the watchdog
    assert x.hw.reset_at <= cut + ISO + WDT + 2 * CHECK
    assert cloud.resets == 1
    assert cloud.reasons("compute-1", cut + ISO + CHECK) == {sf.ISOLATED}


def test_host_dead_is_counted_fenced_at_its_deadline(tmp_path):
    cloud = Cloud(tmp_path, count=3)
    cloud.run(10)
    last = cloud.clock() - CHECK
    cloud.hosts["compute-1"].alive = False          # power lost
    dead_at = cloud.fence("compute-1")
    # published at once (its 2 live peers ack within a round or two)
    assert last + ISO + WDT + MARGIN <= dead_at <= \
        last + ISO + WDT + MARGIN + 6 * CHECK
    assert cloud.resets == 0                        # nobody else


def test_host_cut_off_from_engines_but_hearing_peers_lives_until_condemned(
        tmp_path):
    cloud = Cloud(tmp_path, count=5)
    cloud.run(10)
    cut = cloud.clock()
    cloud.net.isolate("compute-1", ["engine-1"])
    cloud.run(3 * ISO)
    x = cloud.hosts["compute-1"]
    assert x.hw.resets == 0
    assert cloud.reasons("compute-1", cut + ISO + CHECK) == {
        sf.PEERS_HEAR_ENGINE}
    # the engine condemns it: the pill reaches it through its peers
    dead_at = cloud.fence("compute-1")
    assert x.hw.resets == 1 and x.hw.reset_at <= dead_at
    assert x.peers.counts["condemned"] >= 1      # a peer relayed the pill
    assert sf.CONDEMNED in cloud.reasons("compute-1", cut)
    assert cloud.resets == 1


def test_host_hearing_a_standby_replica_only_is_judged_by_its_peers(
        tmp_path):
    """It hears engine-2 (a standby) but not engine-1 (acting): the
    standby's answers keep nothing alive; the peers, which hear the
    acting engine, do, until it condemns the host."""
    cloud = Cloud(tmp_path, count=5, engines=("engine-1",),
                  standby=("engine-2",))
    cloud.run(10)
    cut = cloud.clock()
    cloud.net.isolate("compute-1", ["engine-1"])
    cloud.run(2 * ISO)
    assert cloud.resets == 0
    assert cloud.reasons("compute-1", cut + ISO + CHECK) == {
        sf.PEERS_HEAR_ENGINE}
    dead_at = cloud.fence("compute-1")
    x = cloud.hosts["compute-1"]
    assert x.hw.resets == 1 and x.hw.reset_at <= dead_at
    assert cloud.resets == 1


def test_host_cut_off_from_the_acting_engine_and_its_peers_hearing_only_a_standby_resets(tmp_path):
    cloud = Cloud(tmp_path, count=3, engines=("engine-1",),
                  standby=("engine-2",))
    cloud.run(10)
    cloud.net.isolate("compute-1", ["engine-1", "compute-2", "compute-3"])
    dead_at = cloud.fence("compute-1")
    x = cloud.hosts["compute-1"]
    assert x.hw.resets == 1 and x.hw.reset_at <= dead_at


def test_orderly_stop_is_not_counted_on(tmp_path):
    cloud = Cloud(tmp_path, count=3)
    cloud.run(5)
    x = cloud.hosts["compute-1"]
    x.guardian.disarm()
    cloud.run(2)                 # the disarmed beat reaches the engine
    x.alive = False
    state = cloud.engines[0].src.watchdog_state("compute-1")
    assert not state.armed and state.state == protocol.WATCHDOG_DISARMED
    j = wd_fencing.deadline(state, 1e9, MARGIN)
    assert not j.dead and "disarmed" in j.why
    assert x.hw.resets == 0


def test_arms_at_the_first_answer_not_at_start(tmp_path):
    cloud = Cloud(tmp_path, count=3)
    cloud.step()
    assert all(h.guardian.device.armed for h in cloud.hosts.values())
    state = cloud.engines[0].src.watchdog_state("compute-1")
    assert state.state == protocol.WATCHDOG_NONE    # the first beat's
    cloud.run(2)
    assert cloud.engines[0].src.watchdog_state("compute-1").armed


def test_a_host_booting_alone_after_a_site_power_loss_never_reset_loops(
        tmp_path):
    """Engines and peers not up yet: the watchdog is not armed, so the
    host does not reset while it waits for them."""
    cloud = Cloud(tmp_path, count=3)
    for e in cloud.engines:
        e.up = False
    for name in ("compute-2", "compute-3"):
        cloud.hosts[name].alive = False      # still booting
    cloud.run(10 * ISO)
    x = cloud.hosts["compute-1"]
    assert not x.guardian.device.armed and cloud.resets == 0
    # the peers come up, the engines not yet: a majority hears no engine
    for name in ("compute-2", "compute-3"):
        cloud.hosts[name].alive = True
    cloud.run(3)
    assert all(h.guardian.device.armed for h in cloud.hosts.values())
    assert cloud.reasons("compute-1", cloud.clock() - 1) == {
        sf.ENGINES_GONE}
    cloud.run(10 * ISO)
    assert cloud.resets == 0
