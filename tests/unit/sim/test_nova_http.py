"""Nova and Keystone over HTTP, through openstacksdk and raw requests."""

import re

from keystoneauth1 import exceptions as ksa_exc
import openstack
import pytest
import requests

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                  r"[0-9a-f]{12}$")
DB_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000000$")
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def conn(sim):
    c = openstack.connect(cloud="sim")
    yield c
    c.close()


@pytest.fixture
def api(sim, conn):
    """Raw requests to Nova with a valid token: api(method, path, mv, json)."""
    token = conn.auth_token
    base = sim.url + "/compute/v2.1"

    def call(method, path, microversion=None, json=None):
        headers = {"X-Auth-Token": token}
        if microversion:
            headers["OpenStack-API-Version"] = "compute " + microversion
        return requests.request(method, base + path, headers=headers,
                                json=json, timeout=10)
    return call


def service_uuid(sim, host):
    return sim.cloud.hosts[host].service_uuid


def force_down(api, sim, host):
    r = api("PUT", "/os-services/" + service_uuid(sim, host), "2.53",
            {"forced_down": True, "status": "disabled",
             "disabled_reason": "instanceha: test"})
    assert r.status_code == 200, r.text
    return r.json()["service"]


def test_sdk_lists_services(conn):
    services = list(conn.compute.services())
    assert sorted(s.host for s in services) == [
        "compute-0", "compute-1", "compute-2", "controller-0", "controller-0"]
    assert {s.state for s in services} == {"up"}
    assert {s.binary for s in services} == {
        "nova-compute", "nova-scheduler", "nova-conductor"}


def test_sdk_raw_get_with_microversion(conn):
    r = conn.compute.get("/os-services", microversion="2.53")
    assert r.status_code == 200
    assert r.headers["OpenStack-API-Version"] == "compute 2.53"
    assert r.headers["X-OpenStack-Nova-API-Version"] == "2.53"
    svc = r.json()["services"][0]
    assert UUID.match(svc["id"])
    assert svc["forced_down"] is False
    assert DB_TIME.match(svc["updated_at"])
    assert set(svc) == {"binary", "host", "id", "zone", "status", "state",
                        "updated_at", "disabled_reason", "forced_down"}


def test_services_before_2_53_have_int_ids(api):
    r = api("GET", "/os-services?binary=nova-compute&host=compute-1")
    svc, = r.json()["services"]
    assert svc["id"] == 2 and svc["host"] == "compute-1"
    assert "forced_down" not in svc
    assert r.headers["OpenStack-API-Version"] == "compute 2.1"


def test_version_documents(sim):
    root = requests.get(sim.url + "/compute/", timeout=10).json()
    current = [v for v in root["versions"] if v["id"] == "v2.1"][0]
    assert (current["min_version"], current["version"]) == ("2.1", "2.96")
    doc = requests.get(sim.url + "/compute/v2.1/", timeout=10).json()
    assert doc["version"]["version"] == "2.96"
    ident = requests.get(sim.url + "/identity/v3", timeout=10).json()
    assert ident["version"]["id"].startswith("v3")


def test_microversion_too_new_is_406(api):
    r = api("GET", "/os-services", "2.97")
    assert r.status_code == 406
    assert r.json() == {"computeFault": {
        "code": 406, "message": "Version 2.97 is not supported by the API. "
                                "Minimum is 2.1 and maximum is 2.96."}}


def test_microversion_garbage_is_400(api):
    r = api("GET", "/os-services", "two")
    assert r.status_code == 400
    assert "is of invalid format" in r.json()["badRequest"]["message"]


def test_legacy_microversion_header(sim, conn):
    r = requests.get(sim.url + "/compute/v2.1/os-services", timeout=10,
                     headers={"X-Auth-Token": conn.auth_token,
                              "X-OpenStack-Nova-API-Version": "2.60"})
    assert r.headers["X-OpenStack-Nova-API-Version"] == "2.60"
    assert UUID.match(r.json()["services"][0]["id"])


def test_nova_needs_a_token(sim):
    r = requests.get(sim.url + "/compute/v2.1/os-services", timeout=10)
    assert r.status_code == 401
    r = requests.get(sim.url + "/compute/v2.1/os-services", timeout=10,
                     headers={"X-Auth-Token": "bogus"})
    assert r.status_code == 401


def test_keystone_wrong_password(sim):
    body = {"auth": {"identity": {"methods": ["password"], "password": {
        "user": {"name": "admin", "domain": {"name": "Default"},
                 "password": "wrong"}}},
        "scope": {"project": {"name": "admin",
                              "domain": {"name": "Default"}}}}}
    r = requests.post(sim.url + "/identity/v3/auth/tokens", json=body,
                      timeout=10)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == 401
    body["auth"]["identity"]["password"]["user"]["password"] = "secret"
    r = requests.post(sim.url + "/identity/v3/auth/tokens", json=body,
                      timeout=10)
    assert r.status_code == 201
    assert r.headers["X-Subject-Token"]
    types = {s["type"] for s in r.json()["token"]["catalog"]}
    assert types == {"compute", "identity", "placement", "image"}


