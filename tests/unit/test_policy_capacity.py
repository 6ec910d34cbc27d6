"""Capacity preflight: what a server needs, what a host has free, which
hosts may take a lost host's servers, and which servers wait."""

import pytest
from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha.conf import capacity as capacity_conf
from instanceha.drivers.compute.base import (Aggregate, ComputeService,
                                             HostCapacity, Server)
from instanceha.policy import capacity as cp
from instanceha.policy.capacity import Free, Need
from instanceha.policy.evacuable import AggregateFacts, ERROR, WARNING


def _flavor(**kw):
    f = {"vcpus": 2, "ram": 4096, "disk": 20, "ephemeral": 0, "swap": 0,
         "original_name": "m1.medium", "extra_specs": {}}
    f.update(kw)
    return f


def _body(image={"id": "img"}, sid="s1", name="web-1", **flavor):
    body = {"id": sid, "name": name, "flavor": _flavor(**flavor)}
    if image is not _MISSING:
        body["image"] = image
    return body


_MISSING = object()


# -- need_of ------------------------------------------------------------------

def test_need_of_image_backed_counts_root_ephemeral_and_swap():
    need, problem = cp.need_of(_body(ephemeral=5, swap=513))
    assert problem is None
    assert need == Need(2, 4096, 20 + 5 + 1)


@pytest.mark.parametrize("swap,gb", [(0, 0), ("", 0), (None, 0), (1, 1),
                                     (1024, 1), (1025, 2), (4096, 4)])
def test_swap_rounds_up_to_whole_gb(swap, gb):
    need, problem = cp.need_of(_body(disk=0, swap=swap))
    assert problem is None and need.disk_gb == gb


@pytest.mark.parametrize("image", ["", None, _MISSING])
def test_boot_from_volume_needs_no_root_disk(image):
    need, problem = cp.need_of(_body(image=image, disk=80, ephemeral=2))
    assert problem is None
    assert need == Need(2, 4096, 2)


def test_missing_ephemeral_and_swap_count_as_zero():
    body = _body()
    del body["flavor"]["ephemeral"], body["flavor"]["swap"]
    assert cp.need_of(body) == (Need(2, 4096, 20), None)


def test_server_record_is_read_through_raw():
    server = Server("s1", "web-1", "ACTIVE", "c1", raw=_body())
    assert cp.need_of(server) == (Need(2, 4096, 20), None)


@pytest.mark.parametrize("flavor", [None, "m1.small", ["vcpus"], 42])
def test_missing_or_non_mapping_flavor_gives_no_need(flavor):
    body = {"id": "s1", "name": "web-1", "image": "", "flavor": flavor}
    need, problem = cp.need_of(body)
    assert need is None
    assert problem.level == ERROR and problem.object_id == "s1"
    assert "server web-1 (s1)" in problem.message
    assert "scheduler decides" in problem.message


def test_no_flavor_key_names_the_microversion():
    need, problem = cp.need_of({"id": "s1", "image": ""})
    assert need is None and "2.47" in problem.message


@pytest.mark.parametrize("body", [None, "s1", ["s1"], 3])
def test_body_that_is_not_a_mapping(body):
    need, problem = cp.need_of(body)
    assert need is None and problem.level == ERROR


@pytest.mark.parametrize("key,value", [
    ("vcpus", 0), ("vcpus", -1), ("vcpus", "2"), ("vcpus", 2.0),
    ("vcpus", True), ("vcpus", None), ("ram", 0), ("ram", "4096"),
    ("ram", -512), ("disk", -1), ("disk", "20"), ("disk", None),
    ("ephemeral", -1), ("ephemeral", "1"), ("swap", -1), ("swap", "x"),
    ("swap", 1.5)])
def test_malformed_flavor_amount_gives_no_need(key, value):
    need, problem = cp.need_of(_body(**{key: value}))
    assert need is None
    assert problem.key == key
    assert problem.value == (None if value is None else str(value))
    assert "flavor m1.medium" in problem.message and key in problem.message


@pytest.mark.parametrize("key", ["vcpus", "ram", "disk"])
def test_required_flavor_amount_missing(key):
    body = _body()
    del body["flavor"][key]
    need, problem = cp.need_of(body)
    assert need is None and repr(key) in problem.message


def test_flavor_without_a_name_is_its_flavor():
    body = _body(vcpus=0)
    del body["flavor"]["original_name"]
    assert "its flavor has vcpus=0" in cp.need_of(body)[1].message


