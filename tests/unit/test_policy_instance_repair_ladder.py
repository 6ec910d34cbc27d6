"""Instance repair's ladder, limit, hold, levels, restart groups and
exclusions (instanceha.policy.instance_repair), and its options.

Times are plain numbers (seconds); nothing sleeps or reads a clock.
"""

import pytest
from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha.conf import instance_repair as ir_conf
from instanceha.policy import instance_repair as ir
from instanceha.policy import repair
from instanceha.policy.facts import (AggregateFacts, ImageFacts, Problem,
                                     ServerFacts)
from instanceha.policy.repair_values import Ladder, Level

T = 1_000_000.0          # "now" of most tests
ON = ir.Settings(enabled=True, max_repairs=10)


def attempt(action, at, outcome=ir.FAILURE, took=30.0):
    ended = None if outcome == ir.RUNNING else at + took
    return ir.Attempt(action, at, ended, outcome)


def nxt(history=(), s=ON, level=Ladder.EVACUATE, vm_state="stopped",
        now=T, **kw):
    return ir.next_action(history, s, level, now=now, vm_state=vm_state,
                          **kw)


# -- the ladder ------------------------------------------------------------

def test_off_by_default():
    r = nxt(s=ir.Settings())
    assert isinstance(r, ir.Refusal) and r.kind == ir.DISABLED


def test_first_action_for_a_stopped_server_is_start():
    a = nxt()
    assert isinstance(a, ir.Action)
    assert (a.name, a.step, a.timeout, a.min_uptime, a.needs, a.moves,
            a.closes) == ("start", 1, 300.0, 60.0, Ladder.RESTART, False,
                          None)
    assert a.reason == "start: first action"


def test_each_failure_moves_one_step_up():
    h = [attempt("start", T - 900)]
    a = nxt(h)
    assert (a.name, a.step) == ("hard_reboot", 2)
    assert a.reason == "hard_reboot after start: failure"
    h.append(attempt("hard_reboot", T - 600, ir.TIMEOUT))
    a = nxt(h)
    assert (a.name, a.step, a.moves, a.needs) == (
        "cold_migrate", 3, True, Ladder.MIGRATE)
    h.append(attempt("cold_migrate", T - 300))
    r = nxt(h)
    assert r.kind == ir.FAILED and "every action of the ladder" in r.reason
    assert "cold_migrate: failure" in r.reason


def test_rebuild_is_the_last_step_with_every_opt_in():
    s = ir.Settings(enabled=True, max_repairs=10, allow_rebuild=True,
                    actions=("start", "hard_reboot", "cold_migrate",
                             "rebuild"))
    h = [attempt("start", T - 900), attempt("hard_reboot", T - 600),
         attempt("cold_migrate", T - 300)]
    r = nxt(h, s)                              # level evacuate: not enough
    assert r.kind == ir.NOT_PERMITTED and r.action == "rebuild"
    assert "needs repair level rebuild; the server's is evacuate" in r.reason
    a = nxt(h, s, level=Ladder.REBUILD)
    assert (a.name, a.step, a.needs) == ("rebuild", 4, Ladder.REBUILD)


def test_an_action_nova_refuses_in_the_vm_state_is_stepped_over():
    # A server in ERROR cannot be started (os-start wants stopped).
    a = nxt(vm_state="error")
    assert (a.name, a.step) == ("hard_reboot", 1)
    assert "start not accepted by Nova in vm_state error" in a.reason
    # ... nor cold-migrated: after a failed hard reboot nothing is left.
    r = nxt([attempt("hard_reboot", T - 600)], vm_state="error")
    assert r.kind == ir.FAILED
    # with rebuild allowed it is rebuilt from its image
    s = ir.Settings(enabled=True, max_repairs=10, allow_rebuild=True,
                    actions=("start", "hard_reboot", "cold_migrate",
                             "rebuild"))
    a = nxt([attempt("hard_reboot", T - 600)], s, level=Ladder.REBUILD,
            vm_state="error")
    assert a.name == "rebuild" and "cold_migrate not accepted" in a.reason


def test_no_action_of_the_ladder_fits():
    r = nxt(s=ir.Settings(enabled=True, actions=("start",)),
            vm_state="paused")
    assert r.kind == ir.NOT_APPLICABLE and "vm_state paused" in r.reason


