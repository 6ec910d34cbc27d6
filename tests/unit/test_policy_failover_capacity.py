"""Failover capacity (policy.failover_capacity): how many of a scope's
largest hosts can fail at once with every counted server still placed.
Small clouds whose answers can be checked by hand."""

import pytest

from instanceha.drivers.compute.base import (Aggregate, ComputeService,
                                             HostCapacity)
from instanceha.policy import capacity_settings, reserved
from instanceha.policy import failover_capacity as fc
from instanceha.policy.capacity_free import Free
from instanceha.policy.capacity_need import Need

SMALL = Need(2, 2048, 10)


def _svc(host, zone="az1", status="enabled", reason=None, state="up"):
    return ComputeService(id="id-" + host, host=host, state=state,
                          status=status, forced_down=False,
                          disabled_reason=reason, updated_at=None,
                          zone=zone)


def _cap(host, vcpus=8, used=0, ram=8192, ram_used=0, disk=100,
         disk_used=0):
    return HostCapacity(host, vcpus, used, ram, ram_used, disk, disk_used)


def _cloud(spec, zone="az1", **settings):
    """spec: {host: (servers of SMALL on it, vCPUs usable)}; each server
    takes 2 vCPU, 2048 MB, 10 GB, and is allocated on its host."""
    services = [_svc(h, zone) for h in spec]
    caps = {h: _cap(h, vcpus=v, used=2 * n, ram=1024 * v,
                    ram_used=2048 * n, disk=100, disk_used=10 * n)
            for h, (n, v) in spec.items()}
    servers = [(h, SMALL, 0) for h, (n, _) in spec.items()
               for _ in range(n)]
    return services, caps, servers


def _measure(services, caps, servers, aggregates=(), rs=None, cs=None,
             **kw):
    cs = cs or capacity_settings.Settings()
    hosts = fc.loads(services, caps, aggregates, servers, cs, rs)
    report = fc.measure(hosts, fc.Settings.of(cs, rs, **kw))
    return {s.scope: s for s in report.scopes}, report


def test_three_hosts_each_half_full_can_lose_one():
    # 8 vCPU each, 2 servers of 2 vCPU each: one lost host's 4 vCPU fit
    # on the two others (4 free each); two lost need 8 on one host's 4.
    scopes, report = _measure(*_cloud({"c1": (2, 8), "c2": (2, 8),
                                       "c3": (2, 8)}))
    assert scopes["zone:az1"].hosts == 1
    assert scopes["cloud"].hosts == 1
    assert scopes["zone:az1"].members == 3
    assert report.counted == 6
    assert "1 of 3 hosts can fail" in scopes["zone:az1"].text


def test_a_full_cloud_cannot_lose_a_host():
    scopes, _ = _measure(*_cloud({"c1": (4, 8), "c2": (4, 8),
                                  "c3": (3, 8)}))
    assert scopes["cloud"].hosts == 0
    assert scopes["cloud"].largest[0] in ("c1", "c2")
    assert "would leave servers without room" in scopes["cloud"].text


def test_a_scope_of_one_host_is_zero():
    services, caps, servers = _cloud({"c1": (1, 8)})
    scopes, _ = _measure(services, caps, servers)
    assert scopes["zone:az1"].hosts == 0
    assert scopes["zone:az1"].destinations == 1


def test_empty_hosts_can_all_fail():
    scopes, _ = _measure(*_cloud({"c1": (0, 8), "c2": (0, 8)}))
    assert scopes["cloud"].hosts == 2


def test_the_largest_host_is_lost_first():
    # c1 carries 3 servers (6 vCPU), c2 and c3 one each: losing c1 needs
    # 6 vCPU, and c2 + c3 have 6 + 6 free: 1. Losing c1 and c2: 8 vCPU
    # on c3's 6: no.
    scopes, _ = _measure(*_cloud({"c1": (3, 8), "c2": (1, 8),
                                  "c3": (1, 8)}))
    assert scopes["cloud"].hosts == 1
    assert scopes["cloud"].largest == ("c1", "c2")


