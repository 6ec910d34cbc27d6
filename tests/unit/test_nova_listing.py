"""Nova's paged lists read as raw JSON pages (nova_transport.Listing):
the same requests, pages and errors as openstacksdk's typed listing they
replaced, without building a typed resource per item."""

import json
import types

from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exc
from openstack.compute.v2 import migration as sdk_migration
from openstack.compute.v2 import server as sdk_server
import pytest
import requests

from instanceha.drivers.compute import base
from instanceha.drivers.compute import nova_transport
from tests.unit import test_nova_read_retry as read_retry

NOVA = "http://nova:8774/v2.1"


def server(sid, host="compute-0"):
    return {"id": sid, "name": "vm-" + sid, "status": "ACTIVE",
            "OS-EXT-SRV-ATTR:host": host, "OS-EXT-STS:vm_state": "active",
            "OS-EXT-STS:task_state": None, "OS-EXT-STS:power_state": 1,
            "flavor": {"extra_specs": {"hw:x": "1"}}}


def migration(mid, sid):
    return {"id": mid, "uuid": "m-%d" % mid, "instance_uuid": sid,
            "source_compute": "compute-0", "dest_compute": "compute-1",
            "status": "done", "migration_type": "evacuation",
            "created_at": "2026-11-25T00:00:00.000000"}


def resp(status, body):
    r = requests.Response()
    r.status_code = status
    r._content = body if isinstance(body, bytes) else json.dumps(
        body).encode()
    r.headers["content-type"] = "application/json"
    return r


def page(key, items, next_query=None):
    body = {key: items}
    if next_query:
        body[key + "_links"] = [{"rel": "next", "href": "%s/%s?%s" % (
            NOVA, "servers/detail" if key == "servers" else "os-migrations",
            next_query)}]
    return body