@pytest.mark.parametrize("specs,want", [
    ({"resources:VCPU": "1"}, Need(1, 4096, 20)),
    ({"resources:MEMORY_MB": "2048"}, Need(2, 2048, 20)),
    ({"resources:DISK_GB": "0"}, Need(2, 4096, 0)),
    ({"resources:DISK_GB": 7}, Need(2, 4096, 7)),
    ({"resources:CUSTOM_GOLD": "1", "hw:mem_page_size": "large"},
     Need(2, 4096, 20)),
    ({"hw:cpu_policy": "shared"}, Need(2, 4096, 20)),
    (None, Need(2, 4096, 20))])
def test_extra_spec_overrides(specs, want):
    assert cp.need_of(_body(extra_specs=specs)) == (want, None)


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "", True, -3])
def test_malformed_override_gives_no_need(value):
    need, problem = cp.need_of(_body(extra_specs={"resources:VCPU": value}))
    assert need is None and problem.key == "resources:VCPU"


@pytest.mark.parametrize("specs", [{"hw:cpu_policy": "dedicated"},
                                   {"hw:cpu_policy": " Mixed "},
                                   {"resources:PCPU": "4"}])
def test_dedicated_cpus_are_not_counted(specs):
    need, problem = cp.need_of(_body(extra_specs=specs))
    assert need is None and problem.level == WARNING
    assert "PCPU" in problem.message


def test_extra_specs_not_a_mapping():
    need, problem = cp.need_of(_body(extra_specs=["a"]))
    assert need is None and problem.key == "extra_specs"


def test_need_refuses_negative_and_non_integers():
    for bad in ({"vcpus": -1}, {"ram_mb": 1.5}, {"disk_gb": True},
                {"vcpus": "1"}):
        with pytest.raises(ValueError):
            Need(**bad)


def test_need_arithmetic_and_text():
    a, b = Need(2, 1024, 10), Need(1, 4096, 0)
    assert a + b == Need(3, 5120, 10)
    assert a.minus(b) == Need(1, 0, 10)
    assert a.minus(Free("h", 5, 0, 3)) == Need(0, 1024, 7)
    assert a.only(["ram"]) == Need(0, 1024, 0)
    assert not Need() and Need(0, 0, 1)
    assert Need(12, 24576).describe() == "12 vCPU, 24576 MB RAM"
    assert str(Need()) == "nothing"


# -- free ---------------------------------------------------------------------

def _cap(host, vcpus=16, vu=0, ram=65536, ru=0, disk=1000, du=0):
    return HostCapacity(host, vcpus, vu, ram, ru, disk, du)


def test_free_is_usable_minus_used():
    assert cp.free_of(_cap("h", 16, 4, 65536, 1024, 1000, 100)) == \
        Free("h", 12, 64512, 900)
    assert Free.from_capacity(_cap("h")) == Free("h", 16, 65536, 1000)


def test_free_is_never_negative():
    assert cp.free_of(_cap("h", 4, 10, 1024, 4096, 10, 20)) == \
        Free("h", 0, 0, 0)


@pytest.mark.parametrize("field", ["vcpus", "ram_mb", "disk_gb"])
def test_negative_or_bad_totals_count_as_zero(field):
    for bad in (-8, None, "16", 2.5, True):
        c = _cap("h")
        c = HostCapacity(**dict(c.__dict__, **{field: bad}))
        f = cp.free_of(c)
        assert getattr(f, field) in (0, None)


def test_negative_used_does_not_inflate_free():
    assert cp.free_of(_cap("h", 4, -10, 1024, -1, 10, -5)) == \
        Free("h", 4, 1024, 10)


def test_headroom_keeps_a_percentage_free_rounding_up():
    f = cp.free_of(_cap("h", 10, 2, 1000, 0, 99, 0), headroom_percent=10)
    assert f == Free("h", 7, 900, 89)          # ceil(9.9) = 10 GB kept
    assert cp.free_of(_cap("h", 10, 10), 10).vcpus == 0


def test_host_reporting_no_disk_is_not_checked_for_disk():
    f = cp.free_of(_cap("h", disk=0, du=0))
    assert f.disk_gb is None
    assert f.fits(Need(1, 1, 10 ** 6))
    assert f.take(Need(1, 1, 5)).disk_gb is None
    assert "unchecked" in f.describe()
    assert cp.free_of(_cap("h", disk=0, du=3)).disk_gb == 0


# -- settings -----------------------------------------------------------------

