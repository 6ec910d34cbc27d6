"""Evacuable tagging: exact key, nearest scope wins, strict values, each
malformed object reported once and then saying nothing."""

import itertools

import pytest
from oslo_config import cfg

from instanceha.conf import recovery
from instanceha.policy import evacuable as ev
from instanceha.policy.evacuable import (AggregateFacts, FlavorFacts,
                                         ImageFacts, ServerFacts)

ON = ev.Settings(enabled=True)
BAD = "maybe"
UNSET = object()


def _server(server=UNSET, image=UNSET, flavor=UNSET, aggregates=(),
            tags=(), image_tags=(), no_image=False, no_flavor=False,
            sid="u1", key="evacuable"):
    meta = {} if server is UNSET else {key: server}
    img = None if no_image else ImageFacts(
        "img-1", "cirros", {} if image is UNSET else {key: image},
        tuple(image_tags))
    fl = None if no_flavor else FlavorFacts(
        "42", "m1.pinned", {} if flavor is UNSET else {key: flavor})
    aggs = tuple(AggregateFacts("rack%d" % i, str(i), {key: v})
                 for i, v in enumerate(aggregates))
    return ServerFacts(sid, "web-1", host="c1", metadata=meta,
                       tags=tuple(tags), image=img, flavor=fl,
                       aggregates=aggs)


# -- tagging off --------------------------------------------------------------

def test_tagging_off_every_server_is_evacuable_whatever_it_says():
    for v in ("false", BAD, UNSET):
        d = ev.decide(_server(server=v, flavor=v, aggregates=["false"]),
                      ev.Settings())
        assert d.evacuable and d.source == "off" and not d.problems
        assert "tagging is off" in d.reason


def test_default_settings_are_off_with_the_upstream_key():
    s = ev.Settings()
    assert not s.enabled and s.key == "evacuable"
    assert s.sources == ev.SCOPES and s.untagged is False


# -- precedence, exhaustively -------------------------------------------------

VALUES = [UNSET, "true", "false", BAD]
AGG_SETS = [(), ("true",), ("false",), ("true", "false"), (BAD,),
            (BAD, "true"), ("true", "true")]


def _says(v):
    return {"true": True, "false": False}.get(v) if v is not UNSET else None


def _oracle(server, image, flavor, aggs, sources, untagged):
    """The expected (evacuable, source) from the documented rules."""
    candidates = {
        ev.SERVER: _says(server), ev.IMAGE: _says(image),
        ev.FLAVOR: _says(flavor),
    }
    agg_says = [_says(a) for a in aggs if _says(a) is not None]
    candidates[ev.AGGREGATE] = (None if not agg_says
                                else all(agg_says))
    for scope in ev.SCOPES:
        if scope in sources and candidates[scope] is not None:
            return candidates[scope], scope
    return untagged, "untagged"


def _subsets():
    for n in range(1, len(ev.SCOPES) + 1):
        yield from itertools.combinations(ev.SCOPES, n)


@pytest.mark.parametrize("untagged", [False, True])
def test_nearest_scope_wins_for_every_combination(untagged):
    count = 0
    for sources in _subsets():
        s = ev.Settings(enabled=True, sources=sources, untagged=untagged)
        for server, image, flavor, aggs in itertools.product(
                VALUES, VALUES, VALUES, AGG_SETS):
            d = ev.decide(_server(server, image, flavor, aggs), s)
            want = _oracle(server, image, flavor, aggs, sources, untagged)
            assert (d.evacuable, d.source) == want, (
                sources, server, image, flavor, aggs, d)
            # every malformed value in a consulted scope is an error
            bad = sum(1 for scope, v in ((ev.SERVER, server),
                                         (ev.IMAGE, image),
                                         (ev.FLAVOR, flavor))
                      if v == BAD and scope in sources)
            if ev.AGGREGATE in sources:
                bad += aggs.count(BAD)
            errors = [p for p in d.problems if p.level == ev.ERROR]
            assert len(errors) == bad
            assert len(d.trail) == len(sources)
            count += 1
    assert count == 15 * 4 * 4 * 4 * len(AGG_SETS)


def test_the_documented_order_is_server_image_flavor_aggregate():
    d = ev.decide(_server("false", "true", "true", ["true"]), ON)
    assert (d.evacuable, d.source) == (False, ev.SERVER)
    d = ev.decide(_server(UNSET, "false", "true", ["true"]), ON)
    assert (d.evacuable, d.source) == (False, ev.IMAGE)
    d = ev.decide(_server(UNSET, UNSET, "false", ["true"]), ON)
    assert (d.evacuable, d.source) == (False, ev.FLAVOR)
    d = ev.decide(_server(UNSET, UNSET, UNSET, ["false"]), ON)
    assert (d.evacuable, d.source) == (False, ev.AGGREGATE)
    d = ev.decide(_server(UNSET, UNSET, "true", ["false"]), ON)
    assert (d.evacuable, d.source) == (True, ev.FLAVOR)


