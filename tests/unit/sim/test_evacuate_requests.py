"""The simulator records every evacuate request that reaches its Nova API
with the power state of the server's host at that instant (the invariant
functional/conftest.py checks for every functional test)."""

import openstack
import pytest
import requests

from instanceha.sim import SimCloud, invariant


@pytest.fixture
def api(sim):
    conn = openstack.connect(cloud="sim")
    token = conn.auth_token
    conn.close()
    base = sim.url + "/compute/v2.1"

    def call(method, path, json=None, microversion="2.53"):
        return requests.request(
            method, base + path, json=json, timeout=10,
            headers={"X-Auth-Token": token,
                     "OpenStack-API-Version": "compute " + microversion})
    return call


@pytest.fixture
def seen():
    records = []
    invariant.subscribe(records.append)
    yield records
    invariant.unsubscribe(records.append)


def _on(cloud, host):
    return [s.id for s in cloud.list_servers(host=host)]


def _force_down(api, cloud, host):
    r = api("PUT", "/os-services/" + cloud.hosts[host].service_uuid,
            {"forced_down": True})
    assert r.status_code == 200, r.text


def test_evacuate_while_the_host_is_on_is_recorded_unsafe(sim, api, clock,
                                                          seen):
    cloud = sim.cloud
    a, b = _on(cloud, "compute-1")
    # Refused by Nova (the compute is up) and still a request sent.
    r = api("POST", "/servers/%s/action" % a, {"evacuate": {}})
    assert r.status_code == 400
    # The compute process dead, the machine still on: Nova accepts it.
    cloud.kill("compute-1")
    _force_down(api, cloud, "compute-1")
    clock.advance(1)
    r = api("POST", "/servers/%s/action" % b, {"evacuate": {}})
    assert r.status_code == 200, r.text
    reqs = cloud.evacuate_requests
    assert [(x.server, x.host, x.power, x.answer) for x in reqs] == [
        (a, "compute-1", "On", 400), (b, "compute-1", "On", 200)]
    assert reqs[1].time == clock.t and reqs[1].where == "simulator at " \
        + sim.url
    assert cloud.unsafe_evacuate_requests() == reqs
    assert seen == reqs
    text = invariant.report(seen)
    assert text.startswith("2 evacuate request(s)")
    assert "server %s at %s while its host compute-1 was powered On" % (
        b, invariant.iso(clock.t)) in text
    assert "Nova answered 200" in text


def test_evacuate_after_power_off_is_safe(sim, api, clock, seen):
    cloud = sim.cloud
    sid = _on(cloud, "compute-2")[0]
    cloud.power("compute-2", on=False)
    _force_down(api, cloud, "compute-2")
    r = api("POST", "/servers/%s/action" % sid, {"evacuate": {}})
    assert r.status_code == 200, r.text
    (rec,) = seen
    assert (rec.server, rec.host, rec.power, rec.unsafe) == (
        sid, "compute-2", "Off", False)
    assert cloud.unsafe_evacuate_requests() == []
    assert invariant.report(seen) == ""


def test_other_actions_and_unknown_servers_are_not_evacuate_requests(
        sim, api, seen):
    sid = _on(sim.cloud, "compute-0")[0]
    assert api("POST", "/servers/%s/action" % sid,
               {"os-stop": None}).status_code == 202
    assert api("POST", "/servers/nope/action",
               {"evacuate": {}}).status_code == 404
    assert api("POST", "/servers/%s/action" % sid,
               None).status_code == 400
    assert seen == [] and sim.cloud.evacuate_requests == []


def test_a_broken_api_still_records_the_request(sim, api, seen):
    """Nova's API answering 500 to everything: the request was sent all
    the same."""
    sid = _on(sim.cloud, "compute-0")[0]
    sim.cloud.fail_api("database gone")
    assert api("POST", "/servers/%s/action" % sid,
               {"evacuate": {}}).status_code == 500
    assert [(r.power, r.answer) for r in seen] == [("On", 500)]


def test_control_api_lists_the_requests(sim, api, clock):
    cloud = sim.cloud
    on, off = _on(cloud, "compute-0")[0], _on(cloud, "compute-1")[0]
    cloud.power("compute-1", on=False)
    clock.advance(cloud.service_down_time + 1)     # Nova sees it down
    for sid in (on, off):
        api("POST", "/servers/%s/action" % sid, {"evacuate": {}})
    doc = requests.get(sim.url + "/sim/evacuate-requests", timeout=10).json()
    assert doc["unsafe"] == 1
    got = [(r["server"], r["host"], r["power"], r["unsafe"], r["answer"])
           for r in doc["evacuate_requests"]]
    assert got == [(on, "compute-0", "On", True, 400),
                   (off, "compute-1", "Off", False, 200)]
    assert doc["evacuate_requests"][0]["at"] == invariant.iso(clock.t)


def test_a_power_change_under_way_is_unsafe(clock):
    """With power_delay, a power-off asked for and not yet done reads
    PoweringOff (the machine still runs); a power-on under way,
    PoweringOn. Both are unsafe; Off once the delay is over is not."""
    cloud = SimCloud(hosts=2, servers_per_host=1, clock=clock,
                     power_delay=5.0)
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.power("compute-0", on=False)
    assert cloud.note_evacuate_request(sid).power == "PoweringOff"
    clock.advance(5)
    assert cloud.note_evacuate_request(sid).power == "Off"
    cloud.power("compute-0", on=True)
    assert cloud.note_evacuate_request(sid).power == "PoweringOn"
    assert [r.unsafe for r in cloud.evacuate_requests] == [True, False, True]
    assert cloud.note_evacuate_request("nope") is None
    assert len(cloud.unsafe_evacuate_requests()) == 2