@pytest.mark.parametrize("level,history,want", [
    (Ladder.NONE, [], ir.NOT_PERMITTED),
    (Ladder.RESTART, [], "start"),
    (Ladder.RESTART, [("start",)], ir.NOT_PERMITTED),
    (Ladder.REBOOT, [("start",)], "hard_reboot"),
    (Ladder.REBOOT, [("start",), ("hard_reboot",)], ir.NOT_PERMITTED),
    (Ladder.MIGRATE, [("start",), ("hard_reboot",)], "cold_migrate"),
    (Ladder.EVACUATE, [("start",), ("hard_reboot",)], "cold_migrate"),
    (Level.EVACUATE, [("start",), ("hard_reboot",)], "cold_migrate"),
    (Level.NONE, [], ir.NOT_PERMITTED),
    (15, [("start",), ("hard_reboot",)], "cold_migrate"),
])
def test_the_level_decides_how_far(level, history, want):
    h = [attempt(a, T - 1000 + 100 * i) for i, (a,) in enumerate(history)]
    r = nxt(h, level=level)
    got = r.name if isinstance(r, ir.Action) else r.kind
    assert got == want
    if want == ir.NOT_PERMITTED:
        assert r.action == ir.ACTIONS[len(history)]
        assert "needs repair level" in r.reason


def test_a_repair_decision_brings_its_level_and_its_suspension():
    server = ServerFacts("s1", "web-1",
                         metadata={"instanceha:repair": "reboot"})
    s = repair.Settings(instance_levels=True)
    d = repair.decide(server, T, s)
    assert d.level is Ladder.REBOOT
    assert nxt(level=d).name == "start"
    assert nxt([attempt("start", T - 60)], level=d).name == "hard_reboot"
    assert nxt([attempt("start", T - 90), attempt("hard_reboot", T - 60)],
               level=d).kind == ir.NOT_PERMITTED
    suspended = ServerFacts("s1", "web-1", metadata={
        "instanceha:repair": "reboot",
        "instanceha:suspended_until": "forever"})
    r = nxt(level=repair.decide(suspended, T, s))
    assert r.kind == ir.SUSPENDED and r.until is None
    assert "suspended forever" in r.reason


def test_a_running_attempt_waits_for_its_deadline_then_counts_as_timeout():
    running = attempt("start", T - 100, ir.RUNNING)
    r = nxt([running])
    assert r.kind == ir.IN_PROGRESS
    assert r.until == T - 100 + 300 + 60 == ir.deadline(running, ON)
    a = nxt([running], now=r.until)
    assert a.name == "hard_reboot" and a.closes == running
    assert "start: timeout" in a.reason


def test_nova_busy_with_the_server():
    r = nxt(task_state="powering-off")
    assert r.kind == ir.BUSY and "powering-off" in r.reason


def test_marked_failed_until_cleared():
    r = nxt(marked_failed=True)
    assert r.kind == ir.FAILED and "repair --clear" in r.reason


# -- the limit --------------------------------------------------------------

def test_at_most_max_repairs_per_window_then_failed():
    s = ir.Settings(enabled=True, max_repairs=3, window=3600)
    # three starts that each worked, the server breaking again each time
    h = [attempt("start", T - 3000, ir.SUCCESS),
         attempt("start", T - 2000, ir.SUCCESS),
         attempt("start", T - 1000, ir.SUCCESS)]
    r = nxt(h, s)
    assert r.kind == ir.FAILED
    assert "3 repair action(s) within 3600 s" in r.reason
    assert "max_repairs is 3" in r.reason
    # an hour after the first, one falls out of the window
    assert nxt(h, s, now=T - 3000 + 3600).name == "start"


def test_a_running_attempt_past_its_deadline_counts_towards_the_limit():
    s = ir.Settings(enabled=True, max_repairs=2)
    running = attempt("hard_reboot", T - 1000, ir.RUNNING)
    r = nxt([attempt("start", T - 2000), running], s)
    assert r.kind == ir.FAILED and r.closes == running
    assert "hard_reboot: timeout" in r.reason


def test_a_success_starts_the_ladder_again():
    h = [attempt("start", T - 3000), attempt("hard_reboot", T - 2900,
                                             ir.SUCCESS)]
    a = nxt(h)
    assert (a.name, a.step) == ("start", 1)


def test_failures_older_than_the_window_are_forgotten():
    h = [attempt("start", T - 7200), attempt("hard_reboot", T - 7100)]
    a = nxt(h)
    assert (a.name, a.step) == ("start", 1)