def test_bin_packing_counts_whole_servers():
    # Two hosts with 3 vCPU free each: 6 vCPU in total, but one server of
    # 4 vCPU fits on neither. The totals allow it, the placement not.
    services = [_svc("big"), _svc("a"), _svc("b")]
    caps = {"big": _cap("big", vcpus=8, used=4, ram=8192, ram_used=0),
            "a": _cap("a", vcpus=8, used=5), "b": _cap("b", vcpus=8,
                                                       used=5)}
    servers = [("big", Need(4, 1024, 0), 0)]
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].hosts == 0


def test_allocation_ratio_gives_room():
    # 8 physical cores at allocation ratio 4.0: Placement's usable 32.
    # Each host has 8 vCPU allocated (4 servers): losing one puts 8 vCPU
    # on the others' 24 free each, losing two 16 on the third's 24.
    services = [_svc(h) for h in ("c1", "c2", "c3")]
    caps = {h: _cap(h, vcpus=8 * 4, used=8, ram=65536, ram_used=4 * 2048)
            for h in ("c1", "c2", "c3")}
    servers = [(h, SMALL, 0) for h in caps for _ in range(4)]
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].hosts == 2
    # The same hosts at ratio 1.0 (usable 8, all allocated): 0.
    caps1 = {h: _cap(h, vcpus=8, used=8, ram=65536, ram_used=4 * 2048)
             for h in caps}
    scopes, _ = _measure(services, caps1, servers)
    assert scopes["cloud"].hosts == 0


def test_resources_not_counted_do_not_limit():
    services, caps, servers = _cloud({"c1": (4, 8), "c2": (4, 8)})
    cs = capacity_settings.Settings(resources=("ram",))
    # RAM: 8192 usable per host, all used: still 0.
    scopes, _ = _measure(services, caps, servers, cs=cs)
    assert scopes["cloud"].hosts == 0
    # Disk alone: 100 GB each, 40 used: one host's 40 fits in 60.
    cs = capacity_settings.Settings(resources=("disk",))
    scopes, _ = _measure(services, caps, servers, cs=cs)
    assert scopes["cloud"].hosts == 1


def test_shared_storage_disk_is_not_checked():
    services = [_svc("c1"), _svc("c2")]
    caps = {h: HostCapacity(h, 16, 4, 16384, 4096, 0, 0) for h in
            ("c1", "c2")}
    servers = [(h, Need(2, 2048, 500), 0) for h in caps for _ in range(2)]
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].hosts == 1


def test_headroom_is_kept():
    services, caps, servers = _cloud({"c1": (1, 8), "c2": (1, 8)})
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].hosts == 1
    # 80 % of 8 vCPU kept free (7): 8 - 2 - 7 < 2.
    cs = capacity_settings.Settings(headroom_percent=80)
    scopes, _ = _measure(services, caps, servers, cs=cs)
    assert scopes["cloud"].hosts == 0


def test_servers_below_min_priority_are_not_counted():
    # c1 is full (4 servers, two of priority 100), c2 half (2 servers of
    # priority 0, 4 vCPU free).
    services, caps, _ = _cloud({"c1": (4, 8), "c2": (2, 8)})
    servers = [("c1", SMALL, 100), ("c1", SMALL, 100), ("c1", SMALL, 0),
               ("c1", SMALL, 0), ("c2", SMALL, 0), ("c2", SMALL, 0)]
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].hosts == 0
    # Counting priority 50 and above: c1's two (4 vCPU) fit on c2's 4
    # free vCPU; c2 then loses nothing that counts, but with both lost
    # c1's have nowhere to go.
    scopes, report = _measure(services, caps, servers, min_priority=50)
    assert scopes["cloud"].hosts == 1
    assert scopes["cloud"].largest == ("c1", "c2")
    assert report.counted == 2


def test_a_server_not_given_is_not_counted():
    # The caller passes only what the policy would evacuate: c1 carries
    # 4 servers' allocations, but only one is evacuated.
    services, caps, _ = _cloud({"c1": (4, 8), "c2": (2, 8)})
    scopes, _ = _measure(services, caps, [("c1", SMALL, 0)])
    assert scopes["cloud"].hosts == 1


