"""Repair levels and suspensions: nearest scope wins for the level, a
suspension anywhere stops automatic repair until it expires, malformed
values fail towards doing nothing."""

import itertools
import json

import pytest
from oslo_config import cfg

from instanceha.conf import recovery
from instanceha.policy import evacuable as ev
from instanceha.policy import repair as rp
from instanceha.policy.evacuable import AggregateFacts, ServerFacts
from instanceha.policy.repair import Level

NOW = 1893456000.0                      # 2030-01-01T00:00:00Z
FUTURE = "2030-01-01T01:00:00Z"         # NOW + 3600
LATER = "2030-01-02T00:00:00Z"          # NOW + 86400
PAST = "2029-12-31T23:00:00Z"           # NOW - 3600
S = rp.Settings()
RK, SK = rp.DEFAULT_REPAIR_KEY, rp.DEFAULT_SUSPEND_KEY
UNSET = object()


def _meta(level=UNSET, until=UNSET):
    out = {}
    if level is not UNSET:
        out[RK] = level
    if until is not UNSET:
        out[SK] = until
    return out


def _server(level=UNSET, until=UNSET, aggregates=(), sid="u1"):
    """aggregates: [(level, until)]."""
    aggs = tuple(AggregateFacts("rack%d" % i, str(i), _meta(lv, un))
                 for i, (lv, un) in enumerate(aggregates))
    return ServerFacts(sid, "web-1", host="c1", metadata=_meta(level, until),
                       aggregates=aggs)


def _global(level=UNSET, until=UNSET):
    return AggregateFacts("instanceha-global", "g", _meta(level, until))


# -- parsing ------------------------------------------------------------------

@pytest.mark.parametrize("value,want", [
    ("none", Level.NONE), ("NONE", Level.NONE), (" None ", Level.NONE),
    ("evacuate", Level.EVACUATE), ("Evacuate\n", Level.EVACUATE)])
def test_parse_level(value, want):
    assert rp.parse_level(value) == (want, None)


@pytest.mark.parametrize("value,why", [
    ("reboot", "not supported yet"), ("rebuild", "not supported yet"),
    ("evacute", "not a level"), ("", "not a level"), ("0", "not a level"),
    ("true", "not a level"), (None, "not a level name"),
    (20, "not a level name")])
def test_parse_level_refuses(value, why):
    level, reason = rp.parse_level(value)
    assert level is None and why in reason


def test_levels_are_ordered_with_room_for_reboot_and_rebuild():
    assert Level.NONE < rp.RESERVED["reboot"] < Level.EVACUATE \
        < rp.RESERVED["rebuild"]
    assert [lv.label for lv in Level] == ["none", "evacuate"]


@pytest.mark.parametrize("value,want", [
    ("forever", None), ("FOREVER", None), (" Forever ", None),
    ("2030-01-01T00:00:00Z", NOW), ("2030-01-01T00:00:00z", NOW),
    ("2030-01-01T00:00Z", NOW), ("2030-01-01T00:00:00", NOW),
    ("2030-01-01 00:00:00", NOW), ("2030-01-01T00:00:00 UTC", NOW),
    ("2030-01-01T00:00:00+00:00", NOW), ("2030-01-01T02:00:00+02:00", NOW),
    ("2029-12-31T19:30:00-0430", NOW), ("2030-01-01T00:00:00.5Z", NOW + 0.5),
    ("2030-01-01T00:00:00.000001Z", NOW + 0.000001),
    (" " + FUTURE, NOW + 3600)])
def test_parse_until(value, want):
    ok, until, why = rp.parse_until(value)
    assert ok and why is None
    assert until == pytest.approx(want) if want is not None else until is None


@pytest.mark.parametrize("value", [
    "", "tomorrow", "2030-01-01", "2030-13-01T00:00:00Z",
    "2030-02-30T00:00:00Z", "2030-01-01T24:00:00Z",
    "2030-01-01T00:00:00+25:00",
    "2030-01-01T00:00:00.1234567Z", "1893456000", "01/01/2030 00:00",
    "never", None, 1893456000])
def test_parse_until_refuses(value):
    ok, until, why = rp.parse_until(value)
    assert not ok and until is None and why


def test_format_time():
    assert rp.format_time(NOW) == "2030-01-01T00:00:00Z"
    assert rp.format_time(None) == "forever"


