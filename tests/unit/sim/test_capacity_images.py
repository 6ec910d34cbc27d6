"""The simulator's RAM/disk capacity, Placement, Glance images, metadata
writes and Nova's paging and hypervisor views."""

import openstack
import pytest
import requests

from instanceha.sim import SimCloud, SimServer
from instanceha.sim.model import BadRequest, NotFound


def make(clock, **kw):
    kw.setdefault("evacuation_time", 1.0)
    kw.setdefault("schedule_time", 0.0)
    return SimCloud(clock=clock, **kw)


def down(cloud, clock, host):
    cloud.kill(host)
    clock.advance(cloud.service_down_time + 1)


def evacuate_all(cloud, host):
    return [cloud.evacuate(s.id) for s in cloud.list_servers(host)]


@pytest.mark.parametrize("resource", ["ram", "disk"])
def test_scheduler_counts_ram_and_disk(clock, resource):
    # Plenty of vCPUs; room for one server's RAM (or disk) on the target.
    sizes = {"ram": dict(host_ram_mb=6000, server_ram_mb=2000),
             "disk": dict(host_disk_gb=60, server_disk_gb=20)}[resource]
    cloud = make(clock, hosts=2, servers_per_host=2, **sizes)
    down(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(5)
    cloud.now()
    states = sorted(s.vm_state for s in cloud.servers.values()
                    if s.name.startswith("compute-0"))
    assert states == ["active", "error"]
    assert cloud.usages("compute-1")[
        {"ram": "MEMORY_MB", "disk": "DISK_GB"}[resource]] == \
        3 * {"ram": 2000, "disk": 20}[resource]


def test_ratio_and_reserved_make_room(clock):
    cloud = make(clock, hosts=2, servers_per_host=3, host_vcpus=8,
                 server_vcpus=4, allocation_ratios={"VCPU": 2.0})
    assert cloud.capacity(cloud.hosts["compute-1"])["VCPU"] == 16
    down(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(5)
    assert cloud.usages("compute-1")["VCPU"] == 16
    assert sum(s.vm_state == "error" for s in cloud.servers.values()) == 2
    inv = cloud.inventories("compute-1")
    assert inv["VCPU"]["allocation_ratio"] == 2.0 and inv["VCPU"]["total"] == 8


def test_source_keeps_its_allocation_until_cleanup(clock):
    cloud = make(clock, hosts=2, servers_per_host=1, boot_time=1.0)
    down(cloud, clock, "compute-0")
    evacuate_all(cloud, "compute-0")
    clock.advance(0.5)      # claimed: counted on both hosts
    assert cloud.usages("compute-1")["VCPU"] == 4
    assert cloud.usages("compute-0")["VCPU"] == 2
    clock.advance(1)        # done: still on the source
    assert cloud.usages("compute-0") == {"VCPU": 2, "MEMORY_MB": 2048,
                                         "DISK_GB": 20}
    cloud.power("compute-0", on=False)
    cloud.power("compute-0", on=True)
    clock.advance(2)        # the compute started and cleaned up
    assert cloud.usages("compute-0") == {"VCPU": 0, "MEMORY_MB": 0,
                                         "DISK_GB": 0}
    assert cloud.usages("compute-1")["VCPU"] == 4


def test_images(clock):
    cloud = make(clock, hosts=1, servers_per_host=1)
    server = next(iter(cloud.servers.values()))
    assert server.image_id == cloud.default_image
    image = cloud.set_image(name="rhel", properties={"a": "1"}, tags=["t"])
    cloud.set_image(image, properties={"b": "2"})
    got = cloud.get_image(image)
    assert (got["name"], got["properties"], got["tags"]) == (
        "rhel", {"b": "2"}, ["t"])
    with pytest.raises(NotFound):
        cloud.get_image("nope")
    cloud.set_server_image(server.id, image)
    assert cloud.get_server(server.id).image_id == image


def test_metadata_writes(clock):
    cloud = make(clock, hosts=1, servers_per_host=1,
                 aggregates={"r": {"hosts": ["compute-0"]}})
    sid = next(iter(cloud.servers))
    cloud.set_metadata(sid, {"a": "1", "b": "2"})
    cloud.delete_server_metadata(sid, "a")
    assert cloud.get_server(sid).metadata == {"b": "2"}
    with pytest.raises(NotFound):
        cloud.delete_server_metadata(sid, "a")
    agg = cloud.update_aggregate_metadata(1, {"x": "1", "y": "2"})
    assert agg["metadata"] == {"x": "1", "y": "2"}
    agg = cloud.update_aggregate_metadata("1", {"x": None, "gone": None,
                                                "availability_zone": "az9"})
    assert agg["metadata"] == {"y": "2"} and cloud.zone_of("compute-0") == \
        "az9"
    with pytest.raises(NotFound):
        cloud.update_aggregate_metadata(7, {"x": None})


def test_evacuate_to_unknown_or_same_host(clock):
    cloud = make(clock, hosts=2, servers_per_host=1)
    down(cloud, clock, "compute-0")
    sid = cloud.list_servers("compute-0")[0].id
    with pytest.raises(NotFound, match="Compute host x not found"):
        cloud.evacuate(sid, host="x")
    with pytest.raises(BadRequest):
        cloud.evacuate(sid, host="compute-0")


@pytest.fixture
def nova(sim):
    conn = openstack.connect(cloud="sim")
    token = conn.auth_token

    def call(method, path, microversion="2.1", json=None, base="/compute/v2.1"):
        headers = {"X-Auth-Token": token,
                   "OpenStack-API-Version": "compute " + microversion}
        return requests.request(method, sim.url + base + path,
                                headers=headers, json=json, timeout=10)
    yield call
    conn.close()


def test_hypervisors_detail_fields_by_microversion(sim, nova):
    old = nova("GET", "/os-hypervisors/detail", "2.87").json()["hypervisors"]
    assert len(old) == 3
    h = old[0]
    assert h["vcpus"] == 64 and h["vcpus_used"] == 4
    assert h["memory_mb_used"] == 4096 and h["local_gb_used"] == 40
    assert h["service"]["host"] == h["hypervisor_hostname"]
    new = nova("GET", "/os-hypervisors/detail", "2.88").json()["hypervisors"]
    assert "vcpus" not in new[0] and "memory_mb_used" not in new[0]


def test_paging_links(sim, nova):
    sim.cloud.api_max_limit = 2
    body = nova("GET", "/os-hypervisors/detail", "2.53").json()
    assert len(body["hypervisors"]) == 2
    nxt = body["hypervisors_links"][0]["href"]
    assert "marker=" + body["hypervisors"][-1]["id"] in nxt
    body = nova("GET", "/servers/detail?limit=10", "2.53").json()
    assert len(body["servers"]) == 2 and "servers_links" in body
    # A full last page still has a link (Nova's rule); the next is empty.
    marker = body["servers"][-1]["id"]
    sim.cloud.api_max_limit = 4
    body = nova("GET", "/servers/detail?limit=4&marker=" + marker,
                "2.53").json()
    assert len(body["servers"]) == 4 and "servers_links" in body
    body = nova("GET", "/servers/detail?marker=" + body["servers"][-1]["id"],
                "2.53").json()
    assert body == {"servers": []}


def test_aggregate_action_and_metadata_delete_http(sim, nova):
    sim.cloud.aggregates["r"] = dict(id=1, uuid="u", hosts=["compute-0"],
                                     availability_zone=None, created=0.0,
                                     metadata={"k": "v"})
    r = nova("POST", "/os-aggregates/1/action", "2.41",
             {"set_metadata": {"metadata": {"k": None, "n": "1"}}})
    assert r.status_code == 200, r.text
    assert r.json()["aggregate"]["metadata"] == {"n": "1"}
    r = nova("POST", "/os-aggregates/1/action", "2.41",
             {"set_metadata": {"metadata": {"n": 5}}})
    assert r.status_code == 400
    r = nova("POST", "/os-aggregates/9/action", "2.41",
             {"set_metadata": {"metadata": {"n": None}}})
    assert r.status_code == 404
    sid = next(iter(sim.cloud.servers))
    sim.cloud.set_metadata(sid, {"a:b": "1"})
    assert nova("DELETE", "/servers/%s/metadata/a%%3Ab" % sid).status_code \
        == 204
    assert nova("DELETE", "/servers/%s/metadata/a:b" % sid).status_code \
        == 404


def test_placement_and_glance_http(sim, nova):
    rps = nova("GET", "/resource_providers", base="/placement").json()
    rp = rps["resource_providers"][0]
    inv = nova("GET", "/resource_providers/%s/inventories" % rp["uuid"],
               base="/placement").json()["inventories"]
    assert set(inv) == {"VCPU", "MEMORY_MB", "DISK_GB"}
    usages = nova("GET", "/resource_providers/%s/usages" % rp["uuid"],
                  base="/placement").json()["usages"]
    assert usages == {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 40}
    assert nova("GET", "/resource_providers/nope/usages",
                base="/placement").status_code == 404
    image = sim.cloud.set_image(properties={"p": "v"}, tags=["x"])
    body = nova("GET", "/v2/images/" + image, base="/image").json()
    assert body["p"] == "v" and body["tags"] == ["x"] and body["id"] == image
    assert nova("GET", "/v2/images/nope", base="/image").status_code == 404
    assert requests.get(sim.url + "/image/v2/images/" + image,
                        timeout=10).status_code == 401
    server = nova("GET", "/servers/detail", "2.53").json()["servers"][0]
    assert server["image"]["id"] == sim.cloud.default_image
