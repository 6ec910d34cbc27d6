"""Instance repair is work of the engine like a host's action (issue 36
part 1): its passes run through the executor, the may-act check and the
key's back-off, with no branch on the key's type; news of a server wakes
only the passes that wait for that server (part 5)."""

from structlog.testing import capture_logs

from instanceha.engine.inbox import Inboxes, Pending
from instanceha.engine.repair import RepairKey
from instanceha.fsm.states import Action
from tests.unit.test_engine import World
from tests.unit.test_engine_repair import SID, _break, _rows, _settle, _world


def test_a_repair_pass_waits_while_this_member_may_not_act():
    w = _world()
    allowed = []
    w.ctx.may_act = lambda: None if allowed else "another member acts"
    with capture_logs() as logs:
        _break(w)
        _settle(w, passes=15)
    assert getattr(w.compute, "repair_calls", []) == []
    assert _rows(w) == []
    deferred = [e for e in logs if e["event"] == "action_deferred"]
    assert deferred and deferred[0]["action"] == "instance_repair"
    allowed.append(True)
    _settle(w, passes=90)
    assert w.compute.repair_calls == [("start", SID)]
    assert _rows(w) == [("start", "success")]


def test_a_repair_pass_that_raises_is_retried_with_the_keys_back_off():
    w = _world()
    real, raised = w.engine.repair.process, []

    def flaky(server_id):
        if len(raised) < 2:
            raised.append(server_id)
            raise RuntimeError("journal away")
        return real(server_id)
    w.engine.repair.process = flaky
    _break(w)
    w.drain()
    assert raised == [SID]
    assert w.engine.queue.failures(RepairKey(SID)) == 1
    assert "journal away" in w.engine._inbox.errors()[RepairKey(SID)]
    _settle(w, passes=20)
    assert _rows(w) == [("start", "success")]
    assert w.engine.repair.cases == {}
    assert w.engine.queue.failures(RepairKey(SID)) == 0


def test_news_wakes_only_the_passes_waiting_for_that_server():
    box = Inboxes()
    box.set_pass("host-a", Pending(Action.EVACUATE, 1, object()), 100.0,
                 frozenset({"vm-1"}))
    box.set_pass("host-b", Pending(Action.DRAIN, 2, object()), 100.0,
                 frozenset({"vm-2"}))
    box.set_pass("host-c", Pending(Action.EVACUATE, 3, object()), 100.0)
    assert sorted(box.wake_passes(10.0, "vm-1")) == ["host-a", "host-c"]
    assert box.take("host-b", 10.0) is None
    assert box.take("host-a", 10.0).action_id == 1


def test_a_notification_wakes_the_evacuation_waiting_for_that_server():
    w = World(hosts=3, servers=2)
    w.pass_()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
        waiting = dict(w.engine._inbox._passes)
        if waiting:
            break
    (key, nxt), = waiting.items()
    assert nxt.waits_for == frozenset(w.compute.servers) & nxt.waits_for
    assert nxt.waits_for            # the servers in flight
    w.ctx.board.record("no-such-server", state="active")
    assert w.engine._inbox._passes[key].due == nxt.due
    w.ctx.board.record(sorted(nxt.waits_for)[0], state="active")
    assert w.engine._inbox._passes[key].due <= w.clock()


def test_a_drain_pass_waits_for_news_of_its_own_servers():
    from tests.unit.test_engine_drain import _drain, _world as _drain_world
    w = _drain_world(3, 2)
    w.pass_()
    rec = w.engine.find("compute-0")
    _drain(w, "compute-0")
    w.drain()
    nxt = w.engine._inbox._passes[rec.id]
    assert nxt.waits_for == {"compute-0-vm-0", "compute-0-vm-1"}
    w.ctx.board.nudge("compute-1-vm-0")        # another host's server
    assert w.engine._inbox._passes[rec.id].due == nxt.due