# -- the level, exhaustively --------------------------------------------------

LEVELS = [UNSET, "none", "evacuate", "bogus"]
AGG_LEVELS = [(), ("none",), ("evacuate",), ("evacuate", "none"),
              ("bogus",), ("evacuate", "bogus"), ("evacuate", "evacuate")]
GLOBALS = [None, UNSET, "none", "evacuate", "bogus"]
RANK = {"none": Level.NONE, "evacuate": Level.EVACUATE, "bogus": Level.NONE}


def _level_oracle(server, aggs, glob, default):
    if server is not UNSET:
        return RANK[server], rp.SERVER
    if aggs:
        return min(RANK[a] for a in aggs), rp.AGGREGATE
    if glob not in (None, UNSET):
        return RANK[glob], rp.GLOBAL
    return default, rp.DEFAULT


@pytest.mark.parametrize("default", list(Level))
def test_nearest_scope_wins_for_every_combination(default):
    s = rp.Settings(default_level=default,
                    global_aggregate="instanceha-global")
    for server, aggs, glob in itertools.product(LEVELS, AGG_LEVELS, GLOBALS):
        gscope = None if glob is None else _global(glob)
        d = rp.decide(_server(server, aggregates=[(a, UNSET) for a in aggs]),
                      NOW, s, gscope)
        want = _level_oracle(server, aggs, glob, default)
        assert (d.level, d.level_from.scope) == want, (server, aggs, glob)
        assert not d.suspended and d.allows(Level.NONE)
        assert d.allows() == (d.level >= Level.EVACUATE)
        errors = [p for p in d.problems if p.level == ev.ERROR]
        bad = [server].count("bogus") + aggs.count("bogus") + \
            [glob].count("bogus")
        assert len(errors) == bad


def test_malformed_level_counts_as_none_and_still_wins():
    d = rp.decide(_server("evacute", aggregates=[("evacuate", UNSET)]),
                  NOW, S)
    assert d.level is Level.NONE and d.level_from.scope == rp.SERVER
    assert not d.level_from.valid and not d.allows()
    (p,) = d.problems
    assert p.level == ev.ERROR and p.value == "evacute"
    assert "server web-1 (u1)" in str(p) and "counted as none" in str(p)


def test_reserved_level_is_refused_with_its_own_reason():
    d = rp.decide(_server("reboot"), NOW, S)
    assert d.level is Level.NONE and "not supported yet" in str(d.problems[0])


def test_aggregates_disagreeing_lowest_wins_with_a_warning():
    d = rp.decide(_server(aggregates=[("evacuate", UNSET), ("none", UNSET)]),
                  NOW, S)
    assert d.level is Level.NONE and d.level_from.object_name == "rack1"
    (p,) = d.problems
    assert p.level == ev.WARNING and "lowest, none, wins" in str(p)
    assert "aggregate rack0=evacuate" in str(p)


def test_default_level_applies_when_nothing_is_set():
    d = rp.decide(_server(), NOW, S)
    assert d.level is Level.EVACUATE and d.level_from.scope == rp.DEFAULT
    assert d.allows() and d.why_not() is None
    d = rp.decide(_server(), NOW, rp.Settings(default_level=Level.NONE))
    assert not d.allows()
    assert d.why_not() == ("repair level none from the default ([recovery] "
                           "repair_level): no automatic evacuation")


def test_reason_names_where_the_level_comes_from():
    d = rp.decide(_server(aggregates=[(" none ", UNSET)]), NOW, S)
    assert d.reason == ("repair level none from aggregate rack0 "
                        "(instanceha:repair=none): no automatic evacuation")
    d = rp.decide(_server("evacuate"), NOW, S)
    assert d.reason == ("repair level evacuate from server web-1 "
                        "(instanceha:repair=evacuate)")


def test_global_aggregate_is_not_also_a_host_aggregate():
    glob = AggregateFacts("instanceha-global", "g", {RK: "none"}, ("c1",))
    server = ServerFacts("u1", "web-1", host="c1", aggregates=(glob,))
    s = rp.Settings(global_aggregate="instanceha-global")
    d = rp.decide(server, NOW, s, glob)
    assert d.level is Level.NONE and d.level_from.scope == rp.GLOBAL
    assert "global aggregate instanceha-global" in d.reason
    assert [x.scope for x in rp.scopes(server, s, glob)] == ["server",
                                                             "global"]


