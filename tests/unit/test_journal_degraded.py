"""While journal writes fail, nothing is decided without being written,
status says the journal is degraded, and the work resumes when it
answers again: nothing is lost."""

from instanceha.cmd.main import format_status
from tests.unit.test_engine import World


def test_a_journal_outage_holds_decisions_and_is_reported_until_it_ends():
    w = World()
    w.pass_()
    real = w.journal.record
    w.journal.record = lambda *a, **k: (_ for _ in ()).throw(
        OSError("Lost connection to MySQL server during query"))
    w.compute.kill("compute-1")
    for _ in range(20):
        w.pass_()
    # Nothing decided without its journal row: still active, not fenced.
    assert w.state("compute-1")[0] == "active"
    assert w.fencer.powered_off == []
    snap = w.engine.snapshot()
    assert "Lost connection to MySQL" in snap["degraded"]["journal"]
    assert "DEGRADED journal: writes failing" in format_status(snap)
    w.journal.record = real
    for _ in range(90):
        w.pass_()
        if w.state("compute-1")[0] == "evacuated":
            break
    assert w.state("compute-1")[0] == "evacuated"
    assert w.engine.snapshot()["degraded"] == {}
    dsts = [t["dst"] for t in w.journal.transitions()
            if t["host_name"] == "compute-1"]
    assert dsts[:5] == ["suspect", "fencing", "fenced", "evacuating",
                        "evacuated"], dsts


def test_action_rows_left_open_by_a_stopped_process_are_closed_at_start():
    from instanceha.fsm.states import Action
    w = World()
    w.pass_()
    rec = w.engine.find("compute-1")
    open_id = w.journal.action_started(rec, Action.FENCE, w.clock())
    done_id = w.journal.action_started(rec, Action.ISOLATE, w.clock())
    w.journal.action_finished(done_id, w.clock(), "isolate_ok", "x")
    w.engine.resume_from_journal()
    rows = {a["id"]: a for a in w.journal.actions()}
    assert rows[open_id]["outcome"] == "interrupted"
    assert rows[open_id]["finished_at"] is not None
    assert rows[done_id]["outcome"] == "isolate_ok"
