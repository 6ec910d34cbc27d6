"""Evacuation order (priority, then age, then id) and admission under a
per-host limit and a cap across hosts."""

import itertools
import random

import pytest
from oslo_config import cfg

from instanceha.conf import evacuation, recovery
from instanceha.policy import evacuable as ev
from instanceha.policy import order as od
from instanceha.policy.evacuable import FlavorFacts, ServerFacts

KEY = od.DEFAULT_PRIORITY_KEY


def _s(sid, prio=None, created=None, host="c1", flavor_prio=None):
    meta = {} if prio is None else {KEY: prio}
    flavor = None if flavor_prio is None else FlavorFacts(
        "42", "m1.gold", {KEY: flavor_prio})
    return ServerFacts(sid, "n-" + sid, host=host, metadata=meta,
                       created_at=created, flavor=flavor)


# -- priority -----------------------------------------------------------------

@pytest.mark.parametrize("value,want", [
    ("0", 0), ("10", 10), (" 7 ", 7), ("+2", 2), ("-3", -3), ("007", 7),
    (5, 5), (-1, -1), ("999999999999999999", 999999999999999999)])
def test_parse_priority(value, want):
    assert od.parse_priority(value) == want


@pytest.mark.parametrize("value", [
    "", " ", "high", "1.5", "1e3", "0x10", "1 2", "--1", "9" * 19, None,
    True, False, 1.0, ["1"]])
def test_parse_priority_refuses(value):
    assert od.parse_priority(value) is None


def test_priority_default_and_source():
    assert od.priority_of(_s("a")) == od.Priority(0, "default 0")
    p = od.priority_of(_s("a", "10"))
    assert p.value == 10
    assert p.source == "server n-a says instanceha:priority=10"
    assert not p.problems


def test_malformed_priority_counts_as_zero_with_an_error():
    p = od.priority_of(_s("a", "high"))
    assert p.value == 0
    (e,) = p.problems
    assert e.level == ev.ERROR and e.value == "high" and e.object_id == "a"
    assert "server n-a (a)" in str(e) and "'high'" in str(e)
    assert "malformed" in p.source


def test_flavor_priority_when_consulted_server_wins():
    both = od.Settings(sources=("flavor", "server"))
    assert both.sources == ("server", "flavor")
    assert od.priority_of(_s("a", flavor_prio="5"), both).value == 5
    assert od.priority_of(_s("a", "1", flavor_prio="5"), both).value == 1
    flavor_only = od.Settings(sources=("flavor",))
    p = od.priority_of(_s("a", "100", flavor_prio="5"), flavor_only)
    assert p.value == 5 and p.source.startswith("flavor m1.gold says")
    assert od.priority_of(_s("a", "100"), flavor_only).value == 0
    assert od.priority_of(_s("a", "100")).value == 100      # default: server
    p = od.priority_of(_s("a", flavor_prio="x"), flavor_only)
    assert p.value == 0 and p.problems[0].scope == ev.FLAVOR


def test_custom_key_and_default():
    s = od.Settings(key="prio", default=-1)
    server = ServerFacts("a", metadata={"prio": "3", KEY: "9"})
    assert od.priority_of(server, s).value == 3
    assert od.priority_of(_s("b", "9"), s).value == -1


