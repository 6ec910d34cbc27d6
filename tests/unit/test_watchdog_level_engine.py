"""A host fenced through its watchdog level, end to end in the engine
(issue 37): status and history say "self-fenced by watchdog, assumed at
<time>", the condemnation is a journalled step of its own, written before
the pill leaves, and it is lifted once the host is back and its service
cleaned up, so that the returning host's agent is answered again and
keeps feeding its watchdog. The heartbeat listener is the real one, on a
fake wire; clocks are fake; nothing sleeps."""

import datetime

from instanceha import conf as ih_conf
from instanceha.agent import selffence
from instanceha.drivers.fencing import watchdog as wd
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.heartbeat import challenge
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import Sink
from tests.unit.test_engine import World

ISO, WDT, MARGIN = 20.0, 30, 10.0
NONCE = b"w" * 16


class Wire:
    def __init__(self):
        self.sent = []

    def __call__(self, via, data, address):
        self.sent.append((data, address))


def address(host):
    return ("192.0.2.%d" % (10 + int(host.rsplit("-", 1)[1])), 4001)


def decoded(data):
    return protocol.decode_signed(data, helpers.KEYRING, {
        protocol.CHALLENGE: challenge.read_body})[0]


class FakeDevice:
    """The watchdog device as the agent sees it: armed, fed or not."""
    armed = True
    timeout = WDT

    def __init__(self):
        self.fed = 0

    def feed(self):
        self.fed += 1


def no_sleep(seconds):
    raise AssertionError("the engine's fencing slept %.1f s in a worker: "
                         "its wait must be a requeue" % seconds)


def _world():
    w = World(refuse=("compute-1",))            # its BMC refuses
    wire = Wire()
    hosts = w.compute.services
    src = heartbeat.HeartbeatSource(
        ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}}),
        Sink(), w.clock, lambda: [(s["id"], n) for n, s in hosts.items()],
        keyring=helpers.KEYRING, sendto=wire, acting=lambda: True,
        monotonic=w.clock)
    src.refresh(w.clock())
    src.challenge(w.clock())
    watchdog = wd.WatchdogDriver(
        ih_conf.make({"fencing": {"watchdog_margin": MARGIN}}), src,
        sleep=no_sleep, wall=w.clock)
    drivers = {"fake": w.fencer, "watchdog": watchdog}
    w.ctx.fencer = drivers.__getitem__
    w.ctx.inventory["compute-1"] = BMC(
        host="compute-1", driver="fake", address="bmc-compute-1",
        fallbacks=(BMC(host="compute-1", driver="watchdog"),),
        grouping=(1, 1))
    return w, src, wire


def beat(src, host, seq):
    """An armed watchdog's beat of ``host``, echoing the engine's nonce."""
    data = protocol.encode_beat(helpers.beat(
        host=host, seq=seq, sent_at=src._clock(),
        echoes=(src.challenges.newest,),
        watchdog=protocol.WatchdogReport(protocol.WATCHDOG_ARMED, WDT, ISO,
                                         NONCE, (), ())), helpers.KEY)
    src.handle_datagram(data, address(host), now=src._clock())


