"""Storms: the threshold over a window and per zone, the storm hold and its
lifting, the fencing rate, flapping hosts. Pure decisions first, then the
engine with in-memory drivers on a fake clock."""

from instanceha.engine.engine import Engine
from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import Action as A, State as S
from instanceha.policy import storm
from tests.unit.fsm.test_machine import ev, run
from tests.unit.test_engine import World

SET = storm.Settings(threshold=50, min_hosts=2, window=600)


def _rec(i, state=S.ACTIVE, since=0.0, ok=True, zone=None, **kw):
    return HostRecord(id="u%d" % i, name="c%d" % i, state=state,
                      since=since, heartbeat_ok=ok, zone=zone, **kw)


# -- pure ----------------------------------------------------------------------

def test_hosts_being_or_recently_recovered_count_as_lost():
    recs = [_rec(0, S.EVACUATED, since=100), _rec(1, S.FENCING, ok=False),
            _rec(2, S.SUSPECT, ok=False), _rec(3), _rec(4),
            _rec(5, S.EVACUATED, since=-1000),          # outside the window
            _rec(6, S.MAINTENANCE, ok=False),           # not counted at all
            _rec(7, S.SUSPECT, ok=False, operator_disabled="RMA")]
    scope = storm.assess(recs, 650, SET)[storm.GLOBAL]
    assert scope.lost == ("c0", "c1", "c2") and scope.total == 6
    assert not scope.over(SET)
    scope = storm.assess(recs + [_rec(8, S.PENDING, ok=False)], 650,
                         SET)[storm.GLOBAL]
    assert scope.over(SET) and "4 of 7" in scope.describe()


def test_a_host_suspect_on_its_agents_silence_counts_as_lost():
    # Nova still says up (heartbeat_ok) while the agent is silent: the
    # threshold must see it before its fencing starts.
    recs = [_rec(0, S.SUSPECT, agent="silent"), _rec(1), _rec(2), _rec(3)]
    scope = storm.assess(recs, 650, SET)[storm.GLOBAL]
    assert scope.lost == ("c0",) and scope.total == 4
    # Hosts draining or decommissioned are in their operator's hands.
    recs = [_rec(0, S.DRAINING), _rec(1, S.DECOMMISSIONED, ok=False),
            _rec(2, S.UNDRAINING), _rec(3), _rec(4)]
    scope = storm.assess(recs, 650, SET)[storm.GLOBAL]
    assert scope.lost == () and scope.total == 2


def test_zone_threshold_holds_only_its_own_zone():
    s = storm.Settings(threshold=50, min_hosts=2, window=600, per_zone=True)
    recs = [_rec(i, zone="az1") for i in range(4)]
    recs += [_rec(i, zone="az2") for i in range(4, 10)]
    recs[0] = _rec(0, S.EVACUATED, since=0, zone="az1")
    recs[1] = _rec(1, S.FENCING, ok=False, zone="az1")
    recs[2] = _rec(2, S.SUSPECT, ok=False, zone="az1")
    scopes = storm.assess(recs, 10, s)
    assert not scopes[storm.GLOBAL].over(s)            # 3 of 10
    assert scopes["az1"].over(s)                       # 3 of 4
    assert storm.holding(scopes, recs[2], s) is scopes["az1"]
    assert storm.holding(scopes, _rec(5, S.SUSPECT, ok=False, zone="az2"),
                         s) is None
    assert "in zone az1" in scopes["az1"].describe()


