"""A restarted engine continues a drain instead of counting afresh (issue
34, part 4): the attempts per server, the servers given up and when the
next pass is due are journalled (Journal.drain_saved) and read back. The
world after each step, against the unit fake of Nova; the restart is a
new engine and context (nothing in memory kept) on the same journal."""

from instanceha.engine import drain as drain_mod
from instanceha.engine.engine import Context, Engine
from instanceha.engine.evacuator import Requeue
from instanceha.events import DrainRequest, Event, EventKind as E
from instanceha.sources.reconciler import Reconciler
from tests.unit.test_engine import ClockBoard, World

STUCK = "compute-0-vm-1"


def _world():
    w = World(hosts=3, servers=2)
    w.compute.report_capacity = True
    w.conf.set_override("stuck_timeout", 10, "drain")
    w.conf.set_override("stuck_retries", 1, "drain")
    w.pass_()
    w.compute.stalled.add(STUCK)
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_DRAIN, rec.id, w.clock(),
                          name="compute-0", reason="kernel update",
                          source="operator", payload=DrainRequest()))
    return w


def _restart(w):
    """instanceha stopped and started again: a new context (its runs, the
    drains' carries, gone) and engine on the same journal and cloud."""
    w.ctx = Context(w.conf, w.compute, w.journal, w.ctx.inventory,
                    lambda name: w.fencer, w.clock, ClockBoard(w.clock))
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.reconciler = Reconciler(
        w.conf, w.compute, w.engine.submit, w.clock,
        on_capacity=w.engine.capacity_appeared,
        wants_every_report=w.engine.wants_every_report)
    assert w.engine.resume_from_journal() >= 1


def _asked(w, sid):
    return [c for c in w.compute.move_calls
            if c[0] == "live_migrate" and c[1] == sid]


def _row(w):
    rec = w.engine.find("compute-0")
    return w.journal.drain_run(rec.id, rec.since)


def _until(w, what, condition, passes=200):
    for _ in range(passes):
        if condition():
            return
        w.pass_()
    raise AssertionError("never: %s" % what)


def test_attempts_survive_a_restart_the_server_is_tried_no_more():
    """stuck_retries = 1: two live migrations of the stuck server in all,
    one before the restart (aborted as stuck) and one after, then it is
    given up; without the journal the restart allowed two more."""
    w = _world()
    _until(w, "the first migration aborted as stuck",
           lambda: _row(w) is not None
           and _row(w)["state"]["stuck"].get(STUCK) == 1)
    assert len(_asked(w, STUCK)) == 1
    assert _row(w)["state"]["attempts"][STUCK] == 1
    _restart(w)
    _until(w, "the drain's end", lambda: w.state("compute-0")[0]
           == "maintenance", passes=300)
    assert len(_asked(w, STUCK)) == 2
    state, reason = w.state("compute-0")
    assert "not migratable: %s (live migration failed 2 times)" % STUCK \
        in reason
    assert "1/2 servers moved" in reason
    rec = w.engine.find("compute-0")
    assert w.journal.drain_run(rec.id, rec.since) is None     # ended
    assert [r["ended_at"] is not None for r in w.journal.drain_runs(rec.id)] \
        == [True]


def test_a_server_given_up_stays_given_up_after_a_restart():
    w = _world()
    _until(w, "the stuck server given up",
           lambda: _row(w) is not None
           and STUCK in _row(w)["state"]["given_up"], passes=300)
    asked = len(_asked(w, STUCK))
    _restart(w)
    for _ in range(20):
        w.pass_()
    assert len(_asked(w, STUCK)) == asked
    assert "not migratable" in w.state("compute-0")[1]


def test_the_first_pass_after_a_restart_waits_for_the_journalled_time():
    w = _world()
    _until(w, "a migration in flight", lambda: _row(w) is not None
           and _row(w)["state"]["attempts"])
    rec = w.engine.find("compute-0")
    row = _row(w)
    due = w.clock() + 40.0
    w.journal.drain_saved(rec.id, rec.name, rec.since, w.clock(),
                          row["started_at"], row["state"], next_pass_at=due)
    _restart(w)
    calls = len(w.compute.move_calls)
    w.ctx.runs.clear()
    again = drain_mod.drain(w.ctx, w.engine.find("compute-0"))
    assert isinstance(again, Requeue)
    assert abs(again.after - 40.0) < 1e-6
    assert again.carry.attempts == row["state"]["attempts"]
    assert len(w.compute.move_calls) == calls       # nothing asked


def test_a_new_drain_of_the_same_host_counts_afresh():
    """The journal names a drain by when its host entered draining: a
    drain after a resume is another drain."""
    w = _world()
    _until(w, "a migration asked", lambda: _row(w) is not None
           and _row(w)["state"]["attempts"])
    old = w.engine.find("compute-0").since
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.until("compute-0", "active", passes=100)
    assert w.journal.drain_run(rec.id, old) is None     # ended
    w.engine.submit(Event(E.OPERATOR_DRAIN, rec.id, w.clock(),
                          name="compute-0", source="operator",
                          payload=DrainRequest()))
    w.pass_()
    new = w.engine.find("compute-0")
    assert new.since != old
    assert _row(w)["started_at"] >= new.since
