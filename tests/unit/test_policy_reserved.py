"""Reserved hosts: which disabled services are spares, which are brought in
for a lost host, and how they return to the reserve."""

import pytest
from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha.conf import reserved_hosts as reserved_conf
from instanceha.drivers.compute.base import (Aggregate, ComputeService,
                                             HostCapacity)
from instanceha.policy import reserved as rs
from instanceha.policy.capacity import Need

ON = rs.Settings(enabled=True)


def _svc(host, zone="az1", state="up", status="disabled", forced=False,
         reason="reserved", binary="nova-compute"):
    return ComputeService("id-" + host, host, state, status, forced, reason,
                          0.0, zone, binary)


def _lost(host="lost", zone="az1"):
    return ComputeService("id-" + host, host, "down", "disabled", True,
                          "instanceha: evacuating", 0.0, zone)


# -- is_reserved --------------------------------------------------------------

@pytest.mark.parametrize("reason", [
    "reserved", "reserved:", "reserved: rack 4", "reserved:az1",
    "reserved for az1", "reserved\tspare"])
def test_reason_prefix_matches(reason):
    assert rs.is_reserved(_svc("r", reason=reason))


@pytest.mark.parametrize("reason", [
    "reservedX", "reserved-spare", "reserved_1", "Reserved", "RESERVED",
    " reserved", "not reserved", "reserve", "", None, "maintenance"])
def test_near_misses_are_not_reserved(reason):
    assert not rs.is_reserved(_svc("r", reason=reason))


@pytest.mark.parametrize("svc", [
    _svc("r", status="enabled"), _svc("r", state="down"),
    _svc("r", forced=True), _svc("r", state="unknown"),
    _svc("r", reason="instanceha: evacuating"),
    _svc("r", binary="nova-scheduler")])
def test_only_disabled_up_computes_not_isolated_by_us(svc):
    assert not rs.is_reserved(svc)
    listed = rs.Settings(hosts=("r",))
    assert not rs.is_reserved(svc, listed)


def test_listed_host_is_reserved_whatever_its_reason():
    s = rs.Settings(hosts=("r",))
    assert rs.is_reserved(_svc("r", reason="spare"), s)
    assert rs.is_reserved(_svc("r", reason=None), s)
    assert not rs.is_reserved(_svc("other", reason="spare"), s)


def test_listed_and_tagged_says_both():
    s = rs.Settings(hosts=("r",))
    ok, why = rs.reserved_because(_svc("r", reason="reserved: rack 4"), s)
    assert ok and "listed" in why and "'reserved: rack 4'" in why


def test_reserved_because_explains_refusals():
    assert rs.reserved_because(_svc("r", reason="reservedX")) == (
        False, "r is disabled with reason 'reservedX', not starting "
               "'reserved'")
    assert rs.reserved_because(_svc("r", status="enabled"))[1] == \
        "r is enabled"
    assert "instanceha" in rs.reserved_because(
        _svc("r", reason="instanceha: x"))[1]


def test_custom_prefix():
    s = rs.Settings(reason_prefix="spare")
    assert rs.is_reserved(_svc("r", reason="spare: az1"), s)
    assert not rs.is_reserved(_svc("r", reason="reserved"), s)
    assert not rs.is_reserved(_svc("r", reason="spares"), s)


def test_prefix_matches():
    assert rs.prefix_matches("reserved", "reserved")
    assert not rs.prefix_matches(None, "reserved")
    assert not rs.prefix_matches(42, "reserved")


def test_reserved_hosts_sorted_and_every_record_must_agree():
    svcs = [_svc("r2"), _svc("r1"), _svc("x", status="enabled"),
            _svc("twice"), _svc("twice", status="enabled")]
    assert rs.reserved_hosts(svcs) == ("r1", "r2")


# -- settings -----------------------------------------------------------------

def test_settings_defaults():
    s = rs.Settings()
    assert not s.enabled and s.reason_prefix == "reserved"
    assert s.match == ("zone",) and s.per_failed_host == 1
    assert not s.target and not s.return_to_reserve
    assert s.returned_reason == "reserved: returned by instanceha"