def test_aggregate_threshold_holds_only_its_members():
    """A rack (host aggregate) losing most of its hosts holds fencing of
    its members, while the cloud and the zone are below the threshold;
    a host in two aggregates is held by either."""
    s = storm.Settings(threshold=50, min_hosts=2, window=600,
                       per_aggregate=True)
    rack_a = ("rack-a",)
    recs = [_rec(i, aggregates=rack_a) for i in range(4)]
    recs += [_rec(i, aggregates=("rack-b",)) for i in range(4, 12)]
    recs[0] = _rec(0, S.EVACUATED, since=0, aggregates=rack_a)
    recs[1] = _rec(1, S.FENCING, ok=False, aggregates=rack_a)
    recs[2] = _rec(2, S.SUSPECT, ok=False, aggregates=rack_a + ("gpu",))
    scopes = storm.assess(recs, 10, s)
    assert not scopes[storm.GLOBAL].over(s)            # 3 of 12
    rack = scopes["aggregate:rack-a"]
    assert rack.over(s) and rack.lost == ("c0", "c1", "c2")
    assert storm.holding(scopes, recs[2], s) is rack
    assert storm.holding(scopes, _rec(5, S.SUSPECT, ok=False,
                                      aggregates=("rack-b",)), s) is None
    assert "in aggregate rack-a" in rack.describe()
    # Off by default: the same records hold nothing.
    assert storm.holding(storm.assess(recs, 10, SET), recs[2], SET) is None


def test_aggregates_come_from_the_reconciler_observation():
    rec = HostRecord(id="u1", name="c1")
    new, _ = machine.step(rec, Event(E.HEARTBEAT_OK, "u1", 1.0, name="c1",
                                     detail={"aggregates": ["rack-a"]}),
                          machine.Policy())
    assert new.aggregates == ("rack-a",)
    again, _ = machine.step(new, Event(E.HEARTBEAT_OK, "u1", 2.0, name="c1",
                                       detail={"zone": "nova"}),
                            machine.Policy())
    assert again.aggregates == ("rack-a",)     # not read: kept


def test_an_acknowledged_storm_holds_again_when_it_grows():
    recs = [_rec(i, S.SUSPECT, ok=False) for i in range(3)] + [_rec(3)]
    scopes = storm.assess(recs, 0, SET)
    assert storm.holding(scopes, recs[0], SET) is not None
    ack = {storm.GLOBAL: 3}
    assert storm.holding(scopes, recs[0], SET, ack) is None
    recs[3] = _rec(3, S.SUSPECT, ok=False)
    assert storm.holding(storm.assess(recs, 0, SET), recs[0], SET,
                         ack) is not None


def test_token_bucket_and_detection_order():
    b = storm.TokenBucket(2, 60, now=0)
    assert b.take(0) and b.take(0) and not b.take(1)
    assert b.next_at(1) == 30
    assert not b.take(29.9) and b.take(30)
    waiting = {"a": 5.0, "b": 3.0, "c": 9.0}
    assert storm.queue_position(waiting, "b", 3.0) == 1
    assert storm.queue_position(waiting, "c", 9.0) == 3


FLAP = machine.Policy(grace_period=10, flap_count=3, flap_window=600)


def test_a_flapping_host_is_held_then_resumed_by_its_operator():
    events = []
    for t in (0, 100, 200):
        events += [ev(E.HEARTBEAT_LOST, t), ev(E.HEARTBEAT_OK, t + 5)]
    rec, out = run(events, policy=FLAP)
    assert rec.state is S.ACTIVE and rec.loss_count == 3
    rec, out = run([ev(E.HEARTBEAT_LOST, 300), ev(E.TICK, 311)], FLAP, rec)
    assert out[-1] == (S.SUSPECT, [])
    assert "flapping, lost 4 times" in rec.reason
    assert not machine.fencing_due(rec, Event(E.TICK, "h", 311), FLAP)
    rec, out = run([ev(E.OPERATOR_RESUME, 320), ev(E.TICK, 321)], FLAP, rec)
    assert out == [(S.SUSPECT, []), (S.FENCING, [A.FENCE])]