def test_watchdog_level_status_journal_and_lift_at_putback():
    w, src, wire = _world()
    w.pass_()
    beat(src, "compute-1", 1)
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated", passes=120)
    rec = w.engine.find("compute-1")
    assert (rec.proven_by, rec.fenced_level) == ("power", 2)

    # 1. The wording: no BMC reported anything; the watchdog's deadline,
    # as a time, is what proved the host dead.
    state = src.watchdog_state("compute-1")
    deadline = state.published_at + ISO + WDT + MARGIN
    when = datetime.datetime.fromtimestamp(
        deadline, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    how = "self-fenced by watchdog, assumed at " + when
    fenced = [t for t in w.journal.transitions()
              if t["host_name"] == "compute-1" and t["dst"] == "fenced"][-1]
    assert fenced["reason"].startswith(
        "proven dead, not by a power-off: fenced by level 2 (watchdog): "
        + how + " after level 1 (fake bmc-compute-1) failed"), \
        fenced["reason"]
    assert "reports power off" not in fenced["reason"]
    host = next(h for h in w.engine.snapshot()["hosts"]
                if h["name"] == "compute-1")
    assert host["fenced_by"] == {"level": 2, "proof": "power",
                                 "protects": [], "how": how}
    from instanceha.cmd import status as status_cmd
    text = status_cmd.format_status(w.engine.snapshot(), now=w.clock())
    line = next(x for x in text.splitlines() if x.startswith("compute-1"))
    assert line.endswith("[fenced by level 2: %s]" % how), line

    # 2. The condemnation: its own journal row, started before the pill
    # left (at the condemnation's time or before), inside the fence
    # attempt, finished saying what came of it.
    actions = [a for a in w.journal.actions()
               if a["host_name"] == "compute-1"]
    kinds = [a["kind"] for a in actions]
    assert kinds.index("fence") < kinds.index("condemn"), kinds
    condemn = next(a for a in actions if a["kind"] == "condemn")
    fence = next(a for a in actions if a["kind"] == "fence")
    assert condemn["started_at"] <= state.condemned_at
    assert condemn["outcome"] == "sent"
    assert condemn["detail"].startswith(
        "poison pill sent to the host and its peers; the host was fenced: "
        "fenced by level 2 (watchdog): " + how), condemn["detail"]
    assert fence["started_at"] <= condemn["started_at"] \
        <= condemn["finished_at"] <= fence["finished_at"]
    assert src.watchdogs.condemned("compute-1")

    # The host boots again (a new agent run: its condemnation from the
    # last run is forgotten by the agent itself) and cleans up.
    w.compute.boot("compute-1")
    for _ in range(10):
        w.pass_()
        beat(src, "compute-1", 2)
    assert w.state("compute-1")[0] == "active"
    assert not src.watchdogs.condemned("compute-1")
    assert src.watchdogs.pill("compute-1") is None
    put_back = [t for t in w.journal.transitions()
                if t["host_name"] == "compute-1"
                and t["event"] == "cleanup_confirmed"][-1]
    assert "its watchdog condemnation lifted" in put_back["reason"]

    # Its agent is answered again (no pill) and keeps feeding.
    device = FakeDevice()
    agent = selffence.SelfFence(device, ISO)
    for _ in range(5):
        w.clock.advance(1.0)
        wire.sent.clear()
        src.challenge(w.clock())
        mine = [decoded(d) for d, a in wire.sent
                if a == address("compute-1")]
        assert mine, "no answer to compute-1"
        for ch in mine:
            assert not ch.condemned, "a pill to a host put back"
            if ch.answer == NONCE:
                agent.engine_answered(w.clock())
        assert agent.tick(w.clock()).feed
    assert device.fed == 5


def test_the_watchdog_wait_is_a_requeue_condemning_once():
    """Issue 37: no worker sleeps until the deadline; the fence action
    requeues itself until then, and its later passes only read: one
    condemnation per attempt, its deadline never restarted."""
    w, src, _ = _world()
    condemned = []
    real = src.condemn

    def counted(host, reason):
        at = real(host, reason)
        condemned.append(at)
        return at
    src.condemn = counted
    w.pass_()
    beat(src, "compute-1", 1)
    w.compute.kill("compute-1")
    w.until("compute-1", "fencing")
    w.pass_()
    assert len(condemned) == 1
    first = condemned[0]
    deadline = first + ISO + WDT + MARGIN
    # Still fencing while the deadline has not passed, each pass a look
    # (no sleep: no_sleep would fail it).
    for _ in range(20):
        w.pass_()
    assert w.state("compute-1")[0] == "fencing"
    w.until("compute-1", "evacuated", passes=120)
    assert condemned == [first]
    assert src.watchdog_state("compute-1").condemned_at == first
    fenced_at = w.engine.find("compute-1").fenced_at
    # proven at the deadline (the pass due then), not before
    assert deadline <= fenced_at < deadline + 2.0