def test_an_action_no_longer_configured_still_counts_as_a_step():
    # rebuild was tried (and failed) before the operator took it out
    h = [attempt("rebuild", T - 60)]
    assert nxt(h).kind == ir.FAILED


# -- judging an attempt ----------------------------------------------------------

@pytest.mark.parametrize("status,active_since,now,want", [
    ("ACTIVE", T + 10, T + 70, ir.SUCCESS),       # 60 s up
    ("ACTIVE", T + 10, T + 69, ir.RUNNING),
    ("ACTIVE", None, T + 1000, ir.RUNNING),       # first seen up just now
    ("SHUTOFF", None, T + 299, ir.RUNNING),
    ("SHUTOFF", None, T + 301, ir.TIMEOUT),
    ("HARD_REBOOT", None, T + 301, ir.TIMEOUT),
    ("SHUTOFF", T + 10, T + 40, ir.FAILURE),      # up, then down again
    ("ERROR", None, T + 5, ir.FAILURE),
    ("VERIFY_RESIZE", None, T + 100, ir.RUNNING),
])
def test_judge(status, active_since, now, want):
    a = ir.Attempt("start", T)
    assert ir.judge(a, status, active_since, now, ON) == want


def test_judge_keeps_an_ended_attempts_outcome():
    a = attempt("start", T, ir.SUCCESS)
    assert ir.judge(a, "ERROR", None, T + 1, ON) == ir.SUCCESS


def test_an_attempt_outcome_must_be_known():
    with pytest.raises(ValueError, match="outcome"):
        ir.Attempt("start", T, outcome="fine")


# -- the cloud-wide hold -----------------------------------------------------------

S_HOLD = ir.Settings(enabled=True, hold_count=20, hold_percent=5,
                     hold_min_failures=3, hold_window=600)


def broke(n, at=T - 60, prefix="s"):
    return [("%s%04d" % (prefix, i), at) for i in range(n)]


def test_hold_by_count_in_a_large_cloud():
    h = ir.hold(broke(20), T, S_HOLD, total_servers=10_000)
    assert h.held and len(h.failing) == 20 and h.pct == pytest.approx(0.2)
    assert "20 server(s) broke within 600 s (0.2% of 10000)" in h.why
    assert "instance repair hold" in h.why
    held, why = ir.hold(broke(19), T, S_HOLD, total_servers=10_000)
    assert not held and "the hold engages at 20 servers" in why


def test_hold_by_percentage_in_a_small_cloud():
    assert ir.hold(broke(6), T, S_HOLD, total_servers=100).held   # 6 %
    assert not ir.hold(broke(4), T, S_HOLD, total_servers=100).held
    # 2 of 20 is 10 %, but fewer than hold_min_failures (3)
    assert not ir.hold(broke(2), T, S_HOLD, total_servers=20).held
    assert ir.hold(broke(3), T, S_HOLD, total_servers=20).held


def test_two_hundred_servers_crashing_at_once_hold():
    # the benchmark: 200 servers across 50 hosts (4 per host)
    h = ir.hold(broke(200), T, S_HOLD, total_servers=1000)
    assert h.held and h.as_dict() == {
        "held": True, "why": h.why, "failing": 200, "total": 1000,
        "pct": 20.0, "servers": list(h.failing), "acknowledged": None}
    assert "... (190 more)" in h.why


def test_only_breakages_within_the_window_count_once_per_server():
    failures = (broke(10, at=T - 601) + broke(10, at=T - 599, prefix="t")
                + broke(10, at=T - 10, prefix="t")      # same servers again
                + broke(10, at=T + 5, prefix="u"))      # after now
    h = ir.hold(failures, T, S_HOLD, total_servers=10_000)
    assert len(h.failing) == 10 and not h.held


def test_hold_takes_a_mapping_too():
    h = ir.hold({sid: at for sid, at in broke(25)}, T, S_HOLD)
    assert h.held and h.total == 0 and h.pct == 0.0


def test_an_operator_accepts_the_hold_until_more_break():
    assert not ir.hold(broke(25), T, S_HOLD, acknowledged=25).held
    h = ir.hold(broke(26), T, S_HOLD, acknowledged=25)
    assert h.held and h.acknowledged == 25
    assert "accepted" in ir.hold(broke(25), T, S_HOLD, acknowledged=25).why


def test_hold_off():
    s = ir.Settings(hold_count=0, hold_percent=0)
    h = ir.hold(broke(500), T, s, total_servers=500)
    assert not h.held and "no limit (hold off)" in h.why