@pytest.mark.parametrize("kw", [
    {"reason_prefix": ""}, {"reason_prefix": " reserved"},
    {"reason_prefix": "instanceha:"}, {"reason_prefix": "instanceha"},
    {"reason_prefix": "instanceha: spare"}, {"reason_prefix": None},
    {"match": ("rack",)}, {"per_failed_host": 0},
    {"per_failed_host": True}, {"max_per_failed_host": -1},
    {"per_failed_host": 3, "max_per_failed_host": 2},
    {"hosts": ("",)}, {"hosts": (" r1",)}])
def test_settings_refuse(kw):
    with pytest.raises(ValueError):
        rs.Settings(**kw)


def test_settings_normalise():
    s = rs.Settings(hosts=("b", "a", "b"), match=("aggregate", "zone"),
                    exclude_aggregates=("y", "x"))
    assert s.hosts == ("a", "b") and s.match == ("zone", "aggregate")
    assert s.exclude_aggregates == ("x", "y")


def test_from_conf_defaults():
    assert rs.Settings.from_conf(conf_pkg.make()) == rs.Settings()


def test_from_conf_values():
    conf = conf_pkg.make({
        "reserved_hosts": {"enabled": True, "reason_prefix": "spare",
                           "hosts": ["r2", "r1"],
                           "match": ["zone", "aggregate"],
                           "per_failed_host": 2, "max_per_failed_host": 3,
                           "target": True, "return_to_reserve": True,
                           "exclude_aggregates": ["all"]},
        "recovery": {"global_aggregate": "ha-global"}})
    assert rs.Settings.from_conf(conf) == rs.Settings(
        True, "spare", ("r1", "r2"), ("zone", "aggregate"), 2, 3, True, True,
        ("all", "ha-global"))


def test_new_conf_registers_the_group():
    conf = conf_pkg.new_conf()
    conf([], default_config_files=[])
    assert conf.reserved_hosts.enabled is False
    assert conf.reserved_hosts.reason_prefix == "reserved"


@pytest.mark.parametrize("opt,value", [("match", ["rack"]),
                                       ("per_failed_host", 0),
                                       ("max_per_failed_host", -1)])
def test_conf_refuses_bad_values(opt, value):
    conf = conf_pkg.new_conf()
    conf([], default_config_files=[])
    with pytest.raises(ValueError):
        conf.set_override(opt, value, "reserved_hosts")


@pytest.mark.parametrize("overrides,match", [
    ({"reason_prefix": ""}, "non-empty"),
    ({"reason_prefix": "reserved "}, "non-empty"),
    ({"reason_prefix": "instanceha"}, "instanceha writes"),
    ({"per_failed_host": 3, "max_per_failed_host": 2}, "below"),
    ({"hosts": ["r1", " r2"], "enabled": True}, "not a host"),
    ({"target": True}, "target is on but enabled is off")])
def test_validate_refuses(overrides, match):
    conf = conf_pkg.make({"reserved_hosts": overrides})
    with pytest.raises(cfg.Error, match=match):
        reserved_conf.validate(conf)


def test_validate_accepts():
    reserved_conf.validate(conf_pkg.make())
    reserved_conf.validate(conf_pkg.make({"reserved_hosts": {
        "enabled": True, "target": True, "return_to_reserve": True,
        "hosts": ["r1"], "max_per_failed_host": 2}}))
    # hosts brought in before the feature was turned off still return
    reserved_conf.validate(conf_pkg.make({"reserved_hosts": {
        "return_to_reserve": True}}))


def test_load_reads_a_config_file(tmp_path):
    path = tmp_path / "instanceha.conf"
    path.write_text("[reserved_hosts]\nenabled = true\nhosts = r1, r2\n"
                    "match = zone,aggregate\n")
    conf = conf_pkg.load([], default_config_files=[str(path)])
    s = rs.Settings.from_conf(conf)
    assert s.enabled and s.hosts == ("r1", "r2")
    assert s.match == ("zone", "aggregate")