def test_server_may_not_raise_when_told_so():
    s = rp.Settings(server_may_raise=False)
    d = rp.decide(_server("evacuate", aggregates=[("none", UNSET)]), NOW, s)
    assert d.level is Level.NONE and d.level_from.scope == rp.AGGREGATE
    (p,) = d.problems
    assert "may only lower" in str(p)
    # lowering is fine, and so is raising above nothing but the default
    d = rp.decide(_server("none", aggregates=[("evacuate", UNSET)]), NOW, s)
    assert d.level is Level.NONE and d.level_from.scope == rp.SERVER
    s2 = rp.Settings(server_may_raise=False, default_level=Level.NONE)
    d = rp.decide(_server("evacuate"), NOW, s2)
    assert d.level is Level.NONE and d.level_from.scope == rp.DEFAULT
    d = rp.decide(_server("evacuate"), NOW, s)
    assert d.level is Level.EVACUATE and not d.problems
    e = rp.explain(_server("evacuate", aggregates=[("none", UNSET)]), NOW, s)
    assert any("may not raise" in x.note for x in e.lines)


# -- suspensions, exhaustively ------------------------------------------------

MARKS = [UNSET, FUTURE, LATER, PAST, "forever", "soon"]
AT = {FUTURE: NOW + 3600, LATER: NOW + 86400, PAST: NOW - 3600}


def test_a_suspension_at_any_scope_suspends_until_all_expire():
    s = rp.Settings(global_aggregate="instanceha-global")
    for srv, agg, glob in itertools.product(MARKS, MARKS, MARKS):
        server = _server("evacuate", srv, aggregates=[("evacuate", agg)])
        d = rp.decide(server, NOW, s, _global(until=glob))
        marks = [m for m in (srv, agg, glob) if m is not UNSET]
        live = [m for m in marks if m != PAST]
        assert d.suspended == bool(live), (srv, agg, glob)
        assert d.allows() == (not live)
        assert d.level is Level.EVACUATE
        assert len(d.expired) == marks.count(PAST)
        assert all(m.state == rp.EXPIRED for m in d.expired)
        assert len(d.suspensions) == len(live)
        if not live:
            assert d.until is None
        elif "forever" in live or "soon" in live:
            assert d.until is None
        else:
            assert d.until == max(AT[m] for m in live)
        errors = [p for p in d.problems if p.level == ev.ERROR]
        assert len(errors) == marks.count("soon")
        if live:
            assert d.why_not().startswith("automatic repair suspended")


def test_suspension_expires_exactly_at_its_time():
    server = _server(until=FUTURE)
    assert rp.decide(server, NOW + 3599.9, S).suspended
    d = rp.decide(server, NOW + 3600, S)
    assert not d.suspended
    (m,) = d.expired
    assert (m.scope, m.object_id, m.key, m.value) == (
        rp.SERVER, "u1", SK, FUTURE)
    assert "remove it" in m.describe()


def test_suspension_applies_whatever_the_level():
    d = rp.decide(_server("none", until="forever"), NOW, S)
    assert d.suspended and not d.allows(Level.NONE)
    assert d.reason.startswith("automatic repair suspended forever by "
                               "server web-1")


def test_malformed_suspension_suspends_until_fixed():
    d = rp.decide(_server(aggregates=[(UNSET, "next tuesday")]), NOW, S)
    assert d.suspended and d.until is None
    (m,) = d.suspensions
    assert m.state == rp.MALFORMED and "treated as suspended" in m.describe()
    (p,) = d.problems
    assert p.level == ev.ERROR and p.value == "next tuesday"
    assert "aggregate rack0 (0)" in str(p)
    assert "until fixed by aggregate rack0" in d.reason


def test_suspension_cannot_be_lifted_from_a_nearer_scope():
    server = _server("evacuate", aggregates=[("evacuate", "forever")])
    d = rp.decide(server, NOW, S)
    assert d.suspended and d.suspensions[0].scope == rp.AGGREGATE


def test_reason_lists_the_suspension_that_lasts_longest():
    server = _server(until=FUTURE, aggregates=[(UNSET, LATER)])
    d = rp.decide(server, NOW, S)
    assert d.until == NOW + 86400
    assert d.reason.startswith("automatic repair suspended until "
                               "2030-01-02T00:00:00Z by aggregate rack0")
    assert "and 1 more marker(s)" in d.reason