def test_reason_names_the_object_and_the_value():
    d = ev.decide(_server(flavor="false"), ON)
    assert d.reason == "flavor m1.pinned says evacuable=false"
    d = ev.decide(_server(image="TRUE"), ON)
    assert d.reason == "image cirros says evacuable=TRUE"
    d = ev.decide(_server(aggregates=["false"]), ON)
    assert d.reason == "aggregate rack0 says evacuable=false"
    d = ev.decide(_server(tags=["evacuable"]), ON)
    assert d.reason == "server web-1 has the tag evacuable"


def test_untagged_server_reason_says_why():
    d = ev.decide(_server(), ON)
    assert not d.evacuable and d.source == "untagged"
    assert "not evacuable" in d.reason and "evacuable" in d.reason
    d = ev.decide(_server(), ev.Settings(enabled=True, untagged=True))
    assert d.evacuable and "untagged servers are evacuated" in d.reason


def test_trail_shows_overridden_scopes():
    d = ev.decide(_server(flavor="false", aggregates=["true"]), ON)
    assert d.trail == (
        ("server", "server web-1: evacuable not set"),
        ("image", "image cirros: evacuable not set"),
        ("flavor", "flavor m1.pinned says evacuable=false"),
        ("aggregate", "aggregate rack0 says evacuable=true "
                      "(overridden by flavor m1.pinned)"))


def test_volume_backed_server_without_image_and_unknown_flavor():
    d = ev.decide(_server(no_image=True, no_flavor=True,
                          aggregates=["true"]), ON)
    assert d.evacuable and d.source == ev.AGGREGATE
    assert ("image", "no image known") in d.trail
    assert ("flavor", "no flavor known") in d.trail


def test_left_out_sources_are_not_consulted():
    s = ev.Settings(enabled=True, sources=("flavor", "aggregate"))
    d = ev.decide(_server(server="true", tags=["evacuable"],
                          image="true", flavor=UNSET), s)
    assert not d.evacuable and d.source == "untagged"
    d = ev.decide(_server(server=BAD), s)
    assert not d.problems        # a scope not consulted reports nothing


def test_sources_are_kept_in_precedence_order_whatever_their_order():
    s = ev.Settings(enabled=True, sources=("aggregate", "server"))
    assert s.sources == ("server", "aggregate")


# -- values -------------------------------------------------------------------

@pytest.mark.parametrize("value,want", [
    ("true", True), ("True", True), ("TRUE", True), (" true ", True),
    ("tRuE\n", True), ("false", False), ("False", False), (" FALSE", False),
    (True, True), (False, False)])
def test_accepted_values(value, want):
    assert ev.parse_bool(value) is want


@pytest.mark.parametrize("value", [
    "yes", "no", "1", "0", "on", "off", "", "  ", "truee", "t", "f",
    "true false", None, 1, 0, 1.0, ["true"]])
def test_rejected_values(value):
    assert ev.parse_bool(value) is None


def test_malformed_value_is_an_error_naming_object_and_value():
    d = ev.decide(_server(flavor="yes"), ON)
    assert not d.evacuable and d.source == "untagged"
    (p,) = d.problems
    assert p.level == ev.ERROR and p.scope == ev.FLAVOR
    assert (p.object_id, p.object_name, p.key, p.value) == (
        "42", "m1.pinned", "evacuable", "yes")
    assert "flavor m1.pinned (42)" in str(p) and "'yes'" in str(p)


def test_malformed_object_says_nothing_and_the_next_scope_decides():
    d = ev.decide(_server(server="1", image="no", flavor=BAD,
                          aggregates=["true"]), ON)
    assert d.evacuable and d.source == ev.AGGREGATE
    assert len(d.problems) == 3


def test_error_reported_once_per_object_across_servers():
    flavor = FlavorFacts("42", "m1.pinned", {"evacuable": "maybe"})
    agg = AggregateFacts("rack1", "7", {"evacuable": "sometimes"})
    servers = [ServerFacts("u%d" % i, "s%d" % i, host="c1", flavor=flavor,
                           aggregates=(agg,)) for i in range(5)]
    v = ev.decide_all(servers, ON)
    assert len(v.decisions) == 5
    assert [(p.scope, p.value) for p in v.problems] == [
        ("flavor", "maybe"), ("aggregate", "sometimes")]
    assert v.evacuable == []
    assert set(v.skipped) == {"u0", "u1", "u2", "u3", "u4"}


