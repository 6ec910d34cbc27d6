"""The engine queues a host being proven dead ahead of evacuation passes,
and keeps workers for it (engine.workqueue's urgent lane): found at 5,000
hosts, where 16 evacuating hosts held every worker and the next hosts to
die waited 15 s for their power-off decision."""

from instanceha.events import Event, EventKind as E
from tests.unit.test_engine import World


def test_events_of_a_host_not_yet_evacuating_go_first():
    w = World(hosts=3, servers=1)
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    recs = {r.name: r for r in w.engine.records().values()}
    now = w.clock()
    # compute-1 is past its proof (evacuated) and compute-0 only still
    # heartbeating: ordinary; compute-2 is active and lost (a proof
    # starts): urgent.
    w.engine.submit(Event(E.HEARTBEAT_OK, recs["compute-1"].id, now,
                          name="compute-1", source="test"))
    w.engine.submit(Event(E.HEARTBEAT_OK, recs["compute-0"].id, now,
                          name="compute-0", source="test"))
    w.engine.submit(Event(E.HEARTBEAT_LOST, recs["compute-2"].id, now,
                          name="compute-2", source="test"))
    assert [w.engine.queue.get(timeout=0) for _ in range(3)] == [
        recs["compute-2"].id, recs["compute-1"].id, recs["compute-0"].id]


def test_a_quarter_of_the_workers_is_kept_for_hosts_being_proven_dead():
    from instanceha import conf as conf_pkg
    from instanceha.engine.engine import Engine
    w = World(hosts=1, servers=0)
    for workers, ordinary in ((1, 1), (4, 3), (8, 6), (16, 12)):
        conf = conf_pkg.make({"DEFAULT": {"workers": workers}})
        eng = Engine(conf, w.ctx, w.journal, w.clock)
        assert eng.queue._ordinary_limit == ordinary


def test_which_news_is_urgent():
    from instanceha.fsm.states import State, urgent
    # A host not known yet, or being proven dead: whatever it hears.
    assert urgent(None, E.HEARTBEAT_OK)
    assert urgent(State.FENCING, E.HEARTBEAT_OK)
    # An active host: only news that can start a proof of death.
    for routine in (E.HEARTBEAT_OK, E.AGENT_BEATING, E.CAPACITY):
        assert not urgent(State.ACTIVE, routine)
    for news in (E.HEARTBEAT_LOST, E.AGENT_SILENT, E.KDUMP, E.POWER_OFF):
        assert urgent(State.ACTIVE, news)
    # Past the proof: evacuation passes and cleanup checks wait their turn.
    assert not urgent(State.EVACUATING, E.HEARTBEAT_LOST)


def test_a_host_proven_dead_through_the_urgent_lane_evacuates_as_ordinary():
    # Found at 20,000 hosts: 16 hosts fenced at once ran their first
    # evacuation pass (10 s each) in the worker that fenced them, so the
    # workers kept for proofs were all busy and the next dead hosts
    # waited 30 s for the TICK that fences them.
    from instanceha.engine.inbox import Pending
    from instanceha.fsm.states import Action
    w = World(hosts=2, servers=1)
    w.pass_()
    rec = w.engine.find("compute-1")
    with w.engine._lock:
        w.engine._inbox.put_front(rec.id, Pending(Action.EVACUATE, None))
    w.engine.queue.add(rec.id, urgent=True)
    key = w.engine.queue.get(timeout=0)
    assert key == rec.id and w.engine.queue.taken_urgent(key)
    w.engine.work(key)
    # Nothing ran: the evacuation waits in the ordinary lane.
    assert w.compute.requested == {}
    assert list(w.engine.queue._queue) == [rec.id]
    assert not w.engine.queue._urgent
    key = w.engine.queue.get(timeout=0)
    assert key == rec.id and not w.engine.queue.taken_urgent(key)