# -- problems -----------------------------------------------------------------

def test_misspelt_keys_are_warned_and_ignored():
    server = ServerFacts("u1", "web-1", metadata={
        "instanceha:suspend_until": "forever", "Instanceha:Repair": "none",
        "instanceha_repair": "none", "instanceha:priority": "5",
        "evacuable": "true", "other": "x"})
    d = rp.decide(server, NOW, rp.Settings(
        known_keys=("instanceha:priority",)))
    assert not d.suspended and d.level is Level.EVACUATE
    assert sorted(p.key for p in d.problems) == [
        "Instanceha:Repair", "instanceha:suspend_until", "instanceha_repair"]
    assert all(p.level == ev.WARNING for p in d.problems)


def test_problems_of_a_shared_aggregate_are_equal_across_servers():
    agg = AggregateFacts("rack1", "1", {RK: "bogus"})
    a = rp.decide(ServerFacts("u1", aggregates=(agg,)), NOW, S).problems
    b = rp.decide(ServerFacts("u2", aggregates=(agg,)), NOW, S).problems
    assert a == b and len(set(a) | set(b)) == 1


# -- explain ------------------------------------------------------------------

def test_explain_lists_every_object_and_its_part():
    s = rp.Settings(global_aggregate="instanceha-global")
    server = _server("bogus", aggregates=[("none", PAST)])
    e = rp.explain(server, NOW, s, _global("evacuate", FUTURE))
    assert e.decision == rp.decide(server, NOW, s, _global("evacuate",
                                                           FUTURE))
    notes = [(x.where, x.key, x.value, x.note) for x in e.lines]
    assert notes == [
        ("server web-1", RK, "bogus", "malformed, counted as none; wins"),
        ("server web-1", SK, None, "not set"),
        ("aggregate rack0", RK, "none", "overridden by server web-1"),
        ("aggregate rack0", SK, PAST,
         "expired at 2029-12-31T23:00:00Z: no effect, remove it"),
        ("global aggregate instanceha-global", RK, "evacuate",
         "overridden by server web-1"),
        ("global aggregate instanceha-global", SK, FUTURE,
         "suspends until 2030-01-01T01:00:00Z"),
    ]
    text = e.text()
    assert text.splitlines()[0] == e.decision.reason
    assert "evacuation not allowed" in text
    assert "error: server web-1 (u1): instanceha:repair='bogus'" in text


def test_explain_shows_the_default_when_it_decides():
    e = rp.explain(_server(), NOW, S)
    assert e.lines[-1].scope == rp.DEFAULT and e.lines[-1].note == "wins"
    assert "evacuation allowed" in e.text()


def test_explain_as_dict_is_json():
    e = rp.explain(_server(until="forever", aggregates=[(UNSET, PAST)]),
                   NOW, S)
    d = json.loads(json.dumps(e.as_dict()))
    assert d["suspended"] and d["suspended_until"] == "forever"
    assert d["level"] == "evacuate" and not d["evacuation_allowed"]
    assert d["level_from"]["scope"] == "default"
    assert d["expired"][0]["value"] == PAST
    assert len(d["lines"]) == 5


# -- settings -----------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    {"repair_key": ""}, {"suspend_key": " x"}, {"repair_key": None},
    {"repair_key": "a", "suspend_key": "a"}, {"default_level": 5}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        rp.Settings(**kw)


def _conf(**overrides):
    conf = cfg.ConfigOpts()
    recovery.register_opts(conf)
    conf([], default_config_files=[])
    for k, v in overrides.items():
        conf.set_override(k, v, "recovery")
    return conf


def test_settings_from_conf():
    s = rp.Settings.from_conf(_conf())
    assert s == rp.Settings(known_keys=("instanceha:priority", "evacuable"))
    s = rp.Settings.from_conf(_conf(repair_level="none",
                                    global_aggregate="ha-global",
                                    server_may_raise_level=False))
    assert s.default_level is Level.NONE and s.global_aggregate == "ha-global"
    assert s.server_may_raise is False
    assert rp.Settings.from_conf(_conf(global_aggregate="")).global_aggregate \
        is None