# -- choose -------------------------------------------------------------------

SERVICES = [_lost(), _svc("r3"), _svc("r1"), _svc("r2"),
            _svc("rz", zone="az2"), _svc("rn", zone=None),
            _svc("busy", status="enabled", reason=None)]


def test_off_chooses_nothing():
    c = rs.choose(_lost(), SERVICES, [], {})
    assert c == rs.Choice((), "reserved hosts are off")


def test_one_per_lost_host_by_name_in_its_zone():
    c = rs.choose(_lost(), SERVICES, [], {}, ON)
    assert c.hosts == ("r1",) and c.missing is None
    assert c.to_enable == ("r1",) and c.already == ()
    assert "matching zone az1" in c.reason and "bring in: r1" in c.reason
    assert "rz in zone az2, not az1" in c.reason
    assert "rn in zone (none), not az1" in c.reason


def test_per_failed_host_and_what_is_missing():
    c = rs.choose(_lost(), SERVICES, [], {},
                  rs.Settings(enabled=True, per_failed_host=5))
    assert c.hosts == ("r1", "r2", "r3")
    assert c.missing == "5 reserved host(s) wanted, 3 matching zone az1"


def test_lost_host_with_unknown_zone_matches_every_zone():
    c = rs.choose(_lost(zone=None), SERVICES, [], {},
                  rs.Settings(enabled=True, per_failed_host=9))
    assert c.hosts == ("r1", "r2", "r3", "rn", "rz")


def test_unknown_zone_of_the_lost_host_no_candidate():
    c = rs.choose(_lost(zone="az9"), SERVICES, [], {}, ON)
    assert c.hosts == () and "none chosen" in c.reason
    assert c.missing == "1 reserved host(s) wanted, 0 matching zone az9"


def test_empty_match_takes_any_zone():
    s = rs.Settings(enabled=True, match=(), per_failed_host=9)
    c = rs.choose(_lost(), SERVICES, [], {}, s)
    assert c.hosts == ("r1", "r2", "r3", "rn", "rz")
    assert "matching the cloud" in c.reason


def test_hosts_in_use_for_another_lost_host_are_skipped():
    c = rs.choose(_lost(), SERVICES, [], {"r1": "other"}, ON)
    assert c.hosts == ("r2",)
    assert "r1 is in use for other" in c.reason


def test_hosts_already_in_use_for_this_one_are_kept_first():
    # r1 was enabled for it before: no longer a disabled spare
    services = [s for s in SERVICES if s.host != "r1"] + [
        _svc("r1", status="enabled", reason=None)]
    c = rs.choose(_lost(), services, [], {"r1": "lost"}, ON)
    assert c.hosts == ("r1",) and c.already == ("r1",)
    assert c.to_enable == () and "already in use: r1" in c.reason
    s = rs.Settings(enabled=True, per_failed_host=2)
    c = rs.choose(_lost(), services, [], {"r1": "lost"}, s)
    assert c.hosts == ("r1", "r2") and c.to_enable == ("r2",)


def test_the_lost_host_itself_is_never_chosen():
    lost = _svc("lost")                         # looks like a spare
    c = rs.choose(lost, [lost, _svc("r1")], [], {"lost": "lost"}, ON)
    assert c.hosts == ("r1",)


def test_listed_host_and_near_miss_reason():
    services = [_lost(), _svc("a", reason="reservedX"),
                _svc("b", reason="maintenance")]
    assert rs.choose(_lost(), services, [], {}, ON).hosts == ()
    s = rs.Settings(enabled=True, hosts=("b",))
    assert rs.choose(_lost(), services, [], {}, s).hosts == ("b",)


AGGS = [Aggregate("rack1", ("lost", "r2", "r3")),
        Aggregate("ha-global", ("lost", "r1", "r2", "r3", "rz")),
        Aggregate("rack2", ("r1", "rz"))]