def test_problems_are_hashable_for_a_seen_set_across_passes():
    a = ev.decide(_server(flavor=BAD), ON).problems
    b = ev.decide(_server(flavor=BAD, sid="u2"), ON).problems
    assert set(a) == set(b) and len(set(a) | set(b)) == 1


# -- exact matching -----------------------------------------------------------

def test_key_is_matched_exactly_near_misses_warned_and_ignored():
    flavor = FlavorFacts("42", "m1", {
        "aggregate_instance_extra_specs:evacuable": "true",
        "Evacuable": "true", "EVACUABLE": "true"})
    d = ev.decide(ServerFacts("u1", flavor=flavor), ON)
    assert not d.evacuable and d.source == "untagged"
    assert sorted(p.value for p in d.problems) == ["true"] * 3
    assert all(p.level == ev.WARNING for p in d.problems)
    assert sorted(str(p).split("'")[1] for p in d.problems) == [
        "EVACUABLE", "Evacuable", "aggregate_instance_extra_specs:evacuable"]
    assert all("exact match only" in str(p) for p in d.problems)


def test_unrelated_keys_containing_the_key_are_silently_ignored():
    flavor = FlavorFacts("42", "m1", {"notevacuable": "true",
                                      "evacuable_zone": "true",
                                      "hw:cpu_policy": "dedicated"})
    d = ev.decide(ServerFacts("u1", flavor=flavor), ON)
    assert not d.evacuable and not d.problems


def test_near_misses():
    names = ["evacuable", "Evacuable", "foo:evacuable", "evacuable=false",
             "evacuable:no", "evacuables", "xevacuable", 3]
    assert ev.near_misses("evacuable", names) == [
        "Evacuable", "evacuable:no", "evacuable=false", "foo:evacuable"]


def test_custom_key():
    s = ev.Settings(enabled=True, key="instanceha:evacuable")
    d = ev.decide(_server(flavor="false", key="instanceha:evacuable"), s)
    assert not d.evacuable and "instanceha:evacuable=false" in d.reason
    d = ev.decide(_server(flavor="false"), s)     # the old key: ignored
    assert d.source == "untagged"


# -- tags ---------------------------------------------------------------------

def test_server_and_image_tag_equal_to_the_key_mean_true():
    assert ev.decide(_server(tags=["evacuable"]), ON).source == ev.SERVER
    d = ev.decide(_server(image_tags=["evacuable"], flavor="false"), ON)
    assert d.evacuable and d.source == ev.IMAGE
    assert d.reason == "image cirros has the tag evacuable"


def test_tag_and_metadata_disagreeing_on_one_object_false_wins():
    d = ev.decide(_server(server="false", tags=["evacuable"]), ON)
    assert not d.evacuable and d.source == ev.SERVER
    (p,) = d.problems
    assert p.level == ev.WARNING and "false wins" in str(p)
    d = ev.decide(_server(image="false", image_tags=["evacuable"]), ON)
    assert not d.evacuable and d.source == ev.IMAGE


def test_tag_and_metadata_agreeing_is_no_problem():
    d = ev.decide(_server(server="true", tags=["evacuable"]), ON)
    assert d.evacuable and not d.problems


def test_tags_with_a_value_or_another_case_are_warned_and_ignored():
    for tag in ("evacuable=false", "Evacuable", "evacuable:true"):
        d = ev.decide(_server(tags=[tag], flavor="true"), ON)
        assert d.evacuable and d.source == ev.FLAVOR, tag
        (p,) = d.problems
        assert p.level == ev.WARNING and repr(tag) in str(p)


def test_flavor_and_aggregates_have_no_tag_form():
    # extra specs and aggregate metadata are mappings; nothing else to read
    d = ev.decide(_server(aggregates=[]), ON)
    assert d.source == "untagged"


# -- aggregates ---------------------------------------------------------------

def test_aggregates_disagreeing_false_wins_with_a_warning():
    d = ev.decide(_server(aggregates=["true", "false"]), ON)
    assert not d.evacuable
    assert d.reason == "aggregate rack1 says evacuable=false"
    (p,) = d.problems
    assert "aggregate rack1" in str(p) and "aggregate rack0" in str(p)


def test_aggregates_agreeing():
    d = ev.decide(_server(aggregates=["true", "true"]), ON)
    assert d.evacuable and not d.problems
    d = ev.decide(_server(aggregates=["false", "false"]), ON)
    assert not d.evacuable and not d.problems