def test_settings_defaults():
    s = cp.Settings()
    assert s.enabled and s.scope == "cloud" and s.headroom_percent == 0
    assert s.resources == ("vcpus", "ram", "disk")


@pytest.mark.parametrize("kw", [{"scope": "region"}, {"scope": "Zone"},
                                {"headroom_percent": -1},
                                {"headroom_percent": 91},
                                {"headroom_percent": 1.5},
                                {"headroom_percent": True},
                                {"resources": ("cpu",)}])
def test_settings_refuse(kw):
    with pytest.raises(ValueError):
        cp.Settings(**kw)


def test_settings_normalise_order_and_duplicates():
    s = cp.Settings(resources=("disk", "vcpus", "disk"),
                    exclude_aggregates=("b", "a", "b"))
    assert s.resources == ("vcpus", "disk")
    assert s.exclude_aggregates == ("a", "b")


def test_from_conf_defaults():
    conf = conf_pkg.make()
    assert cp.Settings.from_conf(conf) == cp.Settings()


def test_from_conf_values_and_global_aggregate_excluded():
    conf = conf_pkg.make({
        "capacity": {"enabled": False, "scope": "aggregate",
                     "headroom_percent": 15, "resources": ["ram", "vcpus"],
                     "exclude_aggregates": ["all-hosts"]},
        "recovery": {"global_aggregate": "instanceha-global"}})
    s = cp.Settings.from_conf(conf)
    assert s == cp.Settings(False, "aggregate", 15, ("vcpus", "ram"),
                            ("all-hosts", "instanceha-global"))


def test_new_conf_registers_the_group():
    conf = conf_pkg.new_conf()
    conf([], default_config_files=[])
    assert conf.capacity.enabled is True and conf.capacity.scope == "cloud"


@pytest.mark.parametrize("opt,value", [("scope", "region"),
                                       ("headroom_percent", 95),
                                       ("headroom_percent", -1),
                                       ("resources", ["gpu"])])
def test_conf_refuses_bad_values(opt, value):
    conf = conf_pkg.new_conf()
    conf([], default_config_files=[])
    with pytest.raises(ValueError):
        conf.set_override(opt, value, "capacity")


def test_validate_needs_a_resource_when_enabled():
    conf = conf_pkg.make({"capacity": {"resources": []}})
    with pytest.raises(cfg.Error, match="resources is empty"):
        capacity_conf.validate(conf)
    capacity_conf.validate(conf_pkg.make(
        {"capacity": {"resources": [], "enabled": False}}))
    capacity_conf.validate(conf_pkg.make())


def test_validate_refuses_blank_aggregate_names():
    conf = conf_pkg.make({"capacity": {"exclude_aggregates": [" agg"]}})
    with pytest.raises(cfg.Error, match="exclude_aggregates"):
        capacity_conf.validate(conf)


def test_load_reads_a_config_file(tmp_path):
    path = tmp_path / "instanceha.conf"
    path.write_text("[capacity]\nscope = zone\nheadroom_percent = 5\n")
    conf = conf_pkg.load([], default_config_files=[str(path)])
    s = cp.Settings.from_conf(conf)
    assert s.scope == "zone" and s.headroom_percent == 5


# -- destinations -------------------------------------------------------------

def _svc(host, zone="az1", state="up", status="enabled", forced=False,
         binary="nova-compute", reason=None):
    return ComputeService("id-" + host, host, state, status, forced, reason,
                          0.0, zone, binary)


def _caps(*hosts):
    return {h: _cap(h) for h in hosts}


SERVICES = [_svc("src"), _svc("a1"), _svc("a2"), _svc("b1", zone="az2"),
            _svc("nz", zone=None)]
ALL = ("a1", "a2", "b1", "nz", "src")


def test_cloud_scope_takes_every_healthy_host_but_the_source():
    d = cp.destinations("src", SERVICES, _caps(*ALL), [], cp.Settings())
    assert d.hosts == ("a1", "a2", "b1", "nz")
    assert d.where == "the cloud"
    assert list(d) == list(d.hosts) and len(d) == 4 and "a1" in d
    assert "src" not in d


@pytest.mark.parametrize("svc,why", [
    (_svc("x", status="disabled", reason="reserved"), "disabled"),
    (_svc("x", state="down"), "not up (state down)"),
    (_svc("x", forced=True), "forced down"),
    (_svc("x", state="unknown"), "not up (state unknown)")])
def test_unhealthy_hosts_are_no_destination(svc, why):
    d = cp.destinations("src", [_svc("src"), svc], _caps("src", "x"), [])
    assert d.hosts == () and d.skipped == {"x": why}


