"""Issue 37 part 0: a host whose heartbeat goes stale between two passes
is read again alone at that moment, not a whole poll later; the reads
stay few and bounded, and they judge a row as a pass does.

The reconciler's loop is driven by hand on an injected clock (its
``_run`` / ``_wait``, as its Periodic thread calls them): nothing
sleeps."""

from instanceha import conf as conf_pkg
from instanceha.drivers.compute.nova_clock import Estimate
from instanceha.events import EventKind as E
from instanceha.sources import rereads
from instanceha.sources.reconciler import Reconciler
from tests.unit.fakes import Clock
from tests.unit.test_reconciler import SkewedNova

BEAT = 1_000_000.0          # a heartbeat of every host, Nova's clock
DELTA, POLL = 30.0, 10.0


class LaggingClock:
    """Nova's clock as estimated, ``lag`` seconds behind the true one
    (this node's clock is Nova's: the true offset is 0)."""

    def __init__(self, lag):
        self.lag = lag

    def observe(self, services, read_start, read_end):
        pass

    def estimate(self):
        return Estimate(offset=-self.lag, tolerance=self.lag, ahead=0.0,
                        behind=0.0, rows_off=0, rows=3)

    def now(self, mono_now):
        return mono_now - self.lag


class Nova(SkewedNova):
    """Every live host beats each 10 s (Nova's report_interval); reads
    counted: ``lists`` whole ones, ``reads`` of one host each."""

    def __init__(self, clock, lag, hosts=3):
        super().__init__(clock, 0.0, hosts, report_interval=10.0)
        self.nova_clock = LaggingClock(lag)
        self.lists = 0
        self.reads = []
        self.fail_reads = False

    def list_services(self):
        self.lists += 1
        return super().list_services()

    def service_of(self, host):
        if self.fail_reads:
            raise RuntimeError("Nova answered 503")
        self.reads.append(host)
        return next((s for s in super().list_services() if s.host == host),
                    None)


class Rig:
    def __init__(self, lag=1.0, hosts=3, first=0.2, **detection):
        self.clock = Clock(BEAT + first)
        self.nova = Nova(self.clock, lag, hosts)
        self.events = []
        opts = {"delta": DELTA, "poll_interval": POLL}
        opts.update(detection)
        self.conf = conf_pkg.make({"detection": opts})
        self.rec = Reconciler(self.conf, self.nova, self.events.append,
                              self.clock)
        # Passes exactly a poll apart (no dither): a pass lands where the
        # test puts it.
        self.rec._next_wait = lambda: POLL

    def lost_at(self, host, until):
        """Run the loop as its thread would, until ``host`` is reported
        lost (returns when, on the clock) or the clock passes ``until``."""
        while self.clock() <= until:
            self.rec._run()
            for ev in self.events:
                if ev.name == host and ev.kind is E.HEARTBEAT_LOST:
                    return ev.at
            self.clock.advance(self.rec._wait())
        return None


def test_a_pass_just_after_the_stale_moment_with_a_lagging_estimate():
    """The pass comes 0.2 s after c1's heartbeat went stale, while the
    estimate of Nova's clock lags 1 s: the pass still calls it fresh.
    The host is read again alone at the moment the estimate calls it
    stale (the lag plus a margin after the true moment), not at the
    next pass 10 s later."""
    r = Rig(lag=1.0, first=0.2)
    r.rec._run()                        # the pass at BEAT + 0.2
    r.nova.rows["c1"]["alive"] = False  # dies: its last beat was BEAT
    stale = BEAT + DELTA                # the true moment it goes stale
    at = r.lost_at("c1", stale + 3 * POLL)
    assert at is not None
    # The passes come at BEAT + 0.2 + k * POLL: one at stale + 0.2, which
    # calls it fresh (estimated age 29.2 s); without the re-read the
    # next pass, at stale + 10.2, would be the first to call it lost.
    assert at - stale <= 1.0 + 0.2, at - stale
    assert at - stale >= 1.0            # never before the estimate says so
    # c1 alone was read: at the earliest moment it may have gone stale
    # (the estimate's uncertainty allowed for: still fresh on it), then
    # at the moment the estimate calls it stale. The live hosts were
    # never read on their own.
    assert r.nova.reads == ["c1", "c1"]
    assert r.rec.health()["rereads"] == 2
    lost = [e for e in r.events if e.kind is E.HEARTBEAT_LOST]
    assert [e.name for e in lost] == ["c1"]
    assert "Nova still says up" in lost[0].reason
    assert lost[0].payload.updated_at == BEAT