def test_losses_older_than_the_window_do_not_count():
    events = []
    for t in (0, 100, 200):
        events += [ev(E.HEARTBEAT_LOST, t), ev(E.HEARTBEAT_OK, t + 5)]
    events += [ev(E.HEARTBEAT_LOST, 900), ev(E.TICK, 911)]
    rec, out = run(events, policy=FLAP)
    assert out[-1] == (S.FENCING, [A.FENCE]) and rec.loss_count == 1


# -- the engine ----------------------------------------------------------------

def _world(hosts=20, **policy):
    w = World(hosts=hosts, servers=1)
    for key, value in policy.items():
        w.conf.set_override(key, value, "policy")
    w.engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.reconciler._sink = w.engine.submit
    w.reconciler._wants_every = w.engine.wants_every_report
    return w


def test_hosts_dying_seconds_apart_are_fenced_only_up_to_the_threshold():
    """Before: each host was judged against the hosts suspect at that
    instant, and those already recovered no longer counted."""
    w = _world(hosts=20, threshold=50)
    w.pass_()
    for i in range(16):
        w.compute.kill("compute-%d" % i)
        for _ in range(12):             # detected, fenced, evacuated
            w.pass_()
    for _ in range(10):
        w.pass_()
    assert len(w.fencer.powered_off) == 10       # 10 of 20 = 50%
    snap = w.engine.snapshot()
    assert not snap["cluster"]["ok"]
    assert snap["cluster"]["reason"].startswith("storm hold: 16 of 20")
    assert snap["storm"]["global"]["over"]
    held = [h for h in snap["hosts"] if h["state"] == "suspect"]
    assert len(held) == 6 and all("storm hold" in h["reason"] for h in held)
    # The operator lifts the hold for these: the held hosts are recovered.
    assert w.engine.acknowledge_storm("checked: a rack lost power")
    for _ in range(12):
        w.pass_()
    assert len(w.fencer.powered_off) == 16
    # One more loss is a storm grown beyond what was accepted: held again.
    w.compute.kill("compute-16")
    for _ in range(20):
        w.pass_()
    assert len(w.fencer.powered_off) == 16
    assert "storm hold" in w.state("compute-16")[1]


def test_the_hold_lifts_by_itself_once_the_window_has_passed():
    w = _world(hosts=10, threshold=30, storm_window=120)
    w.pass_()
    for i in range(4):
        w.compute.kill("compute-%d" % i)
        for _ in range(20):
            w.pass_()
    assert len(w.fencer.powered_off) == 3
    assert "storm hold" in w.state("compute-3")[1]
    for _ in range(130):
        w.pass_()
    assert len(w.fencer.powered_off) == 4


def test_rate_limit_fences_in_order_of_detection():
    w = _world(hosts=10, threshold=100, fence_rate_hosts=2,
               fence_rate_interval=60)
    w.pass_()
    for i in (5, 3, 7, 1):              # detected in this order
        w.compute.kill("compute-%d" % i)
        w.pass_()
    for _ in range(25):
        w.pass_()
    assert w.fencer.powered_off == ["compute-5", "compute-3"]
    state, reason = w.state("compute-1")
    assert state == "suspect" and "rate limit" in reason
    assert "2 of 2 in order of detection" in reason
    assert w.engine.snapshot()["rate_limit"]["waiting"] == ["compute-7",
                                                            "compute-1"]
    for _ in range(20):                 # a token every 30 s
        w.pass_()
    assert w.fencer.powered_off == ["compute-5", "compute-3", "compute-7"]
    for _ in range(30):
        w.pass_()
    assert w.fencer.powered_off[-1] == "compute-1"


def test_a_flapping_host_is_not_fenced_again_and_again():
    w = _world(hosts=6, flap_count=3, flap_window=600)
    w.pass_()
    for _ in range(3):                  # a flapping link: lost, then back
        w.compute.services["compute-2"]["alive"] = False
        for _ in range(12):
            w.pass_()
        assert w.state("compute-2")[0] == "suspect"
        w.compute.boot("compute-2")
        w.pass_()
        assert w.state("compute-2")[0] == "active"
    w.compute.kill("compute-2")
    for _ in range(30):
        w.pass_()
    state, reason = w.state("compute-2")
    assert state == "suspect" and "flapping" in reason
    assert w.fencer.powered_off == []