def test_aggregates_of_host():
    a = AggregateFacts("b", "1", hosts=("c1", "c2"))
    b = AggregateFacts("a", "2", hosts=("c1",))
    c = AggregateFacts("c", "3", hosts=("c2",))
    assert ev.aggregates_of("c1", [a, b, c]) == (b, a)
    assert ev.aggregates_of("c9", [a, b, c]) == ()


# -- settings -----------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    {"key": ""}, {"key": " evacuable"}, {"key": None},
    {"sources": ("server", "host")}, {"enabled": True, "sources": ()}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        ev.Settings(**kw)


def _conf(**overrides):
    conf = cfg.ConfigOpts()
    recovery.register_opts(conf)
    conf([], default_config_files=[])
    for k, v in overrides.items():
        conf.set_override(k, v, "recovery")
    return conf


def test_settings_from_conf():
    s = ev.Settings.from_conf(_conf())
    assert s == ev.Settings()
    s = ev.Settings.from_conf(_conf(evacuable_tagging=True,
                                    evacuable_key="ha",
                                    evacuable_sources=["flavor", "image"],
                                    evacuable_when_untagged=True))
    assert s == ev.Settings(enabled=True, key="ha",
                            sources=("image", "flavor"), untagged=True)


def test_conf_validate():
    recovery.validate(_conf())
    for bad in ({"evacuable_key": ""}, {"repair_key": " x"},
                {"suspend_key": "instanceha:repair"},
                {"evacuable_tagging": True, "evacuable_sources": []}):
        with pytest.raises(cfg.Error):
            recovery.validate(_conf(**bad))


def test_every_recovery_option_has_help():
    for opt in recovery.OPTS:
        assert opt.help and len(opt.help) > 20, opt.name


# -- from Nova's and Glance's answers -----------------------------------------

def test_server_from_nova():
    body = {
        "id": "u1", "name": "web-1", "OS-EXT-SRV-ATTR:host": "c1",
        "metadata": {"evacuable": "false"}, "tags": ["evacuable"],
        "created": "2030-01-01T00:00:10Z",
        "image": {"id": "img-1"},
        "flavor": {"original_name": "m1.pinned",
                   "extra_specs": {"evacuable": "true"}}}
    aggs = [AggregateFacts("rack1", "1", {"evacuable": "true"}, ("c1",)),
            AggregateFacts("rack2", "2", {}, ("c2",))]
    s = ev.server_from_nova(body, aggregates=aggs)
    assert s.id == "u1" and s.host == "c1" and s.tags == ("evacuable",)
    assert s.flavor == FlavorFacts("", "m1.pinned", {"evacuable": "true"})
    assert s.image == ImageFacts("img-1")
    assert [a.name for a in s.aggregates] == ["rack1"]
    assert s.created_at == 1893456010.0
    d = ev.decide(s, ON)
    assert not d.evacuable and d.source == ev.SERVER


def test_server_from_nova_volume_backed_and_sparse():
    s = ev.server_from_nova({"id": "u2", "image": "", "created": "junk"})
    assert s.image is None and s.flavor is None and s.host is None
    assert s.created_at is None and s.aggregates == () and s.metadata == {}


def test_server_from_nova_keeps_a_given_image():
    img = ImageFacts("img-1", "cirros", {"evacuable": "true"})
    s = ev.server_from_nova({"id": "u3", "image": {"id": "img-1"}}, image=img)
    assert s.image is img


def test_image_from_glance_custom_properties_are_top_level():
    img = ev.image_from_glance({"id": "i1", "name": "cirros",
                                "evacuable": "True", "tags": ["gold"],
                                "status": "active"})
    assert img.properties["evacuable"] == "True" and img.tags == ("gold",)
    assert "tags" not in img.properties


def test_aggregate_from_nova():
    a = ev.aggregate_from_nova({"id": 3, "uuid": "a-u", "name": "rack1",
                                "metadata": {"evacuable": "true"},
                                "hosts": ["c1"]})
    assert a == AggregateFacts("rack1", "a-u", {"evacuable": "true"},
                               ("c1",))


def test_parse_nova_time():
    assert ev.parse_nova_time("2030-01-01T00:00:00") == 1893456000.0
    assert ev.parse_nova_time("2030-01-01T00:00:00.000000") == 1893456000.0
    assert ev.parse_nova_time("2030-01-01T01:00:00+01:00") == 1893456000.0
    assert ev.parse_nova_time(None) is None
    assert ev.parse_nova_time("yesterday") is None