def test_unknown_sizes_are_reported_not_counted():
    services, caps, servers = _cloud({"c1": (1, 8), "c2": (1, 8)})
    scopes, report = _measure(services, caps, servers + [("c1", None, 0)])
    assert report.unknown == 1
    assert scopes["cloud"].hosts == 1


def test_reserved_hosts_count_in_their_zone_and_as_a_pool():
    # Two full hosts and one reserved (disabled 'reserved') with room
    # for one host's servers.
    services = [_svc("c1"), _svc("c2"),
                _svc("r1", status="disabled", reason="reserved: spare")]
    caps = {"c1": _cap("c1", used=8, ram_used=8192),
            "c2": _cap("c2", used=8, ram_used=8192),
            "r1": _cap("r1")}
    servers = [(h, SMALL, 0) for h in ("c1", "c2") for _ in range(4)]
    off, _ = _measure(services, caps, servers)
    assert off["zone:az1"].hosts == 0
    assert "reserved:zone az1" not in off
    rs = reserved.Settings(enabled=True)
    on, _ = _measure(services, caps, servers, rs=rs)
    assert on["zone:az1"].hosts == 1
    assert on["zone:az1"].members == 2       # a reserved host never fails
    assert on["reserved:zone az1"].hosts == 1
    assert on["reserved:zone az1"].destinations == 1


def test_reserved_hosts_per_failed_host_cap():
    # Four full hosts, two spares each with room for one host: without a
    # cap two hosts can fail; with max_per_failed_host the first lost
    # host may take one spare, two lost hosts two.
    names = ["c%d" % i for i in range(4)]
    services = [_svc(h) for h in names] + [
        _svc("r%d" % i, status="disabled", reason="reserved") for i in
        range(2)]
    caps = {h: _cap(h, used=8, ram_used=8192) for h in names}
    caps.update({"r%d" % i: _cap("r%d" % i) for i in range(2)})
    servers = [(h, SMALL, 0) for h in names for _ in range(4)]
    rs = reserved.Settings(enabled=True)
    scopes, _ = _measure(services, caps, servers, rs=rs)
    assert scopes["cloud"].hosts == 2
    rs = reserved.Settings(enabled=True, per_failed_host=1,
                           max_per_failed_host=1)
    scopes, _ = _measure(services, caps, servers, rs=rs)
    assert scopes["cloud"].hosts == 2
    # spares too small for a whole host at one per failure: 0
    caps.update({"r%d" % i: _cap("r%d" % i, used=2, ram_used=2048)
                 for i in range(2)})
    scopes, _ = _measure(services, caps, servers, rs=rs)
    assert scopes["cloud"].hosts == 0
    scopes, _ = _measure(services, caps, servers,
                         rs=reserved.Settings(enabled=True))
    assert scopes["cloud"].hosts == 1


def test_zones_and_aggregates_are_separate_scopes():
    services = [_svc("a1", "az1"), _svc("a2", "az1"), _svc("b1", "az2")]
    caps = {"a1": _cap("a1", used=2, ram_used=2048),
            "a2": _cap("a2", used=2, ram_used=2048),
            "b1": _cap("b1", used=2, ram_used=2048)}
    servers = [(h, SMALL, 0) for h in caps]
    aggs = [Aggregate("gpu", ("a1", "b1")), Aggregate("all", ("a1", "a2",
                                                              "b1"))]
    scopes, _ = _measure(services, caps, servers, aggregates=aggs,
                         cs=capacity_settings.Settings(
                             exclude_aggregates=("all",)))
    # both hosts of az1 lost: nowhere left in az1
    assert scopes["zone:az1"].hosts == 1
    assert scopes["zone:az1"].members == 2
    assert scopes["zone:az2"].hosts == 0
    assert scopes["aggregate:gpu"].members == 2
    assert scopes["aggregate:gpu"].hosts == 1
    assert "aggregate:all" not in scopes
    assert scopes["cloud"].hosts == 2


