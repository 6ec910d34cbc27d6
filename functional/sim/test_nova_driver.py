"""The openstacksdk Nova driver against the simulator's Nova API."""

import pytest

from instanceha import conf as conf_pkg
from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.sim import SimCloud, SimServer


@pytest.fixture
def sim(tmp_path):
    cloud = SimCloud(hosts=3, servers_per_host=2, evacuation_time=0.0,
                     schedule_time=0.0)
    srv = SimServer(cloud).start()
    clouds, _ = srv.write_client_files(str(tmp_path))
    conf = conf_pkg.make({"DEFAULT": {"cloud": "sim",
                                      "clouds_file": clouds}})
    yield cloud, conf
    srv.stop()


def test_services_servers_and_evacuation_rules(sim):
    cloud, conf = sim
    nova = NovaDriver(conf)
    assert nova.max_microversion >= (2, 53)
    services = {s.host: s for s in nova.list_services()}
    assert set(services) == set(cloud.hosts)
    c1 = services["compute-1"]
    assert c1.state == "up" and c1.status == "enabled" and c1.updated_at
    servers = nova.list_servers("compute-1")
    assert len(servers) == 2 and {s.host for s in servers} == {"compute-1"}
    # Nova refuses to evacuate from a host that is neither down nor forced down.
    with pytest.raises(base.Conflict, match="still in use"):
        nova.evacuate(servers[0].id)
    cloud.kill("compute-1")
    nova.force_down(c1.id, "instanceha: evacuating 2026-11-22T00:00:00Z")
    c1 = {s.host: s for s in nova.list_services()}["compute-1"]
    assert c1.forced_down and c1.status == "disabled" and c1.state == "down"
    assert c1.disabled_reason.startswith("instanceha:")
    for s in servers:
        nova.evacuate(s.id)
    cloud.now()
    migs = nova.list_evacuations("compute-1")
    assert {m.server_id for m in migs} == {s.id for s in servers}
    assert all(m.migration_type == "evacuation" for m in migs)
    # Putting the host back is refused until its compute has cleaned up.
    with pytest.raises(base.Conflict):
        nova.restore(c1.id, enable=True)
    with pytest.raises(base.NotFound):
        nova.get_server("00000000-0000-0000-0000-000000000000")


def test_evacuate_microversion_above_server_max_is_refused(sim):
    cloud, conf = sim
    conf.set_override("microversion", "2.999", "evacuation")
    with pytest.raises(base.ComputeError, match="above what Nova supports"):
        NovaDriver(conf)


def test_unreachable_nova_is_a_compute_error(sim, tmp_path):
    cloud, conf = sim
    import re
    import socket
    with socket.socket() as sock:           # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    bad = tmp_path / "bad.yaml"
    bad.write_text(re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:%d" % free,
                          open(conf.clouds_file).read()))
    conf.set_override("clouds_file", str(bad))
    conf.set_override("api_timeout", 2)
    with pytest.raises(base.ComputeError):
        NovaDriver(conf)


def test_aggregates_zones_and_reset_state(tmp_path):
    cloud = SimCloud(hosts=3, servers_per_host=1, aggregates={
        "rack-a": {"hosts": ["compute-0", "compute-1"],
                   "availability_zone": "az1"}})
    srv = SimServer(cloud).start()
    try:
        clouds, _ = srv.write_client_files(str(tmp_path))
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        assert nova.list_aggregates() == [base.Aggregate(
            "rack-a", ("compute-0", "compute-1"), "az1",
            metadata={"availability_zone": "az1"}, id="1")]
        zones = {s.host: s.zone for s in nova.list_services()}
        assert zones == {"compute-0": "az1", "compute-1": "az1",
                         "compute-2": "nova"}
        sid = nova.list_servers("compute-0")[0].id
        nova.reset_state(sid, "error")
        assert nova.get_server(sid).vm_state == "error"
        nova.reset_state(sid, "active")
        s = nova.get_server(sid)
        assert (s.vm_state, s.task_state, s.status) == ("active", None,
                                                        "ACTIVE")
        with pytest.raises(base.ComputeError, match="400"):
            nova.reset_state(sid, "stopped")
        nova.stop_server(sid)
        s = nova.get_server(sid)
        assert (s.vm_state, s.status) == ("stopped", "SHUTOFF")
        with pytest.raises(base.Conflict):
            nova.stop_server(sid)            # already stopped: 409
    finally:
        srv.stop()


def _driver(cloud, tmp_path):
    srv = SimServer(cloud).start()
    clouds, _ = srv.write_client_files(str(tmp_path))
    return srv, NovaDriver(conf_pkg.make({"DEFAULT": {
        "cloud": "sim", "clouds_file": clouds}}))


