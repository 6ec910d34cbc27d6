"""A drained host's smoke test, fail-back and decommission through the
simulator's Nova API: the real NovaDriver against it (the requests and
answers the put-back passes will meet), raw requests for Nova's body and
microversion rules, and the control API's knobs."""

import pytest
import requests

from instanceha.drivers.compute import base
from tests.unit.sim.conftest import control, run




def drain(sim, host):
    """The host disabled by a drain, its servers gone elsewhere."""
    cloud = sim.cloud
    cloud.update_service(cloud.hosts[host].service_uuid, status="disabled",
                         disabled_reason="instanceha drain")
    for s in cloud.list_servers(host):
        cloud.delete_server(s.id)


def test_smoke_test_on_a_disabled_host_fails_since_train(sim, clock, nova):
    drain(sim, "compute-0")
    image = sim.cloud.default_image
    s = nova.create_server("instanceha-smoke-compute-0", "1", image,
                           "compute-0")
    assert (s.status, s.host) == ("BUILD", None)
    assert nova.get_server(s.id).status == "BUILD"
    run(sim, clock, 2)
    s = nova.get_server(s.id)
    assert (s.status, s.host) == ("ERROR", None)
    assert s.fault == "No valid host was found. "
    nova.delete_server(s.id)
    with pytest.raises(base.NotFound):
        nova.get_server(s.id)
    nova.delete_server(s.id)                # gone: no error
    # Without Placement's pre-filter (Nova before Train) it passes.
    r = control(sim, "/scheduler", {"disabled_prefilter": False})
    assert r.status_code == 200 and r.json() == {"disabled_prefilter": False}
    s = nova.create_server("instanceha-smoke-compute-0", "1", image,
                           "compute-0", network="net-1")
    run(sim, clock, 2)
    s = nova.get_server(s.id)
    assert (s.status, s.host, s.name) == (
        "ACTIVE", "compute-0", "instanceha-smoke-compute-0")
    assert sim.cloud.snapshot()["services"]["compute-0"]["status"] == \
        "disabled"


def test_a_failing_host_fails_the_smoke_test(sim, clock, nova):
    r = control(sim, "/hosts/compute-1/fail-boots",
                {"fail": True, "message": "libvirt: cannot start"})
    assert r.status_code == 200 and r.json()["failing_boots"] == \
        "libvirt: cannot start"
    s = nova.create_server("smoke", "1", sim.cloud.default_image,
                           "compute-1")
    run(sim, clock, 2)
    s = nova.get_server(s.id)
    assert (s.status, s.host, s.fault) == ("ERROR", None,
                                           "libvirt: cannot start")
    assert control(sim, "/hosts/compute-1/fail-boots",
                   {"fail": False}).json()["failing_boots"] is None
    assert control(sim, "/hosts/compute-1/fail-boots",
                   {"fail": "yes"}).status_code == 400
    assert control(sim, "/hosts/compute-9/fail-boots").status_code == 404
    s = nova.create_server("smoke", "1", sim.cloud.default_image,
                           "compute-1")
    run(sim, clock, 2)
    assert nova.get_server(s.id).status == "ACTIVE"


def test_fail_back_aims_at_the_host(sim, clock, nova):
    sid = sim.cloud.list_servers("compute-0")[0].id
    nova.live_migrate(sid, host="compute-2")
    run(sim, clock, 2)
    s = nova.get_server(sid)
    assert (s.host, s.status) == ("compute-2", "ACTIVE")
    row = nova.list_host_migrations("compute-2")[0]
    assert (row.source_host, row.dest_host, row.status) == (
        "compute-0", "compute-2", "completed")
    sim.cloud.update_service(sim.cloud.hosts["compute-0"].service_uuid,
                             status="disabled", disabled_reason="drain")
    for host, message in (("compute-0", "No valid host"),
                          ("compute-9", "Compute host compute-9 could not "
                                        "be found.")):
        with pytest.raises(base.ComputeError, match=message) as e:
            nova.live_migrate(sid, host=host)
        assert e.value.status == 400
        assert not isinstance(e.value, base.Conflict)
    assert nova.get_server(sid).host == "compute-2"


def test_decommission(sim, clock, nova, api):
    cloud = sim.cloud
    cloud.aggregates["rack"] = dict(id=7, uuid="u", hosts=["compute-0",
                                                           "compute-1"],
                                    availability_zone=None, created=0)
    svc = nova.service_of("compute-0")
    with pytest.raises(base.Conflict) as e:
        nova.delete_service(svc.id)
    assert e.value.status == 409
    assert "Unable to delete compute service that is hosting instances" \
        in str(e.value)
    drain(sim, "compute-0")
    nova.remove_host_from_aggregate("7", "compute-0")
    assert nova.get_aggregate("7").hosts == ("compute-1",)
    with pytest.raises(base.NotFound, match="Cannot remove host"):
        nova.remove_host_from_aggregate("7", "compute-0")
    with pytest.raises(base.ComputeError) as e:
        nova.remove_host_from_aggregate("x", "compute-0")
    assert e.value.status == 400
    nova.delete_service(svc.id)
    assert nova.service_of("compute-0") is None
    assert "compute-0" not in [s.host for s in nova.list_services()]
    assert "compute-0" not in nova.host_capacities()
    hyp = api("GET", "/os-hypervisors/detail", "2.53").json()
    assert "compute-0" not in [h["hypervisor_hostname"]
                               for h in hyp["hypervisors"]]
    with pytest.raises(base.NotFound):
        nova.delete_service(svc.id)
    with pytest.raises(base.ComputeError) as e:
        nova.delete_service("7")
    assert e.value.status == 400
    # The machine and its BMC stay.
    assert requests.get(sim.url + "/sim/state", timeout=10).json()[
        "hosts"]["compute-0"]["service_deleted"] is True


def test_create_server_body_rules(sim, api):
    image = sim.cloud.default_image
    ok = {"name": "s", "flavorRef": "1", "imageRef": image,
          "availability_zone": "nova:compute-1"}
    r = api("POST", "/servers", "2.36", {"server": ok})
    assert r.status_code == 202
    body = r.json()["server"]
    assert body["id"] and body["links"] and "adminPass" in body
    r = api("POST", "/servers", "2.37", {"server": ok})
    assert r.status_code == 400 and "'networks' is a required property" \
        in r.text
    for bad, message in (
            (dict(ok, networks="none", availability_zone="a:b:c:d"),
             "Unable to parse availability_zone"),
            (dict(ok, networks="none", flavorRef="9"),
             "Flavor 9 could not be found."),
            (dict(ok, networks="none", imageRef="nope"),
             "Image nope could not be found."),
            (dict(ok, networks="most"), "networks"),
            (dict(ok, networks="none", host="compute-1"),
             "Additional properties are not allowed")):
        r = api("POST", "/servers", "2.53", {"server": bad})
        assert r.status_code == 400 and message in r.text, (bad, r.text)
    r = api("POST", "/servers", "2.37",
            {"server": dict(ok, networks="none",
                            flavorRef="http://x/flavors/1")})
    assert r.status_code == 202
    assert api("DELETE", "/servers/%s" % r.json()["server"]["id"]
               ).status_code == 204
    assert api("DELETE", "/servers/%s" % r.json()["server"]["id"]
               ).status_code == 404
    assert api("DELETE", "/os-services/nope", "2.53").status_code == 400
    assert api("DELETE", "/os-services/nope", "2.52").status_code == 400
