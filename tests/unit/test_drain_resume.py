"""A restarted engine continues a drain instead of counting afresh (issue
34, part 4): the attempts per server, the servers given up and when the
next pass is due are journalled (Journal.drain_saved) and read back. The
world after each step, against the unit fake of Nova; the restart is a
new engine and context (nothing in memory kept) on the same journal."""

from instanceha.engine import drain as drain_mod
from instanceha.engine.engine import Context, Engine
from instanceha.engine.passes import Requeue
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


# -- cold moves: found and confirmed after a restart -------------------------

COLD = "compute-0-vm-1"


class Killed(BaseException):
    """SIGKILL of the engine at this point (nothing after it runs)."""


def _cold_world():
    """compute-0's vm-0 running (a live migration), vm-1 stopped (a cold
    migration, then its confirm); a drain asked."""
    w = World(hosts=3, servers=2)
    w.compute.report_capacity = True
    w.compute.servers[COLD].update(status="SHUTOFF", vm_state="stopped")
    w.pass_()
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_DRAIN, rec.id, w.clock(),
                          name="compute-0", source="operator",
                          payload=DrainRequest()))
    return w


def _killed_at_cold_request(w, sent=True, forget=False):
    """Run the drain until the engine dies at vm-1's cold migration
    request: right after it reached Nova (``sent``) or right before.
    ``forget``: the journal's row then lacks the move (a move whose
    journal write was lost)."""
    real = w.compute.cold_migrate

    def cold_migrate(sid):
        if sent:
            real(sid)
        if forget:
            rec = w.engine.find("compute-0")
            row = w.journal.drain_run(rec.id, rec.since)
            state = dict(row["state"], cold=[])
            w.journal.drain_saved(rec.id, rec.name, rec.since, w.clock(),
                                  row["started_at"], state,
                                  next_pass_at=row["next_pass_at"])
        raise Killed()
    w.compute.cold_migrate = cold_migrate
    try:
        _until(w, "the kill", lambda: False, passes=50)
    except Killed:
        pass
    else:
        raise AssertionError("the cold migration was never asked")
    del w.compute.cold_migrate
    assert w.compute.servers[COLD]["status"] == (
        "VERIFY_RESIZE" if sent else "SHUTOFF")


def _calls(w, what, sid=COLD):
    return [c for c in w.compute.move_calls if c[:2] == (what, sid)]


def _drained(w):
    _until(w, "the drain's end", lambda: w.state("compute-0")[0]
           == "maintenance", passes=60)
    v = w.compute.servers[COLD]
    assert (v["host"], v["status"]) != ("compute-0", "SHUTOFF"), v
    assert v["status"] == "SHUTOFF" and v["vm_state"] == "stopped", v
    assert "2/2 servers moved" in w.state("compute-0")[1]


def test_a_cold_move_asked_before_a_kill_is_confirmed_after_the_restart():
    """Journalled as to confirm before it is asked: the restarted drain
    confirms it, once. (Before: the server, in VERIFY_RESIZE on its
    destination and off the host's list, was counted moved and never
    confirmed.)"""
    w = _cold_world()
    _killed_at_cold_request(w)
    row = _row(w)
    assert row["state"]["cold"] == [COLD]
    assert row["state"]["attempts"][COLD] == 1
    _restart(w)
    _drained(w)
    assert len(_calls(w, "cold_migrate")) == 1
    assert len(_calls(w, "confirm_resize")) == 1


def test_a_cold_move_the_journal_missed_is_found_in_novas_records():
    """Level-triggered: a finished cold migration of one of the drain's
    servers from the host is confirmed though the journal lost it."""
    w = _cold_world()
    _killed_at_cold_request(w, forget=True)
    assert _row(w)["state"]["cold"] == []
    _restart(w)
    _drained(w)
    assert len(_calls(w, "cold_migrate")) == 1
    assert len(_calls(w, "confirm_resize")) == 1


def test_a_cold_move_journalled_but_never_sent_is_sent_after_the_restart():
    w = _cold_world()
    _killed_at_cold_request(w, sent=False)
    assert _row(w)["state"]["cold"] == [COLD]
    _restart(w)
    _drained(w)
    assert len(_calls(w, "cold_migrate")) == 1        # the real one
    assert len(_calls(w, "confirm_resize")) == 1
    assert _row_ended(w)["state"]["attempts"][COLD] == 2


def _row_ended(w):
    rec = w.engine.find("compute-0")
    return w.journal.drain_runs(rec.id)[-1]


def test_a_drain_ended_before_its_result_was_journalled_counts_every_server():
    """Killed between the journal's end of the drain and its result: the
    restarted drain's summary counts the servers moved before the kill
    (before: "0/0 servers moved", a drain counted afresh)."""
    w = _cold_world()
    real = w.journal.drain_ended

    def drain_ended(host_id, at):
        real(host_id, at)
        raise Killed()
    w.journal.drain_ended = drain_ended
    try:
        _until(w, "the kill", lambda: False, passes=50)
    except Killed:
        pass
    del w.journal.drain_ended
    assert w.state("compute-0")[0] == "draining"
    _restart(w)
    _drained(w)
    assert len(_calls(w, "confirm_resize")) == 1


def test_a_stopped_server_whose_cold_moves_fail_is_given_up_the_drain_ends():
    """Nova accepts each cold migration and fails it (no destination): the
    server stays SHUTOFF on the host with no task. It is tried
    stuck_retries + 1 times, given up, and the drain ends; it is not
    followed as a move under way for ever."""
    w = _cold_world()
    w.conf.set_override("stuck_retries", 1, "drain")
    real = w.compute._move_target
    w.compute._move_target = lambda host: (
        None if w.compute.move_calls
        and w.compute.move_calls[-1][:2] == ("cold_migrate", COLD)
        else real(host))
    _until(w, "the drain's end", lambda: w.state("compute-0")[0]
           == "maintenance", passes=60)
    assert len(_calls(w, "cold_migrate")) == 2
    assert w.compute.servers[COLD]["host"] == "compute-0"
    assert "not migratable: %s (cold migration failed 2 times)" % COLD \
        in w.state("compute-0")[1]


def test_a_cold_move_being_confirmed_is_not_confirmed_again():
    """Nova takes a while to confirm (its record 'confirming', the server
    still VERIFY_RESIZE): the drain asks once, and ends once it is
    done."""
    w = _cold_world()
    real = w.compute.confirm_resize
    held = []

    def confirm_resize(sid):
        real(sid)
        m = next(m for m in w.compute.moves if m["server"] == sid
                 and m["type"] == "migration")
        m["status"] = "confirming"
        w.compute.servers[sid].update(vm_state="resized",
                                      status="VERIFY_RESIZE")
        held.append(m)
    w.compute.confirm_resize = confirm_resize
    _until(w, "the confirm", lambda: held, passes=50)
    for _ in range(10):
        w.pass_()
    assert len(_calls(w, "confirm_resize")) == 1
    assert w.state("compute-0")[0] == "draining"
    held[0]["status"] = "confirmed"
    w.compute.servers[COLD].update(vm_state="stopped", status="SHUTOFF")
    _drained(w)
    assert len(_calls(w, "confirm_resize")) == 1