def test_lists_follow_novas_pages(tmp_path):
    # Nova answers at most [api] max_limit items per page (1000 by default,
    # 5 here) with a servers_links / migrations_links "next" link: a host
    # with more servers or evacuations than one page must be seen whole.
    cloud = SimCloud(hosts=2, servers_per_host=12, api_max_limit=5,
                     evacuation_time=0.0, schedule_time=0.0)
    srv, nova = _driver(cloud, tmp_path)
    try:
        servers = nova.list_servers("compute-0")
        assert len(servers) == 12
        assert len({s.id for s in servers}) == 12
        assert {s.host for s in servers} == {"compute-0"}
        cloud.kill("compute-0")
        c0 = {s.host: s for s in nova.list_services()}["compute-0"]
        nova.force_down(c0.id, "instanceha: test")
        for s in servers:
            nova.evacuate(s.id)
        cloud.now()
        migs = nova.list_evacuations("compute-0")
        assert len(migs) == 12
        assert {m.server_id for m in migs} == {s.id for s in servers}
        assert len(nova.list_servers("compute-1")) == 24
    finally:
        srv.stop()


def test_evacuate_to_a_named_host_goes_through_the_scheduler(tmp_path):
    cloud = SimCloud(hosts=3, servers_per_host=2, evacuation_time=0.0,
                     schedule_time=0.0)
    srv, nova = _driver(cloud, tmp_path)
    try:
        services = {s.host: s for s in nova.list_services()}
        cloud.kill("compute-0")
        nova.force_down(services["compute-0"].id, "instanceha: test")
        a, b = nova.list_servers("compute-0")
        with pytest.raises(base.NotFound, match="Compute host nowhere"):
            nova.evacuate(a.id, host="nowhere")
        # A disabled target: the scheduler refuses it (never forced).
        nova.disable_service(services["compute-2"].id, "reserve")
        nova.evacuate(a.id, host="compute-2")
        cloud.now()
        assert nova.get_server(a.id).status == "ERROR"
        assert "No valid host" in nova.get_server(a.id).fault
        nova.enable_service(services["compute-2"].id)
        svc = {s.host: s for s in nova.list_services()}["compute-2"]
        assert (svc.status, svc.disabled_reason) == ("enabled", None)
        nova.reset_state(a.id, "active")
        for s in (a, b):
            nova.evacuate(s.id, host="compute-2")
        cloud.now()
        assert {nova.get_server(s.id).host for s in (a, b)} == {"compute-2"}
        # Below 2.29 Nova forces a named host: the driver refuses.
        with pytest.raises(base.ComputeError, match="2.29"):
            nova.evacuate(a.id, microversion=(2, 14), host="compute-1")
    finally:
        srv.stop()


def test_images_and_server_metadata(tmp_path):
    cloud = SimCloud(hosts=2, servers_per_host=1)
    image = cloud.set_image(name="rhel", properties={
        "instanceha:evacuable": "true", "hw_qemu_guest_agent": "yes"},
        tags=["critical"])
    srv, nova = _driver(cloud, tmp_path)
    try:
        server = nova.list_servers("compute-0")[0]
        cloud.set_server_image(server.id, image)
        raw = nova.get_server(server.id).raw
        assert raw["image"]["id"] == image
        assert raw["flavor"]["vcpus"] == 2 and raw["flavor"]["ram"] == 2048
        assert raw["flavor"]["disk"] == 20
        assert raw["flavor"]["extra_specs"] == {}
        body = nova.get_image(image)
        assert body["id"] == image and body["name"] == "rhel"
        assert body["instanceha:evacuable"] == "true"
        assert body["hw_qemu_guest_agent"] == "yes"
        assert body["tags"] == ["critical"] and body["status"] == "active"
        default = nova.get_image(cloud.default_image)
        assert default["tags"] == []
        with pytest.raises(base.NotFound):
            nova.get_image("00000000-0000-0000-0000-000000000000")
        cloud.set_metadata(server.id, {"instanceha:suspend": "x", "k": "v"})
        nova.delete_server_metadata(server.id, "instanceha:suspend")
        assert nova.get_server(server.id).raw["metadata"] == {"k": "v"}
        with pytest.raises(base.NotFound):
            nova.delete_server_metadata(server.id, "instanceha:suspend")
        with pytest.raises(base.NotFound):
            nova.delete_server_metadata(
                "00000000-0000-0000-0000-000000000000", "k")
    finally:
        srv.stop()


def test_no_image_endpoint(tmp_path):
    cloud = SimCloud(hosts=1, servers_per_host=1)
    cloud.image_endpoint = False
    srv, nova = _driver(cloud, tmp_path)
    try:
        with pytest.raises(base.NoEndpoint):
            nova.get_image(cloud.default_image)
    finally:
        srv.stop()