class Compute(adapter.Adapter):
    """An openstacksdk compute proxy answering from a script and keeping
    every request (an Adapter, so openstacksdk's listing takes it too)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def get_endpoint_data(self):
        return types.SimpleNamespace(max_microversion=(2, 100))

    def _get_connection(self):
        return None

    def get(self, url, **kwargs):
        self.calls.append((url, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def driver(answers, retries=2):
    return read_retry.driver(answers, retries, compute_class=Compute)


def server_pages():
    return [
        resp(200, page("servers", [server("a"), server("b")],
                       "all_tenants=True&host=compute-0&marker=b")),
        resp(200, page("servers", [server("c"), server("d")],
                       "all_tenants=True&host=compute-0&marker=d")),
        resp(200, page("servers", [])),
    ]


def comparable(calls):
    return [(url, dict(kw["params"]), kw["microversion"],
             kw["headers"]["Accept"]) for url, kw in calls]


def test_servers_follow_every_page_with_the_sdks_requests():
    d, compute, _ = driver(server_pages())
    servers = d.list_servers("compute-0")
    assert [s.id for s in servers] == ["a", "b", "c", "d"]
    assert servers[0].raw == server("a")
    assert servers[0].host == "compute-0"
    sdk = Compute(server_pages())
    listed = list(sdk_server.Server.list(
        sdk, base_path="/servers/detail", microversion="2.53",
        all_projects=True, compute_host="compute-0"))
    assert [s.id for s in listed] == ["a", "b", "c", "d"]
    assert comparable(compute.calls) == comparable(sdk.calls)
    assert comparable(compute.calls) == [
        ("/servers/detail", {"host": "compute-0", "all_tenants": True},
         "2.53", "application/json"),
        (NOVA + "/servers/detail", {"host": ["compute-0"],
                                    "all_tenants": ["True"],
                                    "marker": ["b"]},
         "2.53", "application/json"),
        (NOVA + "/servers/detail", {"host": ["compute-0"],
                                    "all_tenants": ["True"],
                                    "marker": ["d"]},
         "2.53", "application/json"),
    ]
    assert all(kw["raise_exc"] is False for _, kw in compute.calls)


def test_every_server_page_by_page_keeps_only_what_each_page_gives():
    # list_all_servers (failover capacity): no host filter, and with
    # per_page each page's Servers are reduced as they come.
    d, compute, _ = driver(server_pages())
    seen = []

    def per_page(servers):
        seen.append([s.id for s in servers])
        return [s.id.upper() for s in servers]

    assert d.list_all_servers(per_page=per_page) == ["A", "B", "C", "D"]
    assert seen == [["a", "b"], ["c", "d"]]
    assert dict(compute.calls[0][1]["params"]) == {"all_tenants": True}
    d, compute, _ = driver(server_pages())
    assert [s.id for s in d.list_all_servers()] == ["a", "b", "c", "d"]


def migration_pages():
    q = "migration_type=evacuation&source_compute=compute-0&marker=m-%d"
    return [
        resp(200, page("migrations", [migration(3, "c"), migration(2, "b")],
                       q % 2)),
        resp(200, page("migrations", [migration(1, "a")])),
    ]


def test_migrations_same_filters_microversion_and_pages_as_the_sdk():
    d, compute, _ = driver(migration_pages())
    migs = d.list_evacuations("compute-0")
    assert [(m.id, m.server_id) for m in migs] == [
        ("m-3", "c"), ("m-2", "b"), ("m-1", "a")]
    sdk = Compute(migration_pages())
    listed = list(sdk_migration.Migration.list(
        sdk, microversion="2.59", migration_type="evacuation",
        source_compute="compute-0"))
    assert len(listed) == 3
    assert comparable(compute.calls) == comparable(sdk.calls)
    assert compute.calls[0][0] == "/os-migrations"
    assert compute.calls[0][1]["params"] == {
        "migration_type": "evacuation", "source_compute": "compute-0"}


def test_next_page_reads_links_as_openstacksdk_does():
    assert nova_transport.next_page("servers", {"servers": []}) == (
        None, {})
    # A relative "next" field loses its version prefix.
    assert nova_transport.next_page(
        "servers", {"next": "/v2.1/servers?marker=x"}) == (
        "/servers", {"marker": ["x"]})
    # A top-level "links" wins over "servers_links".
    assert nova_transport.next_page("servers", {
        "links": [{"rel": "next", "href": "http://a/x?marker=1"}],
        "servers_links": [{"rel": "next", "href": "http://b/y"}]}) == (
        "http://a/x", {"marker": ["1"]})


def test_a_marker_read_again_is_an_endless_loop_not_followed():
    again = "all_tenants=True&host=compute-0&marker=b"
    d, compute, slept = driver([
        resp(200, page("servers", [server("a")], "marker=b")),
        resp(200, page("servers", [server("b")], again))], retries=0)
    with pytest.raises(base.ComputeError, match="endless pagination loop"):
        d.list_servers("compute-0")
    assert len(compute.calls) == 2


def test_a_failed_page_retries_the_whole_listing():
    d, compute, slept = driver([
        resp(200, page("servers", [server("a")], "marker=a")),
        resp(503, {"computeFault": {"code": 503, "message": "busy"}}),
    ] + server_pages())
    assert [s.id for s in d.list_servers("compute-0")] == [
        "a", "b", "c", "d"]
    assert len(slept) == 1
    assert d.api_record.view()[3] == "GET /servers/detail: HTTP 503: busy"


@pytest.mark.parametrize("answer, error, status", [
    (resp(404, {"itemNotFound": {"code": 404, "message": "gone"}}),
     base.NotFound, 404),
    (resp(400, {"badRequest": {"code": 400, "message": "Marker x could "
                                                       "not be found."}}),
     base.Conflict, 400),
    (resp(409, {"conflictingRequest": {"code": 409, "message": "no"}}),
     base.Conflict, 409),
])
def test_a_4xx_page_is_an_answer_not_retried(answer, error, status):
    d, compute, slept = driver([answer])
    with pytest.raises(error) as e:
        d.list_evacuations("compute-0")
    assert e.value.status == status and slept == []
    assert str(e.value).startswith("GET /os-migrations: HTTP %d: " % status)


def test_unreachable_nova_is_a_compute_error_retried():
    d, compute, slept = driver([ks_exc.ConnectTimeout("timed out")] * 3)
    with pytest.raises(base.ComputeError,
                       match="GET /servers/detail: ConnectTimeout"):
        d.list_servers("compute-0")
    assert len(compute.calls) == 3 and len(slept) == 2


@pytest.mark.parametrize("body", [b"<html>proxy error</html>",
                                  {"nothing": []}, {"servers": None}])
def test_a_page_that_is_not_a_list_is_a_compute_error(body):
    d, compute, _ = driver([resp(200, body)], retries=0)
    with pytest.raises(base.ComputeError, match="GET /servers/detail: "):
        d.list_servers("compute-0")


def test_an_unknown_filter_is_a_programming_error():
    d, compute, _ = driver([])
    with pytest.raises(TypeError, match="no filter changes_since"):
        d._nova.list(nova_transport.SERVERS, "/servers", "2.53",
                changes_since="x")
    assert compute.calls == []


def test_a_service_row_is_the_record_its_constructor_builds():
    from instanceha.drivers.compute import base, nova_records
    row = {"id": "u1", "host": "c1", "state": "up", "status": "disabled",
           "forced_down": True, "disabled_reason": "r",
           "updated_at": "2026-11-26T10:00:00.000000", "zone": "z1",
           "binary": "nova-compute"}
    fast = nova_records.to_service(row)
    slow = base.ComputeService(
        id="u1", host="c1", state="up", status="disabled", forced_down=True,
        disabled_reason="r",
        updated_at=nova_records.parse_time(row["updated_at"]), zone="z1",
        binary="nova-compute")
    assert fast == slow and hash(fast) == hash(slow)
    assert fast._asdict() == slow._asdict()
    assert fast._replace(status="enabled").status == "enabled"


def test_a_service_row_is_one_object_without_a_dict():
    # Re-read for the whole cloud at every pass: one tracked object a row
    # (a dataclass was two: itself and its __dict__).
    from instanceha.drivers.compute import nova_records
    row = nova_records.to_service(
        {"id": "u1", "host": "c1", "state": "up", "status": "enabled",
         "forced_down": False, "updated_at": None})
    assert not hasattr(row, "__dict__")
    assert row.updated_at is None and row.binary == "nova-compute"


def test_find_servers_sends_an_anchored_name_and_keeps_exact_names():
    """``instanceha policy explain NAME`` (issue 35, part 6): Nova's name
    filter is a regular expression; what it matches is checked again."""
    web = dict(server("a"), name="web.1")
    other = dict(server("b"), name="webx1")      # '.' as Nova's regex has it
    d, compute, _ = driver([resp(200, page("servers", [web, other]))])
    assert [s.id for s in d.find_servers("web.1")] == ["a"]
    (path, kwargs), = compute.calls
    assert path == "/servers/detail"
    assert kwargs["params"]["name"] == r"^web\.1$"
    assert kwargs["params"]["all_tenants"] is True