def test_operator_api_lifts_the_storm_and_metrics_show_it():
    import json
    from instanceha.api.server import OperatorAPI
    from instanceha.cmd import main as cli
    w = _world(hosts=4, threshold=50)
    w.pass_()
    api = OperatorAPI(w.conf, w.engine, w.clock)
    assert api.handle("POST", "/storm/resume", b"{}")[0] == 409
    for i in range(3):
        w.compute.kill("compute-%d" % i)
    for _ in range(20):
        w.pass_()
    assert w.fencer.powered_off == []
    text = api.handle("GET", "/metrics")[2].decode()
    assert 'instanceha_storm_hold{scope="global"} 1.0' in text
    assert 'instanceha_storm_lost_hosts{scope="global"} 3.0' in text
    status = cli.format_status(json.loads(api.handle("GET", "/status")[2]),
                               now=w.clock())
    assert "HOLD: storm hold: 3 of 4" in status
    code, _, body = api.handle("POST", "/storm/resume",
                               b'{"reason": "rack PDU swap"}')
    assert code == 202 and json.loads(body)["lifted"] == {"global": 3}
    for _ in range(20):
        w.pass_()
    assert sorted(w.fencer.powered_off) == ["compute-0", "compute-1",
                                            "compute-2"]
    text = api.handle("GET", "/metrics")[2].decode()
    assert 'instanceha_storm_hold{scope="global"} 0.0' in text


def test_kdump_messages_before_the_loss_are_not_flapping():
    """A crashing host sends fence_kdump every second while Nova still
    sees its last heartbeat: suspect, back, suspect... is not a flap."""
    p = machine.Policy(grace_period=10, flap_count=3, kdump_enabled=True,
                       kdump_timeout=5)
    events = []
    for t in range(0, 8):
        events += [ev(E.KDUMP, t), ev(E.HEARTBEAT_OK, t + 0.5)]
    rec, _ = run(events, policy=p)
    assert rec.loss_count == 0
    rec, out = run([ev(E.HEARTBEAT_LOST, 9), ev(E.TICK, 20)], p, rec)
    assert out[-1] == (S.FENCING, [A.FENCE])


def test_the_tally_says_what_assess_says_record_by_record():
    # The engine keeps a Tally as it stores records; every assessment
    # (with or without a pending record) must equal assess over all.
    import random
    rng = random.Random(7)
    states = list(S)
    zones = [None, "az1", "az2"]
    aggs = [(), ("rack1",), ("rack1", "gpu"), ("gpu",)]
    for settings in (SET, storm.Settings(threshold=30, min_hosts=2,
                                         window=100, per_zone=True,
                                         per_aggregate=True,
                                         recover_disabled=True)):
        records = {}
        tally = storm.Tally(settings)

        def some(i):
            return _rec(i, rng.choice(states), since=rng.uniform(0, 900),
                        ok=rng.random() < 0.6, zone=rng.choice(zones),
                        aggregates=rng.choice(aggs),
                        agent=rng.choice([None, "silent", "beating"]),
                        operator_disabled=rng.choice([None, None, "RMA"]))
        for step in range(600):
            rec = some(rng.randrange(40))
            records[rec.id] = rec
            tally.put(rec)
            now = rng.uniform(0, 1200)
            assert tally.assess(now) == storm.assess(records.values(), now,
                                                     settings)
            pending = some(rng.randrange(45))
            assert tally.assess(now, pending) == storm.assess(
                {**records, pending.id: pending}.values(), now, settings)
        # Counted again from scratch: the same.
        again = storm.Tally(settings, records.values())
        assert again.assess(500.0) == tally.assess(500.0)