def test_aggregate_match_shares_an_aggregate():
    s = rs.Settings(enabled=True, match=("aggregate",),
                    exclude_aggregates=("ha-global",), per_failed_host=9)
    c = rs.choose(_lost(), SERVICES, AGGS, {}, s)
    assert c.hosts == ("r2", "r3")
    assert "matching aggregate rack1" in c.reason
    assert "r1 shares no aggregate with lost" in c.reason


def test_aggregate_match_without_exclusion():
    s = rs.Settings(enabled=True, match=("aggregate",), per_failed_host=9)
    c = rs.choose(_lost(), SERVICES, AGGS, {}, s)
    assert c.hosts == ("r1", "r2", "r3", "rz")


def test_aggregate_and_zone_both_required():
    aggs = [Aggregate("rack1", ("lost", "r2", "rz"))]
    s = rs.Settings(enabled=True, match=("zone", "aggregate"),
                    per_failed_host=9)
    c = rs.choose(_lost(), SERVICES, aggs, {}, s)
    assert c.hosts == ("r2",)
    assert "aggregate rack1 in zone az1" in c.reason
    assert "rz in zone az2, not az1" in c.reason


def test_aggregate_match_falls_back_to_zone():
    s = rs.Settings(enabled=True, match=("aggregate",), per_failed_host=9,
                    exclude_aggregates=("ha-global",))
    aggs = [Aggregate("ha-global", ("lost", "r1"))]
    c = rs.choose(_lost(), SERVICES, aggs, {}, s)
    assert c.hosts == ("r1", "r2", "r3") and "matching zone az1" in c.reason


def _cap(host, vcpus, ram, disk=1000, vu=0, ru=0):
    return HostCapacity(host, vcpus, vu, ram, ru, disk, 0)


CAPS = {"r1": _cap("r1", 8, 16384), "r2": _cap("r2", 16, 32768),
        "r3": _cap("r3", 32, 65536)}


def test_shortfall_covered_by_name_order():
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(20, 40000, 0), CAPS)
    assert c.hosts == ("r1", "r2") and c.missing is None
    assert "to cover 20 vCPU, 40000 MB RAM" in c.reason


def test_shortfall_one_host_enough():
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(4, 1024, 10), CAPS)
    assert c.hosts == ("r1",)


def test_shortfall_not_covered_says_what_is_missing():
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(100, 1024, 0), CAPS)
    assert c.hosts == ("r1", "r2", "r3")
    assert c.missing == "44 vCPU not covered by reserved hosts matching " \
        "zone az1"


def test_shortfall_with_a_cap():
    s = rs.Settings(enabled=True, max_per_failed_host=1)
    c = rs.choose(_lost(), SERVICES, [], {}, s, Need(20, 1024, 0), CAPS)
    assert c.hosts == ("r1",)
    assert c.missing.endswith("(at most 1 per lost host)")


def test_nothing_missing_brings_nothing_in():
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(), CAPS)
    assert c.hosts == () and c.missing is None
    assert c.reason.startswith("nothing is missing")


def test_full_or_unknown_candidates_are_passed_over():
    caps = {"r1": _cap("r1", 8, 1024, vu=8, ru=1024), "r3": CAPS["r3"]}
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(4, 1024, 0), caps)
    assert c.hosts == ("r3",)
    assert "r1 has none of what is missing free" in c.reason
    assert "r2: size unknown" in c.reason


def test_negative_capacity_counts_as_nothing_free():
    caps = {"r1": _cap("r1", -8, -1024), "r2": CAPS["r2"]}
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(4, 1024, 0), caps)
    assert c.hosts == ("r2",)


def test_already_in_use_counts_against_the_shortfall():
    services = [s for s in SERVICES if s.host != "r1"] + [
        _svc("r1", status="enabled", reason=None)]
    c = rs.choose(_lost(), services, [], {"r1": "lost"}, ON,
                  Need(4, 1024, 0), CAPS)
    assert c.hosts == ("r1",) and c.to_enable == ()
    c = rs.choose(_lost(), services, [], {"r1": "lost"}, ON,
                  Need(12, 1024, 0), CAPS)
    assert c.hosts == ("r1", "r2") and c.to_enable == ("r2",)