def test_host_without_capacity_is_no_destination():
    d = cp.destinations("src", SERVICES, _caps("a1"), [])
    assert d.hosts == ("a1",)
    assert d.skipped["a2"] == "no capacity known"


def test_other_binaries_are_ignored():
    d = cp.destinations("src", [_svc("src"), _svc("sch",
                                                  binary="nova-scheduler")],
                        _caps("sch"), [])
    assert d.hosts == () and d.skipped == {}


def test_host_with_two_records_must_pass_both():
    svcs = [_svc("src"), _svc("x"), _svc("x", status="disabled")]
    assert cp.destinations("src", svcs, _caps("x"), []).hosts == ()
    svcs = [_svc("src"), _svc("x", state="down"), _svc("x")]
    d = cp.destinations("src", svcs, _caps("x"), [])
    assert d.hosts == () and d.skipped["x"] == "not up (state down)"


def test_zone_scope_same_zone_only():
    d = cp.destinations("src", SERVICES, _caps(*ALL), [],
                        cp.Settings(scope="zone"))
    assert d.hosts == ("a1", "a2") and d.where == "zone az1"
    assert d.skipped["b1"] == "in zone az2, not az1"
    assert d.skipped["nz"] == "in zone (none), not az1"


@pytest.mark.parametrize("source", [_svc("src", zone=None), None])
def test_source_with_unknown_zone_matches_every_zone(source):
    svcs = [s for s in SERVICES if s.host != "src"]
    if source is not None:
        svcs.append(source)
    d = cp.destinations("src", svcs, _caps(*ALL), [],
                        cp.Settings(scope="zone"))
    assert d.hosts == ("a1", "a2", "b1", "nz") and d.where == "the cloud"


def test_source_zone_records_that_disagree_are_unknown():
    svcs = SERVICES + [_svc("src", zone="az2")]
    assert cp.source_zone("src", svcs) is None
    assert cp.source_zone("src", SERVICES) == "az1"
    assert cp.source_zone("nobody", SERVICES) is None


AGGS = [Aggregate("rack1", ("src", "a1", "b1")),
        Aggregate("global", ALL),
        Aggregate("rack2", ("a2", "nz"))]


def test_aggregate_scope_shares_an_aggregate_ignoring_excluded_ones():
    s = cp.Settings(scope="aggregate", exclude_aggregates=("global",))
    d = cp.destinations("src", SERVICES, _caps(*ALL), AGGS, s)
    assert d.hosts == ("a1", "b1") and d.where == "aggregate rack1"
    assert d.skipped["a2"] == "shares no aggregate with src"


def test_aggregate_scope_without_exclusion_counts_every_aggregate():
    d = cp.destinations("src", SERVICES, _caps(*ALL), AGGS,
                        cp.Settings(scope="aggregate"))
    assert d.hosts == ("a1", "a2", "b1", "nz")
    assert d.where == "aggregates global, rack1"


def test_aggregate_scope_falls_back_to_zone_when_source_in_none():
    aggs = [Aggregate("rack2", ("a2", "b1")), Aggregate("global", ALL)]
    s = cp.Settings(scope="aggregate", exclude_aggregates=("global",))
    d = cp.destinations("src", SERVICES, _caps(*ALL), aggs, s)
    assert d.hosts == ("a1", "a2") and d.where == "zone az1"


def test_aggregate_facts_work_too():
    aggs = [AggregateFacts("rack1", hosts=("src", "a2"))]
    d = cp.destinations("src", SERVICES, _caps(*ALL), aggs,
                        cp.Settings(scope="aggregate"))
    assert d.hosts == ("a2",)


def test_aggregates_with():
    assert cp.aggregates_with("src", AGGS) == ("global", "rack1")
    assert cp.aggregates_with("src", AGGS, ("global",)) == ("rack1",)
    assert cp.aggregates_with("zz", AGGS) == ()
    assert cp.aggregates_with("src", None) == ()


def test_destinations_are_sorted_whatever_the_input_order():
    a = cp.destinations("src", SERVICES, _caps(*ALL), AGGS)
    b = cp.destinations("src", list(reversed(SERVICES)), _caps(*ALL),
                        list(reversed(AGGS)))
    assert a == b


def test_free_on_applies_headroom_and_skips_unknown():
    caps = {"b": _cap("b", 10, 0), "a": _cap("a", 10, 5)}
    got = cp.free_on(["b", "a", "zz", "a"], caps,
                     cp.Settings(headroom_percent=20))
    assert [f.host for f in got] == ["a", "b"]
    assert got[0].vcpus == 3 and got[1].vcpus == 8


