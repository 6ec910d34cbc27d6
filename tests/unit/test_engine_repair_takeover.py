"""Issue 34 item 1: after a takeover (or a restart), a repair action that
the previous process journalled as started but never sent no longer
holds its server for action_timeout + min_uptime. The member acting now
asks Nova (the server's task, its host, its instance actions) whether
the request went out; when it did not, the row is closed ``not_sent``
(no attempt) and the action is sent at once. A request Nova did record,
or one Nova cannot tell about, is followed as before.

Against the unit fake of Nova (which records an instance action for each
repair request it accepts, as Nova's API does) on a fake clock: the
server's state and the journal's rows after each step."""

from instanceha.drivers.compute.base import ComputeError
from instanceha.engine import repair_pass
from tests.unit.test_engine_repair import SID, _break, _rows, _settle, _world

#: [instance_repair] of these tests: 30 s to come up, 10 s up to count
TIMEOUT, UPTIME = 30, 10


def _stopped(w, sid=SID):
    """The server's guest went off and Nova stopped it."""
    w.compute.servers[sid].update(vm_state="stopped", status="SHUTOFF",
                                  power_state=4)


def _journalled_by_the_previous_member(w, ago=2.0, sid=SID):
    """The row a member wrote right before its lease lapsed (it stopped
    before sending the request)."""
    return w.journal.repair_started(
        sid, w.compute.servers[sid]["host"], "start", w.clock() - ago,
        step=1, verdict="stopped_by_itself", detail="start: first action")


def _starts(w, sid=SID):
    return [c for c in getattr(w.compute, "repair_calls", [])
            if c == ("start", sid)]


def test_a_resumed_start_never_sent_is_sent_at_once():
    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _stopped(w)
    _journalled_by_the_previous_member(w)
    assert w.engine.repair.resume() == 1      # what the new leader runs
    _settle(w, passes=3)
    # Before: followed as sent, the server left SHUTOFF until the start
    # timed out (30 s), then a hard reboot.
    assert _starts(w) == [("start", SID)]
    assert w.compute.servers[SID]["status"] == "ACTIVE"
    rows = w.journal.repairs(SID)
    assert [(r["action"], r["outcome"]) for r in rows] == [
        ("start", repair_pass.NOT_SENT), ("start", "running")]
    assert "stopped before sending it" in rows[0]["detail"]
    _settle(w, passes=UPTIME + 2)
    # The row never sent is no attempt: one start, a success.
    assert _rows(w) == [("start", "not_sent"), ("start", "success")]
    assert w.engine.repair.cases == {}


def test_a_start_never_sent_found_again_by_the_sweep_is_sent_at_once():
    """No resume (a member elected before the new leader resumed repairs,
    or the row found through the server's news): the ladder would have
    refused while the row runs, for action_timeout + min_uptime."""
    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _journalled_by_the_previous_member(w)
    _break(w)
    _settle(w, passes=3)
    assert _starts(w) == [("start", SID)]
    assert w.compute.servers[SID]["status"] == "ACTIVE"
    assert _rows(w) == [("start", "not_sent"), ("start", "running")]


def test_a_start_nova_recorded_is_followed_not_sent_again():
    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _stopped(w)
    row_at = w.clock() - 2.0
    _journalled_by_the_previous_member(w)
    # Nova accepted the previous member's start (a second later on a
    # clock 60 s behind), and the guest did not come up.
    w.compute.servers[SID].setdefault("actions", []).append(dict(
        action="start", user_id="instanceha", start_time=row_at - 59.0))
    w.engine.repair.resume()
    _settle(w, passes=5)
    assert _starts(w) == []
    assert _rows(w) == [("start", "running")]
    # As before: timed out after action_timeout, then the next step.
    _settle(w, passes=TIMEOUT)
    assert _rows(w)[:2] == [("start", "timeout"), ("hard_reboot", "running")]


def test_a_server_with_a_task_or_moved_is_taken_as_sent():
    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _stopped(w)
    _journalled_by_the_previous_member(w)
    w.compute.servers[SID]["task_state"] = "powering-on"
    w.engine.repair.resume()
    _settle(w, passes=3)
    assert _starts(w) == [] and _rows(w) == [("start", "running")]


def test_nova_unreadable_the_attempt_is_followed_as_sent():
    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _stopped(w)
    _journalled_by_the_previous_member(w)
    w.compute.fail["instance_actions"] = [ComputeError("HTTP 503", 503)]
    w.engine.repair.resume()
    _settle(w, passes=3)
    assert _starts(w) == [] and _rows(w) == [("start", "running")]


def test_a_member_elected_resumes_the_repairs_left_running():
    """The new leader resumes the repairs its predecessor left running, as
    a restarted single process does (before: only the hosts)."""
    from instanceha.service.group import elected

    w = _world(action_timeout=TIMEOUT, min_uptime=UPTIME)
    _stopped(w)
    _journalled_by_the_previous_member(w)
    acting = []

    def lost(reason):
        raise AssertionError(reason)

    elected(w.engine, "m", lambda: acting.append(True), lost)
    assert acting == [True]
    assert w.engine.repair.cases[SID].attempt.action == "start"
    _settle(w, passes=3)
    assert _starts(w) == [("start", SID)]