def test_shortfall_without_capacities_falls_back_to_per_failed_host():
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(100, 1, 1))
    assert c.hosts == ("r1",)
    assert "no capacities to size them" in c.reason


def test_choice_is_stable_whatever_the_input_order():
    a = rs.choose(_lost(), SERVICES, AGGS, {"r9": "x"}, ON, Need(20, 1, 0),
                  CAPS)
    b = rs.choose(_lost(), list(reversed(SERVICES)), list(reversed(AGGS)),
                  {"r9": "x"}, ON, Need(20, 1, 0), dict(reversed(
                      list(CAPS.items()))))
    assert a == b


def test_targets_only_with_target_on():
    c = rs.choose(_lost(), SERVICES, [], {}, ON)
    assert rs.targets(c, ON) == ()
    t = rs.Settings(enabled=True, target=True)
    assert rs.targets(c, t) == ("r1",)


# -- release ------------------------------------------------------------------

BACK = rs.Settings(enabled=True, return_to_reserve=True)


def test_release_off_keeps_them_in_service():
    r = rs.release("lost", {"r1": "lost"}, ON)
    assert r.hosts == () and "return_to_reserve is off" in r.reason
    assert "r1" in r.reason


def test_release_nothing_brought_in():
    r = rs.release("lost", {"r1": "other"}, BACK)
    assert r.hosts == () and r.reasons == {}


def test_release_with_original_reasons_and_default():
    in_use = {"r2": "lost", "r1": "lost", "r3": "other"}
    r = rs.release("lost", in_use, BACK, {"r1": "reserved: rack 4",
                                          "r3": "reserved: x"})
    assert r.hosts == ("r1", "r2")
    assert r.reasons == {"r1": "reserved: rack 4",
                         "r2": "reserved: returned by instanceha"}
    assert r.reason == "lost is back: r1, r2 return(s) to the reserve"


@pytest.mark.parametrize("original", [None, "", "  ", "instanceha: x", 42])
def test_release_replaces_unusable_original_reasons(original):
    r = rs.release("lost", {"r1": "lost"}, BACK, {"r1": original})
    assert r.reasons == {"r1": "reserved: returned by instanceha"}


def test_release_keeps_a_listed_host_own_reason_and_custom_prefix():
    s = rs.Settings(enabled=True, return_to_reserve=True,
                    reason_prefix="spare", hosts=("r1",))
    r = rs.release("lost", {"r1": "lost", "r2": "lost"}, s,
                   {"r1": "kept aside"})
    assert r.reasons == {"r1": "kept aside",
                         "r2": "spare: returned by instanceha"}


def test_returned_reason_is_recognised_as_reserved():
    r = rs.release("lost", {"r1": "lost"}, BACK)
    assert rs.is_reserved(_svc("r1", reason=r.reasons["r1"]), BACK)


def test_release_works_with_the_feature_off():
    s = rs.Settings(return_to_reserve=True)
    assert rs.release("lost", {"r1": "lost"}, s).hosts == ("r1",)


def test_a_reserved_host_on_shared_storage_covers_the_disk_it_does_not_count():
    """A host reporting no disk (shared storage: disk_gb 0, none used) has
    disk not checked: it covers any disk shortfall instead of making the
    choice raise (TypeError: int - None)."""
    caps = {"r1": _cap("r1", 8, 16384, disk=0), "r2": CAPS["r2"]}
    c = rs.choose(_lost(), SERVICES, [], {}, ON, Need(4, 1024, 500), caps)
    assert c.hosts == ("r1",) and c.missing is None
    services = [s for s in SERVICES if s.host != "r1"] + [
        _svc("r1", status="enabled", reason=None)]
    c = rs.choose(_lost(), services, [], {"r1": "lost"}, ON,
                  Need(4, 1024, 500), caps)
    assert c.hosts == ("r1",) and c.missing is None