# -- preflight ----------------------------------------------------------------

FREE = [Free("h1", 4, 8192, 100), Free("h2", 8, 16384, 100)]


def test_everything_fits():
    p = cp.preflight([("a", Need(2, 4096, 10)), ("b", Need(2, 4096, 10))],
                     FREE, where="zone az1")
    assert p.fits == ("a", "b") and p.pending == {}
    assert p.shortfall == Need() and not p.fragmented
    assert p.text == "all 2 server(s) fit in zone az1"
    assert p.placed == {"a": "h2", "b": "h2"}


def test_most_free_ram_wins_and_deducts():
    p = cp.preflight([("a", Need(1, 10000, 1)), ("b", Need(1, 6000, 1)),
                      ("c", Need(1, 6000, 1))], FREE)
    # a -> h2 (16384 free), leaving 6384; b -> h1 (8192 > 6384); c -> h2
    assert p.placed == {"a": "h2", "b": "h1", "c": "h2"}


def test_ties_go_by_host_name():
    free = [Free("z", 4, 1024, 10), Free("m", 4, 1024, 10)]
    p = cp.preflight([("a", Need(1, 512, 1))], free)
    assert p.placed == {"a": "m"}


def test_server_that_fits_nowhere_waits_and_does_not_block_smaller():
    p = cp.preflight([("big", Need(16, 1024, 1)), ("small", Need(1, 1024, 1))],
                     FREE, where="zone az1")
    assert p.fits == ("small",)
    assert p.pending == {"big": "needs 16 vCPU, 1024 MB RAM, 1 GB disk; no "
                                "destination has 16 vCPU free in zone az1"}
    assert p.text == "1 of 2 servers wait for capacity: short of 5 vCPU " \
        "in zone az1"


def test_priority_order_decides_who_gets_the_last_room():
    ordered = [("first", Need(8, 16384, 10)), ("second", Need(8, 16384, 10))]
    p = cp.preflight(ordered, FREE)
    assert p.fits == ("first",) and list(p.pending) == ["second"]
    p = cp.preflight(list(reversed(ordered)), FREE)
    assert p.fits == ("second",) and list(p.pending) == ["first"]


def test_fits_keep_the_given_order():
    ordered = [("c", Need(1, 1, 1)), ("a", Need(64, 1, 1)),
               ("b", Need(1, 1, 1))]
    assert cp.preflight(ordered, FREE).fits == ("c", "b")


def test_unknown_need_is_admitted_and_deducts_nothing():
    p = cp.preflight([("u", None), ("a", Need(8, 16384, 100))],
                     [Free("h", 8, 16384, 100)])
    assert p.fits == ("u", "a") and p.unknown == ("u",)
    assert "u" not in p.placed


def test_unknown_need_is_admitted_even_without_destinations():
    p = cp.preflight([("u", None), ("a", Need(1, 1, 0))], [], where="zone x")
    assert p.fits == ("u",)
    assert p.pending == {"a": "needs 1 vCPU, 1 MB RAM; no destination host "
                              "in zone x"}
    assert p.text == "1 of 2 servers wait for capacity: no destination " \
        "host in zone x"


def test_shortfall_is_what_pending_servers_need_beyond_what_is_left():
    ordered = [("a", Need(4, 8192, 10)), ("b", Need(8, 16384, 10)),
               ("c", Need(8, 16384, 10)), ("d", Need(6, 8192, 10))]
    p = cp.preflight(ordered, FREE, where="zone az1")
    # a goes where RAM is most free (h2): b no longer fits anywhere
    assert p.fits == ("a",) and p.placed == {"a": "h2"}
    assert list(p.pending) == ["b", "c", "d"]
    assert p.pending_need == Need(22, 40960, 30)
    # left after a: 8 vCPU, 16384 MB, 190 GB
    assert p.shortfall == Need(14, 24576, 0)
    assert p.text == "3 of 4 servers wait for capacity: short of 14 vCPU, " \
        "24576 MB RAM in zone az1"


def test_fragmented_capacity_is_said_so():
    free = [Free("h1", 2, 4096, 50), Free("h2", 2, 4096, 50)]
    p = cp.preflight([("a", Need(4, 8192, 10))], free, where="zone az1")
    assert p.fragmented and p.shortfall == Need()
    assert p.pending["a"] == ("needs 4 vCPU, 8192 MB RAM, 10 GB disk; no "
                              "destination has 4 vCPU and 8192 MB RAM free "
                              "in zone az1")
    assert "split across hosts" in p.text