# -- levels: the repair level ladder extended -----------------------------------------

def _server(level=None, aggregate_level=None):
    meta = {} if level is None else {"instanceha:repair": level}
    aggs = () if aggregate_level is None else (AggregateFacts(
        "rack1", "a1", {"instanceha:repair": aggregate_level}),)
    return ServerFacts("u1", "web-1", metadata=meta, aggregates=aggs)


@pytest.mark.parametrize("value,want", [
    ("none", Ladder.NONE), ("restart", Ladder.RESTART),
    ("Reboot", Ladder.REBOOT), ("migrate", Ladder.MIGRATE),
    ("evacuate", Ladder.EVACUATE), ("rebuild", Ladder.REBUILD)])
def test_instance_repair_levels_parse_when_on(value, want):
    d = repair.decide(_server(value), T, repair.Settings(instance_levels=True))
    assert d.level is want and not d.problems


@pytest.mark.parametrize("value", ["restart", "reboot", "migrate",
                                   "rebuild"])
def test_instance_repair_levels_are_none_when_off(value):
    d = repair.decide(_server(value), T, repair.Settings())
    assert d.level is Level.NONE and not d.allows()
    assert "not supported yet while instance repair is off" in str(
        d.problems[0])


def test_the_levels_keep_their_order_and_ranks():
    assert [lv.label for lv in Ladder] == [
        "none", "restart", "reboot", "migrate", "evacuate", "rebuild"]
    assert list(Ladder) == sorted(Ladder)
    for level in Level:
        assert Ladder[level.name] == level
    assert [ir.NEEDS[a] for a in ir.ACTIONS] == sorted(
        ir.NEEDS[a] for a in ir.ACTIONS)


def test_each_level_allows_the_lower_ones_on_both_paths():
    s = repair.Settings(instance_levels=True)
    d = repair.decide(_server("migrate"), T, s)
    assert d.allows(Ladder.RESTART) and d.allows(Ladder.MIGRATE)
    assert not d.allows(Ladder.EVACUATE) and not d.allows(Level.EVACUATE)
    assert "no automatic evacuation" in d.reason
    d = repair.decide(_server(), T, s)          # the default: evacuate
    assert d.level == Level.EVACUATE and d.allows(Ladder.MIGRATE)
    assert not d.allows(Ladder.REBUILD)


def test_nearest_scope_and_lowest_within_a_scope_as_before():
    s = repair.Settings(instance_levels=True)
    d = repair.decide(_server("restart", "rebuild"), T, s)
    assert d.level is Ladder.RESTART and d.level_from.scope == "server"
    d = repair.decide(ServerFacts("u1", "web-1", aggregates=(
        AggregateFacts("a", "1", {"instanceha:repair": "migrate"}),
        AggregateFacts("b", "2", {"instanceha:repair": "reboot"}))), T, s)
    assert d.level is Ladder.REBOOT


def test_a_default_level_outside_the_ladder_in_force_is_refused():
    with pytest.raises(ValueError):
        repair.Settings(default_level=Ladder.REBOOT)
    s = repair.Settings(default_level=Ladder.REBOOT, instance_levels=True)
    assert s.default_level is Ladder.REBOOT


def test_repair_settings_from_conf_follow_instance_repair_enabled():
    off = repair.Settings.from_conf(conf_pkg.make())
    assert off.levels is Level and not off.instance_levels
    on = repair.Settings.from_conf(conf_pkg.make(
        {"instance_repair": {"enabled": True}}))
    assert on.levels is Ladder and on.default_level is Ladder.EVACUATE
    assert "instanceha:restart_group" in on.known_keys


# -- restart groups ------------------------------------------------------------

@pytest.mark.parametrize("value,want", [
    ("0", 0), (" 2 ", 2), ("10", 10)])
def test_restart_group_of(value, want):
    server = ServerFacts("u1", "web-1",
                         metadata={"instanceha:restart_group": value})
    assert ir.restart_group_of(server, ON) == (want, None)


def test_no_restart_group():
    assert ir.restart_group_of(ServerFacts("u1"), ON) == (None, None)


@pytest.mark.parametrize("value", ["-1", "1.5", "first", "", "²", 3])
def test_a_malformed_restart_group_is_reported_and_no_group(value):
    server = ServerFacts("u1", "web-1",
                         metadata={"instanceha:restart_group": value})
    group, problem = ir.restart_group_of(server, ON)
    assert group is None and isinstance(problem, Problem)
    assert problem.level == "error" and "server web-1 (u1)" in str(problem)