def test_sdk_with_wrong_password_fails(sim, tmp_path, monkeypatch):
    text = open(sim.clouds_yaml).read().replace("password: secret",
                                                "password: nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(bad))
    with pytest.raises(ksa_exc.Unauthorized):
        list(openstack.connect(cloud="sim").compute.services())


def test_update_service_validation_errors(sim, api):
    uuid = service_uuid(sim, "compute-0")
    r = api("PUT", "/os-services/" + uuid, "2.53", {"forced_down": "maybe"})
    assert r.status_code == 400
    assert r.json()["badRequest"]["message"].startswith(
        "Invalid input for field/attribute forced_down. Value: maybe.")
    r = api("PUT", "/os-services/" + uuid, "2.53", {})
    assert r.json() == {"badRequest": {"code": 400, "message":
                        "No updates were requested. Fields 'status' or "
                        "'forced_down' should be specified."}}
    r = api("PUT", "/os-services/" + uuid, "2.53", {"bogus": 1})
    assert r.status_code == 400
    assert "Additional properties are not allowed" in r.text
    r = api("PUT", "/os-services/not-a-uuid", "2.53", {"status": "enabled"})
    assert r.json()["badRequest"]["message"] == "Invalid uuid not-a-uuid"
    missing = "00000000-0000-4000-8000-000000000000"
    r = api("PUT", "/os-services/" + missing, "2.53", {"status": "enabled"})
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == \
        "Service %s could not be found." % missing
    r = api("PUT", "/os-services/" + uuid, "2.53",
            {"status": "enabled", "disabled_reason": "x"})
    assert r.status_code == 400


def test_update_service_returns_service(sim, api):
    svc = force_down(api, sim, "compute-0")
    assert svc["forced_down"] is True
    assert svc["state"] == "down"
    assert svc["status"] == "disabled"
    assert svc["disabled_reason"] == "instanceha: test"
    assert svc["id"] == service_uuid(sim, "compute-0")


def test_legacy_force_down_action(api):
    r = api("PUT", "/os-services/force-down", "2.11",
            {"host": "compute-1", "binary": "nova-compute",
             "forced_down": True})
    assert r.json() == {"service": {"host": "compute-1",
                                    "binary": "nova-compute",
                                    "forced_down": True}}


def test_evacuate_refused_while_service_up(sim, api):
    server = sim.cloud.list_servers(host="compute-0")[0]
    r = api("POST", "/servers/%s/action" % server.id, "2.29",
            {"evacuate": {}})
    assert r.status_code == 400
    assert r.json() == {"badRequest": {
        "code": 400, "message": "Compute service of compute-0 is still in "
                                "use."}}


def test_evacuate_flow_and_migrations(sim, api, clock):
    force_down(api, sim, "compute-0")
    server = sim.cloud.list_servers(host="compute-0")[0]
    r = api("POST", "/servers/%s/action" % server.id, "2.29",
            {"evacuate": {}})
    assert (r.status_code, r.content) == (200, b"")
    shown = api("GET", "/servers/" + server.id).json()["server"]
    assert shown["status"] == "REBUILD"
    assert shown["OS-EXT-STS:task_state"] == "rebuilding"
    clock.advance(1)
    r = api("GET", "/os-migrations?migration_type=evacuation"
                   "&source_compute=compute-0", "2.59")
    mig, = r.json()["migrations"]
    assert mig["status"] == "done"
    assert mig["instance_uuid"] == server.id
    assert UUID.match(mig["uuid"])
    assert DB_TIME.match(mig["created_at"]) and DB_TIME.match(
        mig["updated_at"])
    dest = mig["dest_compute"]
    detail = api("GET", "/servers/detail?all_tenants=1&host=" + dest,
                 "2.53").json()["servers"]
    moved = [s for s in detail if s["id"] == server.id][0]
    assert moved["OS-EXT-SRV-ATTR:host"] == dest
    assert moved["OS-EXT-SRV-ATTR:hypervisor_hostname"] == dest
    assert moved["status"] == "ACTIVE"
    assert moved["OS-EXT-STS:vm_state"] == "active"
    assert ISO_Z.match(moved["updated"])
    old = api("GET", "/os-migrations", "2.1").json()["migrations"][0]
    assert "uuid" not in old and "migration_type" not in old


def test_evacuate_old_microversion_returns_admin_pass(sim, api):
    force_down(api, sim, "compute-0")
    server = sim.cloud.list_servers(host="compute-0")[0]
    r = api("POST", "/servers/%s/action" % server.id, None,
            {"evacuate": {"onSharedStorage": False}})
    assert r.status_code == 200
    assert "adminPass" in r.json()
    other = sim.cloud.list_servers(host="compute-0")[1]
    r = api("POST", "/servers/%s/action" % other.id, None, {"evacuate": {}})
    assert r.status_code == 400       # onSharedStorage required below 2.14


def test_evacuate_unknown_server_is_404(api):
    r = api("POST", "/servers/nope/action", "2.29", {"evacuate": {}})
    assert r.json() == {"itemNotFound": {
        "code": 404, "message": "Instance nope could not be found."}}


def test_sdk_evacuate_at_newest_microversion_stops_server(sim, conn, api,
                                                          clock):
    force_down(api, sim, "compute-1")
    server = sim.cloud.list_servers(host="compute-1")[0]
    conn.compute.evacuate_server(server.id)
    clock.advance(1)
    s = conn.compute.get_server(server.id)
    assert s.status == "SHUTOFF"
    assert s.compute_host != "compute-1"


def test_no_valid_host_fault(sim, api, clock):
    for host in ("compute-1", "compute-2"):
        api("PUT", "/os-services/" + service_uuid(sim, host), "2.53",
            {"status": "disabled"})
    force_down(api, sim, "compute-0")
    server = sim.cloud.list_servers(host="compute-0")[0]
    api("POST", "/servers/%s/action" % server.id, "2.29", {"evacuate": {}})
    clock.advance(1)
    shown = api("GET", "/servers/" + server.id, "2.53").json()["server"]
    assert shown["status"] == "ERROR"
    assert shown["fault"]["code"] == 500
    assert shown["fault"]["message"].startswith("No valid host was found.")
    mig = api("GET", "/os-migrations", "2.59").json()["migrations"][0]
    assert mig["status"] == "error"


def test_unset_forced_down_refused_then_allowed(sim, api, clock):
    force_down(api, sim, "compute-0")
    for server in sim.cloud.list_servers(host="compute-0"):
        api("POST", "/servers/%s/action" % server.id, "2.29",
            {"evacuate": {}})
    clock.advance(1)
    uuid = service_uuid(sim, "compute-0")
    r = api("PUT", "/os-services/" + uuid, "2.53", {"forced_down": False})
    assert r.status_code == 400
    assert r.json()["badRequest"]["message"] == (
        "Unable to force up host compute-0 as `done` evacuation migration "
        "records remain associated with the host. Ensure the compute service "
        "has been restarted, allowing these records to move to `completed` "
        "before retrying this request.")
    requests.post(sim.url + "/sim/hosts/compute-0/power-off", timeout=10)
    requests.post(sim.url + "/sim/hosts/compute-0/power-on", timeout=10)
    clock.advance(sim.cloud.boot_time)
    r = api("PUT", "/os-services/" + uuid, "2.53",
            {"forced_down": False, "status": "enabled"})
    assert r.status_code == 200, r.text
    assert r.json()["service"]["state"] == "up"
    statuses = {m["status"] for m in
                api("GET", "/os-migrations", "2.59").json()["migrations"]}
    assert statuses == {"completed"}


def test_servers_paging(api):
    first = api("GET", "/servers/detail?all_tenants=1&limit=4",
                "2.53").json()
    assert len(first["servers"]) == 4
    assert first["servers_links"][0]["rel"] == "next"
    marker = first["servers"][-1]["id"]
    rest = api("GET", "/servers/detail?all_tenants=1&limit=4&marker="
               + marker, "2.53").json()
    assert len(rest["servers"]) == 2 and "servers_links" not in rest
    ids = [s["id"] for s in first["servers"] + rest["servers"]]
    assert len(set(ids)) == 6
    r = api("GET", "/servers/detail?marker=nope", "2.53")
    assert r.json()["badRequest"]["message"] == "marker [nope] not found"


def test_sdk_service_calls(sim, conn):
    svc = [s for s in conn.compute.services() if s.host == "compute-2"][0]
    conn.compute.update_service_forced_down(svc, forced=True)
    conn.compute.disable_service(svc, disabled_reason="instanceha: x")
    after = sim.cloud.snapshot()["services"]["compute-2"]
    assert after["forced_down"] is True
    assert after["status"] == "disabled"
    assert after["disabled_reason"] == "instanceha: x"
    conn.compute.enable_service(svc)
    assert sim.cloud.snapshot()["services"]["compute-2"]["status"] == \
        "enabled"


def test_identity_version_discovery(sim):
    r = requests.get(sim.url + "/identity", timeout=10)
    assert r.status_code == 300
    value, = r.json()["versions"]["values"]
    assert value["links"][0]["href"] == sim.url + "/identity/v3/"