def test_no_single_host_has_everything_at_once():
    free = [Free("h1", 8, 1024, 50), Free("h2", 1, 8192, 50)]
    p = cp.preflight([("a", Need(4, 4096, 1))], free)
    assert "no single destination has 4 vCPU, 4096 MB RAM, 1 GB disk free " \
        "at once" in p.pending["a"]


def test_disk_shortage_is_named():
    p = cp.preflight([("a", Need(1, 1, 500))], FREE)
    assert "no destination has 500 GB disk free" in p.pending["a"]
    assert p.shortfall == Need(0, 0, 300)


def test_unchecked_resources_are_ignored():
    s = cp.Settings(resources=("vcpus", "ram"))
    p = cp.preflight([("a", Need(1, 1, 500))], FREE, s)
    assert p.fits == ("a",)
    p = cp.preflight([("a", Need(64, 1, 500))], FREE, s)
    assert p.shortfall == Need(52, 0, 0)
    assert p.pending["a"].startswith("needs 64 vCPU, 1 MB RAM;")


def test_host_without_disk_figures_takes_any_disk():
    free = [Free("h", 4, 4096, None)]
    p = cp.preflight([("a", Need(1, 1024, 5000)), ("b", Need(8, 1, 1))], free)
    assert p.fits == ("a",) and p.shortfall == Need(5, 0, 0)


def test_duplicate_server_counts_once():
    p = cp.preflight([("a", Need(4, 1, 1)), ("a", Need(4, 1, 1))],
                     [Free("h", 4, 10, 10)])
    assert p.fits == ("a",) and p.pending == {}
    assert p.text == "all 1 server(s) fit"


def test_free_as_a_mapping_and_input_untouched():
    free = {f.host: f for f in FREE}
    p = cp.preflight([("a", Need(4, 8192, 10))], free)
    assert p.fits == ("a",)
    assert free["h2"] == Free("h2", 8, 16384, 100)


def test_same_host_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        cp.preflight([], [Free("h", 1, 1, 1), Free("h", 2, 2, 2)])


def test_preflight_off_admits_everything():
    p = cp.preflight([("a", Need(99, 1, 1)), ("u", None)], [],
                     cp.Settings(enabled=False))
    assert p.fits == ("a", "u") and p.pending == {}
    assert p.text == "capacity preflight off" and p.unknown == ("u",)


def test_zero_need_fits_on_any_destination():
    p = cp.preflight([("a", Need())], [Free("h", 0, 0, 0)])
    assert p.fits == ("a",)


def test_preflight_is_deterministic():
    ordered = [("s%02d" % i, Need(1 + i % 3, 1024 * (1 + i % 4), i % 5))
               for i in range(30)]
    free = [Free("h%d" % i, 6, 8192, 20) for i in range(4)]
    a = cp.preflight(ordered, free)
    b = cp.preflight(ordered, list(reversed(free)))
    assert a == b
    assert len(a.fits) + len(a.pending) == 30


def test_check_end_to_end_with_headroom_and_zone():
    services = [_svc("src"), _svc("a1"), _svc("a2"), _svc("b1", zone="az2")]
    caps = {"a1": _cap("a1", 8, 4, 16384, 8192, 100, 0),
            "a2": _cap("a2", 8, 0, 16384, 0, 100, 0),
            "b1": _cap("b1", 64, 0, 262144, 0, 1000, 0)}
    s = cp.Settings(scope="zone", headroom_percent=25)
    servers = [_body(sid="s1", vcpus=4, ram=8192, disk=10),
               _body(sid="s2", vcpus=4, ram=8192, disk=10),
               _body(sid="s3", vcpus=2, ram=2048, disk=10),
               {"id": "s4", "image": "", "flavor": None}]
    ordered = [(b["id"], cp.need_of(b)[0]) for b in servers]
    dest, p = cp.check("src", ordered, services, caps, [], s)
    assert dest.hosts == ("a1", "a2")
    # a2: 6 vCPU, 12288 MB free after headroom; a1: 2 vCPU, 4096 MB
    assert p.placed == {"s1": "a2", "s3": "a1"}
    assert p.fits == ("s1", "s3", "s4")
    assert p.text == "1 of 4 servers wait for capacity: short of 2 vCPU, " \
        "2048 MB RAM in zone az1"