def test_an_estimate_sharpened_between_passes_is_used_at_once():
    """The control-plane monitor's reads pin Nova's clock closer between
    two passes: the first re-read, at the earliest moment the heartbeat
    may be stale, already sees it, before the pass that comes 0.2 s
    after the true moment."""
    r = Rig(lag=1.0, first=0.2)
    r.rec._run()
    r.nova.rows["c1"]["alive"] = False
    stale = BEAT + DELTA
    while r.clock() < stale - 5:
        r.rec._run()
        r.clock.advance(r.rec._wait())
    r.nova.nova_clock.lag = 0.0         # sharpened after the last pass
    at = r.lost_at("c1", stale + 3 * POLL)
    assert at is not None and 0 < at - stale <= 0.1, at - stale
    assert r.nova.reads == ["c1"]


def test_without_the_reread_the_host_waits_for_the_next_pass():
    """[detection] stale_reread off: the old path, a whole poll later."""
    r = Rig(lag=1.0, first=0.2, stale_reread=False)
    r.rec._run()
    r.nova.rows["c1"]["alive"] = False
    at = r.lost_at("c1", BEAT + DELTA + 3 * POLL)
    assert at == BEAT + 0.2 + 4 * POLL
    assert r.nova.reads == []


def test_live_hosts_are_never_read_alone():
    r = Rig(lag=1.0)
    for _ in range(40):
        r.rec._run()
        r.clock.advance(r.rec._wait())
    assert r.nova.reads == []
    assert not [e for e in r.events if e.kind is not E.HEARTBEAT_OK]


def test_a_host_that_reports_again_is_not_reported_lost():
    """Its heartbeat was only late: the re-read finds it fresh and says
    nothing; it is not read again before the next pass."""
    r = Rig(lag=1.0, first=0.2)
    r.rec._run()
    r.nova.rows["c1"]["alive"] = False
    while not r.rec._rereads.next_at():
        r.clock.advance(r.rec._wait())
        r.rec._run()
    r.nova.rows["c1"]["alive"] = True   # its late heartbeat is written
    r.nova.rows["c1"]["updated_at"] = r.clock()
    r.clock.advance(r.rec._wait())
    del r.events[:]
    r.rec._run()
    assert r.nova.reads == ["c1"]
    assert r.events == []
    assert r.rec._rereads.next_at() is None


def test_rereads_are_bounded_and_the_rest_wait_for_the_pass():
    r = Rig(lag=1.0, hosts=6, first=0.2, stale_reread_limit=2)
    r.rec._run()
    for h in ("c1", "c2", "c3", "c4"):
        r.nova.rows[h]["alive"] = False
    stale = BEAT + DELTA
    seen = {}
    while r.clock() <= stale + 2 * POLL and len(seen) < 4:
        r.rec._run()
        for ev in r.events:
            if ev.kind is E.HEARTBEAT_LOST:
                seen.setdefault(ev.name, ev.at)
        r.clock.advance(r.rec._wait())
    assert len(set(r.nova.reads)) == 2 and len(r.nova.reads) <= 4
    early = [h for h, at in seen.items() if at - stale <= 1.2]
    late = [h for h, at in seen.items() if at == BEAT + 0.2 + 4 * POLL]
    assert len(early) == 2 and len(late) == 2, seen


def test_a_failed_reread_leaves_the_host_to_the_next_pass():
    r = Rig(lag=1.0, first=0.2)
    r.rec._run()
    r.nova.rows["c1"]["alive"] = False
    r.nova.fail_reads = True
    at = r.lost_at("c1", BEAT + DELTA + 3 * POLL)
    assert at == BEAT + 0.2 + 4 * POLL
    # the early read, then the one at the estimate's moment
    assert r.rec.health()["reread_errors"] == 2


def test_stale_moment_is_the_estimate_of_nova_s_clock_plus_a_margin():
    # offset: Nova's now minus this node's monotonic now
    assert rereads.stale_moment(1000.0, 30.0, 500.0) \
        == 1000.0 + 30.0 - 500.0 + rereads.MARGIN
    plan = rereads.Plan(limit=2)
    plan.replace([rereads.Reread(5.0, "a", "a", 0.0),
                  rereads.Reread(3.0, "b", "b", 0.0),
                  rereads.Reread(4.0, "c", "c", 0.0)])
    assert plan.left_out == 1 and plan.next_at() == 3.0
    assert [r.host for r in plan.take_due(4.5)] == ["b", "c"]
    assert plan.next_at() is None
    # The first read allows for the estimate's uncertainty, at most EARLY.
    assert rereads.first_moment(1000.0, 30.0, 500.0, 1.5) \
        == rereads.stale_moment(1000.0, 30.0, 501.5)
    assert rereads.first_moment(1000.0, 30.0, 500.0, 60.0) \
        == rereads.stale_moment(1000.0, 30.0, 500.0 + rereads.EARLY)