@pytest.mark.parametrize("kw", [{"key": ""}, {"key": "k "},
                                {"sources": ("image",)}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        od.Settings(**kw)


# -- ranking ------------------------------------------------------------------

SERVERS = [
    _s("b", "10", created=200.0),
    _s("a", "10", created=200.0),       # same priority and age: by id
    _s("c", "10", created=100.0),       # older first
    _s("d", None, created=50.0),
    _s("e", "bad", created=10.0),       # counts as 0
    _s("f", "-5", created=1.0),
    _s("g", None, created=None),        # unknown age: last among 0
    _s("h", "99", created=None),
]
WANT = ["h", "c", "a", "b", "e", "d", "g", "f"]


def test_rank_priority_then_age_then_id():
    r = od.rank(SERVERS)
    assert r.ids == WANT
    assert [x.position for x in r.servers] == list(range(1, 9))
    assert [x.priority for x in r.servers] == [99, 10, 10, 10, 0, 0, 0, -5]
    (p,) = r.problems
    assert p.value == "bad"


def test_rank_is_the_same_for_every_input_order():
    for perm in itertools.permutations(SERVERS[:6]):
        assert od.rank(list(perm)).ids == [x for x in WANT
                                           if x in "abcdef"]
    rng = random.Random(7)
    for _ in range(200):
        servers = SERVERS[:]
        rng.shuffle(servers)
        assert od.rank(servers).ids == WANT


def test_rank_reports_a_problem_once():
    servers = [_s("a", "x"), _s("a", "x")]
    assert len(od.rank(servers).problems) == 1


def test_rank_empty():
    r = od.rank([])
    assert r.servers == () and r.problems == ()


# -- admission ----------------------------------------------------------------

def test_per_host_limit_counts_servers_in_flight():
    servers = [_s("a", host="c1"), _s("b", host="c1"), _s("c", host="c1"),
               _s("d", host="c2")]
    a = od.admit(servers, od.Limits(per_host=2), {"c1": 1})
    assert a.send == ("a", "d")
    assert a.held == {
        "b": "host c1 has 2 evacuation(s) in flight (limit 2 per host)",
        "c": "host c1 has 2 evacuation(s) in flight (limit 2 per host)"}
    assert a.inflight == {"c1": 2, "c2": 1} and a.inflight_total == 3


def test_global_cap_across_hosts():
    servers = [_s("a", host="c1"), _s("b", host="c2"), _s("c", host="c3")]
    a = od.admit(servers, od.Limits(per_host=5, total=4),
                 {"c1": 1, "c9": 2})
    assert a.send == ("a",)
    assert a.held["b"] == "4 evacuation(s) in flight across hosts (limit 4)"
    assert a.inflight_total == 4


def test_explicit_inflight_total():
    a = od.admit([_s("a"), _s("b")], od.Limits(total=3), {}, inflight_total=2)
    assert a.send == ("a",) and "b" in a.held


def test_no_limits_sends_everything():
    servers = [_s(str(i), host="c%d" % (i % 3)) for i in range(20)]
    a = od.admit(servers, od.Limits(), {"c0": 100})
    assert len(a.send) == 20 and not a.held and a.inflight_total == 120


def test_work_conserving_lower_priority_of_another_host_goes():
    r = od.rank([_s("hi", "10", host="c1"), _s("lo", "0", host="c2")])
    a = od.admit(r.servers, od.Limits(per_host=1), {"c1": 1})
    assert a.send == ("lo",) and "hi" in a.held


def test_strict_priority_holds_lower_priorities_behind_a_waiting_one():
    r = od.rank([_s("hi", "10", host="c1"), _s("eq", "10", host="c2"),
                 _s("lo", "0", host="c3")])
    a = od.admit(r.servers, od.Limits(per_host=1, strict=True), {"c1": 1})
    assert a.send == ("eq",)
    assert a.held["lo"] == ("waits for server hi (priority 10) to be sent "
                            "first")
    # ServerFacts carry no priority: strict changes nothing
    a = od.admit([_s("hi", host="c1"), _s("lo", host="c3")],
                 od.Limits(per_host=1, strict=True), {"c1": 1})
    assert a.send == ("lo",)


def test_a_server_listed_twice_counts_once():
    a = od.admit([_s("a"), _s("a"), _s("b")], od.Limits(per_host=2))
    assert a.send == ("a", "b") and not a.held


def test_ranked_and_plain_servers_are_both_accepted():
    r = od.rank([_s("a"), _s("b")])
    assert od.admit(r.servers, od.Limits()).send == \
        od.admit([x.server for x in r.servers], od.Limits()).send


def test_server_without_host_is_its_own_group():
    a = od.admit([_s("a", host=None), _s("b", host=None)],
                 od.Limits(per_host=1))
    assert a.send == ("a",) and "host None" in a.held["b"]


@pytest.mark.parametrize("kw", [{"per_host": 0}, {"total": 0},
                                {"per_host": -1}, {"total": 1.5},
                                {"per_host": True}])
def test_bad_limits_are_refused(kw):
    with pytest.raises(ValueError):
        od.Limits(**kw)


def test_negative_inflight_is_refused():
    with pytest.raises(ValueError):
        od.admit([_s("a")], od.Limits(), {"c1": -1})
    with pytest.raises(ValueError):
        od.admit([_s("a")], od.Limits(), {}, inflight_total=-1)


def test_admission_invariants_over_many_cases():
    """Limits are never exceeded (beyond what was already in flight), the
    order is kept, every server is sent or held with a reason, and a held
    server really had no room (greedy, work-conserving)."""
    rng = random.Random(11)
    hosts = ["c1", "c2", "c3", None]
    for case in range(3000):
        servers = [_s("s%02d" % i, str(rng.randint(-2, 2)),
                      created=float(rng.randint(0, 5)),
                      host=rng.choice(hosts))
                   for i in range(rng.randint(0, 12))]
        per_host = rng.choice([None, 1, 2, 3])
        total = rng.choice([None, 1, 3, 6])
        strict = rng.random() < 0.3
        inflight = {h: rng.randint(0, 3) for h in hosts
                    if rng.random() < 0.5}
        before_total = sum(inflight.values())
        r = od.rank(servers)
        a = od.admit(r.servers, od.Limits(per_host, total, strict), inflight)
        ids = r.ids
        assert set(a.send) | set(a.held) == set(ids), case
        assert not set(a.send) & set(a.held)
        assert list(a.send) == [i for i in ids if i in a.send]
        assert a.inflight_total == before_total + len(a.send)
        host_of = {x.id: x.host for x in r.servers}
        for h in hosts:
            sent_here = sum(1 for i in a.send if host_of[i] == h)
            assert a.inflight.get(h, 0) == inflight.get(h, 0) + sent_here
            if per_host is not None and sent_here:
                assert a.inflight[h] <= per_host
        if total is not None and a.send:
            assert a.inflight_total <= total
        for i, why in a.held.items():
            assert why
            if why.startswith("waits for"):
                assert strict
                continue
            h = host_of[i]
            assert ((per_host is not None and a.inflight.get(h, 0) >= per_host)
                    or (total is not None and a.inflight_total >= total)), case


def test_plan_ranks_then_admits():
    ranking, admission = od.plan(
        [_s("lo", "0", host="c1"), _s("hi", "5", host="c1")], od.Settings(),
        od.Limits(per_host=1))
    assert ranking.ids == ["hi", "lo"]
    assert admission.send == ("hi",) and "lo" in admission.held


# -- configuration ------------------------------------------------------------

def _conf(**overrides):
    conf = cfg.ConfigOpts()
    recovery.register_opts(conf)
    evacuation.register_opts(conf)
    conf([], default_config_files=[])
    for k, v in overrides.items():
        conf.set_override(k, v, "recovery")
    return conf


def test_settings_and_limits_from_conf():
    conf = _conf()
    assert od.Settings.from_conf(conf) == od.Settings()
    assert od.Limits.from_conf(conf) == od.Limits(per_host=10, total=None,
                                                  strict=False)
    conf = _conf(priority_key="p", priority_sources=["flavor"],
                 max_inflight=30, strict_priority=True)
    assert od.Settings.from_conf(conf) == od.Settings(key="p",
                                                      sources=("flavor",))
    assert od.Limits.from_conf(conf) == od.Limits(per_host=10, total=30,
                                                  strict=True)
