"""NovaDriver's calls for putting a drained host back and retiring it,
against a scripted compute proxy: the request each sends (path,
microversion, body), Nova's refusals as base's exceptions (409 Conflict
with Nova's message, 400 a plain ComputeError, 404 NotFound), and a
live migration aimed at a host (never forced)."""

import pytest

from instanceha.drivers.compute import base
from tests.unit.test_nova_migrate import Resp, driver, fault


def test_create_server_forces_the_host_through_the_zone():
    d, c = driver([Resp(202, {"server": {
        "id": "9f2e", "links": [], "OS-DCF:diskConfig": "MANUAL",
        "security_groups": [{"name": "default"}]}})])
    s = d.create_server("smoke-compute-0", "42", "img-1", "compute-0")
    assert c.calls == [("POST", "/servers", "2.37", {"server": {
        "name": "smoke-compute-0", "flavorRef": "42", "imageRef": "img-1",
        "availability_zone": "nova:compute-0", "networks": "none"}}, None)]
    assert (s.id, s.name, s.status, s.host) == (
        "9f2e", "smoke-compute-0", "BUILD", None)


def test_create_server_in_a_zone_on_a_network():
    d, c = driver([Resp(202, {"server": {"id": "9f2e"}})])
    d.create_server("smoke", "42", "img-1", "compute-0", zone="az-2",
                    network="net-7")
    body = c.calls[0][3]["server"]
    assert body["availability_zone"] == "az-2:compute-0"
    assert body["networks"] == [{"uuid": "net-7"}]


def test_create_server_checks_the_zone_and_host_before_sending():
    d, c = driver([])
    for zone, host in (("az:1", "h"), (None, "h:n"), (None, "")):
        with pytest.raises(ValueError):
            d.create_server("smoke", "42", "i", host, zone=zone)
    assert c.calls == []


def test_create_server_refused():
    d, c = driver([fault(400, "Invalid input for field/attribute "
                              "flavorRef."),
                   fault(403, "Policy doesn't allow os_compute_api:servers:"
                              "create:forced_host to be performed."),
                   fault(503, "busy"),
                   Resp(202, {"server": {}})])
    with pytest.raises(base.ComputeError) as e:
        d.create_server("smoke", "x", "i", "compute-0")
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)
    with pytest.raises(base.ComputeError) as e:
        d.create_server("smoke", "42", "i", "compute-0")
    assert e.value.status == 403 and "forced_host" in str(e.value)
    with pytest.raises(base.ComputeError) as e:
        d.create_server("smoke", "42", "i", "compute-0")
    assert e.value.status == 503
    with pytest.raises(base.ComputeError, match="lacks the server's id"):
        d.create_server("smoke", "42", "i", "compute-0")
    # A write is sent once: four requests for four calls.
    assert len(c.calls) == 4


def test_delete_server_and_already_gone():
    d, c = driver([Resp(204), fault(404, "Instance s1 could not be found.")])
    d.delete_server("s1")
    d.delete_server("s1")
    assert c.calls == [("DELETE", "/servers/s1", "2.1", None, None)] * 2


def test_delete_server_locked_is_a_conflict():
    d, c = driver([fault(409, "Instance s1 is locked")])
    with pytest.raises(base.Conflict, match="locked"):
        d.delete_server("s1")


def test_delete_service():
    d, c = driver([Resp(204)])
    d.delete_service("1e3d5b6c-4f3b-4b62-9a5c-0f8f6f0d2c11")
    assert c.calls == [("DELETE", "/os-services/1e3d5b6c-4f3b-4b62-9a5c-"
                        "0f8f6f0d2c11", "2.53", None, None)]


@pytest.mark.parametrize("message", [
    "Unable to delete compute service that is hosting instances. Migrate "
    "or delete the instances first.",
    "Unable to delete compute service that has in-progress migrations. "
    "Complete the migrations or delete the instances first."])
def test_delete_service_refused_is_a_conflict_with_novas_message(message):
    d, c = driver([fault(409, message)])
    with pytest.raises(base.Conflict) as e:
        d.delete_service("u1")
    assert e.value.status == 409 and message in str(e.value)


def test_delete_service_bad_id_and_unknown():
    d, c = driver([fault(400, "Invalid uuid 7"),
                   fault(404, "Service u1 not found.")])
    with pytest.raises(base.ComputeError) as e:
        d.delete_service("7")
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)
    with pytest.raises(base.NotFound, match="Service u1 not found"):
        d.delete_service("u1")


def test_delete_service_forgets_the_cached_aggregates():
    agg = {"id": 3, "name": "rack", "hosts": ["compute-0"],
           "availability_zone": None, "metadata": {}}
    gone = dict(agg, hosts=[])
    d, c = driver([Resp(200, {"aggregates": [agg]}), Resp(204),
                   Resp(200, {"aggregates": [gone]})])
    assert d.list_aggregates()[0].hosts == ("compute-0",)
    d.delete_service("u1")
    assert d.list_aggregates()[0].hosts == ()


def test_remove_host_from_aggregate():
    agg = {"id": 3, "name": "rack", "hosts": ["compute-1"],
           "availability_zone": None, "metadata": {}}
    d, c = driver([Resp(200, {"aggregates": [dict(
        agg, hosts=["compute-0", "compute-1"])]}),
        Resp(200, {"aggregate": agg}), Resp(200, {"aggregates": [agg]})])
    assert d.list_aggregates()[0].hosts == ("compute-0", "compute-1")
    d.remove_host_from_aggregate("3", "compute-0")
    assert c.calls[1] == ("POST", "/os-aggregates/3/action", "2.41",
                          {"remove_host": {"host": "compute-0"}}, None)
    # The cache saw our own write.
    assert d.list_aggregates()[0].hosts == ("compute-1",)


def test_remove_host_from_aggregate_refused():
    d, c = driver([
        fault(404, "Cannot remove host compute-0 in aggregate 3"),
        fault(409, "Cannot remove host from aggregate 3. Reason: host "
                   "is busy."),
        fault(400, "Invalid input for field/attribute id.")])
    with pytest.raises(base.NotFound) as e:
        d.remove_host_from_aggregate("3", "compute-0")
    assert "Cannot remove host compute-0 in aggregate 3" in str(e.value)
    assert "not in it" in str(e.value) and e.value.status == 404
    with pytest.raises(base.Conflict, match="host is busy"):
        d.remove_host_from_aggregate("3", "compute-0")
    with pytest.raises(base.ComputeError) as e:
        d.remove_host_from_aggregate("x", "compute-0")
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)


def test_live_migrate_to_a_host_is_never_forced():
    d, c = driver([Resp(202)])
    d.live_migrate("s1", host="compute-0")
    assert c.calls == [("POST", "/servers/s1/action", "2.30", {
        "os-migrateLive": {"host": "compute-0",
                           "block_migration": "auto"}}, None)]
    with pytest.raises(ValueError):
        d.live_migrate("s1", host="")
    assert len(c.calls) == 1


@pytest.mark.parametrize("message", [
    "No valid host was found. There are not enough hosts available.",
    "Compute host compute-9 could not be found."])
def test_live_migrate_to_a_host_nova_refuses_is_a_400(message):
    d, c = driver([fault(400, message)])
    with pytest.raises(base.ComputeError) as e:
        d.live_migrate("s1", host="compute-9")
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)
    assert message in str(e.value)