def test_unset_aggregate_metadata(tmp_path):
    cloud = SimCloud(hosts=2, servers_per_host=0, aggregates={
        "rack-a": {"hosts": ["compute-0"], "availability_zone": "az1"},
        "rack-b": {"hosts": ["compute-1"]}})
    cloud.set_aggregate_metadata("rack-b", {"instanceha:suspend": "2026",
                                            "keep": "1"})
    srv, nova = _driver(cloud, tmp_path)
    try:
        aggs = {a.name: a for a in nova.list_aggregates()}
        assert aggs["rack-b"].id == "2"
        assert aggs["rack-b"].metadata == {"instanceha:suspend": "2026",
                                           "keep": "1"}
        nova.unset_aggregate_metadata(aggs["rack-b"].id,
                                      "instanceha:suspend")
        # Our own write is seen at once, cache or not.
        aggs = {a.name: a for a in nova.list_aggregates()}
        assert aggs["rack-b"].metadata == {"keep": "1"}
        assert aggs["rack-a"].metadata == {"availability_zone": "az1"}
        nova.unset_aggregate_metadata(aggs["rack-b"].id, "absent")
        with pytest.raises(base.NotFound):
            nova.unset_aggregate_metadata("99", "keep")
        # get_aggregate never answers from the cache: a change made by
        # someone else is seen at once.
        nova.list_aggregates()                           # fills the cache
        cloud.set_aggregate_metadata("rack-b", {"keep": "2"})
        assert {a.name: a for a in nova.list_aggregates()}[
            "rack-b"].metadata == {"keep": "1"}            # cached
        assert nova.get_aggregate(aggs["rack-b"].id).metadata == {
            "keep": "2"}
        with pytest.raises(base.NotFound):
            nova.get_aggregate("99")
    finally:
        srv.stop()


def test_host_capacities_placement_then_hypervisors(tmp_path):
    cloud = SimCloud(hosts=3, servers_per_host=2, host_vcpus=16,
                     host_ram_mb=32768, host_disk_gb=500, server_vcpus=4,
                     server_ram_mb=4096, server_disk_gb=40,
                     allocation_ratios={"VCPU": 4.0, "MEMORY_MB": 1.5},
                     reserved={"MEMORY_MB": 512, "DISK_GB": 10},
                     api_max_limit=2)
    srv, nova = _driver(cloud, tmp_path)
    try:
        caps = nova.host_capacities()
        assert set(caps) == {"compute-0", "compute-1", "compute-2"}
        assert caps["compute-1"] == base.HostCapacity(
            "compute-1", vcpus=64, vcpus_used=8,
            ram_mb=int((32768 - 512) * 1.5), ram_mb_used=8192,
            disk_gb=490, disk_gb_used=80, source="placement")
        # Read in one request (allocation candidates' provider summaries),
        # the same figures as provider by provider.
        assert nova._capacity._placement_capacities() == caps
        calls = []
        real = nova._capacity._placement_get
        nova._capacity._placement_get = lambda *a, **k: calls.append(a[0]) or \
            real(*a, **k)
        nova.host_capacities()
        assert calls == ["/resource_providers", "/allocation_candidates"]
        nova._capacity._placement_get = real
        # Placement gone: os-hypervisors (paged, 2 a page here), physical
        # totals.
        cloud.set_placement(False)
        caps = nova.host_capacities()
        assert set(caps) == {"compute-0", "compute-1", "compute-2"}
        assert caps["compute-2"] == base.HostCapacity(
            "compute-2", vcpus=16, vcpus_used=8, ram_mb=32768,
            ram_mb_used=8192, disk_gb=500, disk_gb_used=80,
            source="hypervisors")
        cloud.fail_api("database gone")
        with pytest.raises(base.ComputeError, match="neither"):
            nova.host_capacities()
    finally:
        srv.stop()


def test_host_capacities_without_allocation_candidates(tmp_path):
    """A Placement that does not know allocation candidates (404): read
    provider by provider; a host with no vCPU left is still listed."""
    cloud = SimCloud(hosts=2, servers_per_host=2, host_vcpus=4,
                     server_vcpus=2)
    srv, nova = _driver(cloud, tmp_path)
    try:
        one_call = nova.host_capacities()
        assert set(one_call) == set()           # both full: no candidate
        real = nova._capacity._placement_get

        def old_placement(path, *a, **k):
            if path == "/allocation_candidates":
                raise base.ComputeError("HTTP 404", 404)
            return real(path, *a, **k)

        nova._capacity._placement_get = old_placement
        caps = nova.host_capacities()
        assert set(caps) == {"compute-0", "compute-1"}
        assert caps["compute-0"].vcpus_used == caps["compute-0"].vcpus == 4
    finally:
        srv.stop()


def test_nova_errors_on_paged_reads_are_compute_errors(sim):
    cloud, conf = sim
    nova = NovaDriver(conf)
    cloud.fail_api("database gone")
    for read in (lambda: nova.list_servers("compute-0"),
                 lambda: nova.list_evacuations("compute-0"),
                 nova.list_aggregates):
        with pytest.raises(base.ComputeError, match="database gone"):
            read()