def test_disabled_or_down_hosts_take_nothing():
    services = [_svc("c1"), _svc("c2", status="disabled", reason="maint"),
                _svc("c3", state="down")]
    caps = {h: _cap(h, used=2, ram_used=2048) for h in ("c1", "c2", "c3")}
    servers = [("c1", SMALL, 0)]
    scopes, _ = _measure(services, caps, servers)
    assert scopes["cloud"].destinations == 1
    assert scopes["cloud"].hosts == 0


def test_limit_caps_the_search():
    spec = {"c%02d" % i: (1, 64) for i in range(20)}
    scopes, _ = _measure(*_cloud(spec), limit=5)
    assert scopes["cloud"].hosts == 5 and scopes["cloud"].capped
    assert "at least 5 of 20" in scopes["cloud"].text


@pytest.mark.parametrize("n", [2, 3, 5, 9, 17])
def test_answer_agrees_with_a_linear_search(n):
    # Hosts with uneven loads and sizes: the doubling and bisection find
    # the same k as trying 1, 2, 3... in turn.
    import random
    rnd = random.Random(n)
    services, caps, servers = [], {}, []
    for i in range(n * 3):
        h = "h%02d" % i
        services.append(_svc(h))
        count = rnd.randint(0, 6)
        size = rnd.choice([Need(1, 1024, 5), Need(2, 4096, 20),
                           Need(4, 8192, 40)])
        caps[h] = _cap(h, vcpus=32, used=size.vcpus * count, ram=65536,
                       ram_used=size.ram_mb * count, disk=500,
                       disk_used=size.disk_gb * count)
        servers += [(h, size, 0)] * count
    cs = capacity_settings.Settings()
    hosts = fc.loads(services, caps, (), servers, cs)
    settings = fc.Settings.of(cs)
    got = {s.scope: s.hosts for s in fc.measure(hosts, settings).scopes}
    cloud = fc._Cloud(hosts, settings)
    scope = [s for s in fc._scopes(hosts, settings) if s.name == "cloud"][0]
    room, load, names = cloud.room_share, cloud.load_share, cloud.names
    lost = sorted(scope.members,
                  key=lambda i: (-load[i], -room[i], names[i]))
    dests = sorted(scope.destinations, key=lambda i: (-room[i], names[i]))
    k = 0
    while k < len(lost) and fc._fits(cloud, lost[:k + 1], dests, []):
        k += 1
    assert got["cloud"] == k


def test_a_host_given_twice_is_refused():
    h = fc.HostLoad("c1", Free("c1", 8, 8192, 100))
    with pytest.raises(ValueError):
        fc.measure([h, h])


def test_report_as_dict_and_lowest():
    scopes, report = _measure(*_cloud({"c1": (2, 8), "c2": (2, 8),
                                       "c3": (2, 8)}))
    d = report.as_dict()
    assert {s["scope"] for s in d["scopes"]} == {"zone:az1", "cloud"}
    assert report.lowest().hosts == 1


def test_an_availability_zone_aggregate_is_no_scope_of_its_own():
    services = [_svc("a1"), _svc("a2")]
    caps = {h: _cap(h) for h in ("a1", "a2")}
    aggs = [Aggregate("az1", ("a1", "a2"), zone="az1",
                      metadata={"availability_zone": "az1"}),
            Aggregate("fast", ("a1", "a2"))]
    scopes, _ = _measure(services, caps, [], aggregates=aggs)
    assert sorted(scopes) == ["aggregate:fast", "cloud", "zone:az1"]


def test_the_documented_walk_through():
    # doc/capacity-and-reserved-hosts.md, "Failover capacity"
    half = {"compute-0": (2, 8), "compute-1": (2, 8), "compute-2": (2, 8)}
    assert _measure(*_cloud(half))[0]["cloud"].hosts == 1
    one_more = dict(half, **{"compute-1": (3, 8)})
    scopes, _ = _measure(*_cloud(one_more))
    assert scopes["cloud"].hosts == 1
    assert scopes["cloud"].largest[0] == "compute-1"
    full = {h: (3, 8) for h in half}
    assert _measure(*_cloud(full))[0]["cloud"].hosts == 0
