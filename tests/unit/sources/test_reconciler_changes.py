"""The reconciler hands the engine only what changed between its full
passes ([detection] full_report_interval): at thousands of hosts most rows
of a pass say nothing new, and each event costs the engine a step."""

from instanceha import conf as conf_pkg
from instanceha.events import EventKind as E
from instanceha.sources.reconciler import Reconciler
from tests.unit.fakes import Clock
from tests.unit.test_reconciler import SkewedNova


class Rig:
    def __init__(self, full=60.0, hosts=4):
        self.clock = Clock()
        self.nova = SkewedNova(self.clock, 0.0, hosts)
        self.events = []
        self.watched = (set(), set())
        conf = conf_pkg.make({"detection": {
            "delta": 10, "full_report_interval": full}})
        self.rec = Reconciler(conf, self.nova, self.events.append,
                              self.clock,
                              wants_every_report=lambda: self.watched)

    def pass_(self, seconds=1.0):
        self.clock.advance(seconds)
        del self.events[:]
        self.rec.run_once()
        return {e.name: e.kind for e in self.events}


def test_quiet_hosts_are_handed_over_only_at_full_passes():
    r = Rig(full=30.0)
    assert set(r.pass_()) == {"c0", "c1", "c2", "c3"}   # the first: full
    for _ in range(20):
        assert r.pass_() == {}                          # heartbeats only
    assert r.rec.health()["last_pass_sent"] == 0
    for _ in range(9):
        assert r.pass_() == {}
    out = r.pass_()
    # 30 s after the last full pass, every row again (a lost event, a
    # restarted engine's record: nothing stays unsaid for long).
    assert set(out) == {"c0", "c1", "c2", "c3"}


def test_a_changed_verdict_is_handed_over_at_once():
    r = Rig()
    r.pass_()
    r.nova.rows["c1"]["alive"] = False
    seen = []
    for _ in range(12):
        seen.append(r.pass_())
    lost = [out for out in seen if out]
    assert lost[0] == {"c1": E.HEARTBEAT_LOST}
    # Lost once: then the engine's record of it is no longer quiet, and
    # its watcher (the engine) asks for its rows; here nobody asks.
    assert len(lost) == 1
    # An operator disables c2: its status changed, so its row goes.
    r.nova.rows["c2"]["status"] = "disabled"
    r.nova.rows["c2"]["disabled_reason"] = "kernel update"
    assert r.pass_() == {"c2": E.HEARTBEAT_OK}
    r.nova.rows["c3"]["forced_down"] = True
    r.nova.rows["c3"]["disabled_reason"] = "rack power"
    assert r.pass_() == {"c3": E.FORCED_DOWN}


def test_hosts_the_engine_watches_get_every_row():
    r = Rig()
    r.pass_()
    r.watched = ({"u2"}, {"c3"})      # by service id, and by host name
    for _ in range(5):
        assert set(r.pass_()) == {"c2", "c3"}


def test_zero_hands_over_every_row_at_every_pass():
    r = Rig(full=0.0)
    for _ in range(5):
        assert set(r.pass_()) == {"c0", "c1", "c2", "c3"}


def test_without_a_watcher_every_row_at_every_pass():
    r = Rig()
    r.rec._wants_every = None
    for _ in range(3):
        assert set(r.pass_()) == {"c0", "c1", "c2", "c3"}