def test_release_sends_group_by_group_within_each_project():
    members = [ir.Member("db1", "p1", 0), ir.Member("db2", "p1", 0),
               ir.Member("app1", "p1", 1), ir.Member("web1", "p1", 2),
               ir.Member("free", "p1", None),
               ir.Member("other", "p2", 5)]
    go, waits = ir.release(members)
    assert go == ("db1", "db2", "free", "other")
    assert waits["app1"] == ("restart group 1 waits for group 0 of project "
                             "p1: 2 server(s) not ACTIVE yet (db1, db2)")
    assert set(waits) == {"app1", "web1"}
    # the databases are ACTIVE: group 1 goes, group 2 still waits
    members[0] = ir.Member("db1", "p1", 0, settled=True)
    members[1] = ir.Member("db2", "p1", 0, settled=True)
    go, waits = ir.release(members)
    assert go == ("app1", "free", "other") and set(waits) == {"web1"}
    # everything settled: nothing to send
    assert ir.release([ir.Member("x", "p", 0, True)]) == ((), {})


# -- service-owned servers --------------------------------------------------------

S_EX = ir.Settings(excluded_projects=frozenset(["octavia-svc"]),
                   excluded_tags=frozenset(["amphora"]))


def test_excluded_by_project():
    why = ir.excluded(ServerFacts("u1"), S_EX, project_id="octavia-svc")
    assert "project octavia-svc is in [instance_repair] excluded_projects" \
        in why
    assert ir.excluded(ServerFacts("u1"), S_EX, project_id="p1") is None


def test_excluded_by_server_or_image_tag():
    assert "server tag amphora" in ir.excluded(
        ServerFacts("u1", tags=("amphora", "x")), S_EX)
    image = ImageFacts("i1", "amphora-x64-haproxy", tags=("amphora",))
    assert "image amphora-x64-haproxy has the tag amphora" in ir.excluded(
        ServerFacts("u1", image=image), S_EX)
    assert ir.excluded(ServerFacts("u1", tags=("web",)), S_EX) is None
    assert ir.excluded(ServerFacts("u1", tags=("amphora",)),
                       ir.Settings()) is None


# -- settings and options ------------------------------------------------------------

@pytest.mark.parametrize("kw,match", [
    ({"actions": ("hard_reboot", "start")}, "order of risk"),
    ({"actions": ("start", "start")}, "order of risk"),
    ({"actions": ("start", "reset")}, "unknown repair action"),
    ({"actions": ("start", "rebuild")}, "allow_rebuild"),
    ({"max_repairs": 0}, "max_repairs"),
    ({"window": -1}, "window"),
    ({"hold_percent": 101}, "hold_percent"),
])
def test_settings_refuse(kw, match):
    with pytest.raises(ValueError, match=match):
        ir.Settings(**kw)


def test_settings_from_the_defaults_match_the_dataclass():
    assert ir.Settings.from_conf(conf_pkg.make()) == ir.Settings()


def test_settings_from_conf():
    s = ir.Settings.from_conf(conf_pkg.make({"instance_repair": {
        "enabled": True, "actions": ["hard_reboot", "rebuild"],
        "allow_rebuild": True, "max_repairs": 5,
        "excluded_projects": ["svc", " "], "excluded_tags": ["amphora"]}}))
    assert s.enabled and s.actions == ("hard_reboot", "rebuild")
    assert s.excluded_projects == frozenset(["svc"])
    assert s.excluded_tags == frozenset(["amphora"]) and s.max_repairs == 5


@pytest.mark.parametrize("values,match", [
    ({"actions": ["hard_reboot", "start"]}, "order of risk"),
    ({"actions": ["start", "start"]}, "twice"),
    ({"actions": ["start", "rebuild"]}, "allow_rebuild"),
    ({"restart_group_key": " key"}, "restart_group_key"),
])
def test_options_checked_at_load(values, match):
    conf = conf_pkg.make({"instance_repair": values})
    with pytest.raises(cfg.Error, match=match):
        ir_conf.validate(conf)


def test_options_registered_with_the_others():
    assert ir_conf in conf_pkg.MODULES
    ir_conf.validate(conf_pkg.make())
    assert tuple(ir_conf.ACTIONS) == ir.ACTIONS
