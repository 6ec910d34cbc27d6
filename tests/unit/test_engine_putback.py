"""Putting a drained host back (smoke test, fail-back) and decommission,
as passes of the engine against the unit fake of Nova: the world after
each step."""

from instanceha.events import Event, EventKind as E
from tests.unit.test_engine_drain import _api, _on, _post, _svc


def test_resume_with_fail_back_moves_the_drained_servers_back():
    w, api = _api()
    status, _ = _post(api, "compute-0", {"reason": "kernel"})
    assert status == 202
    w.until("compute-0", "maintenance")
    assert _on(w, "compute-0") == []
    import json
    status, _, out = api.handle("POST", "/hosts/compute-0/resume",
                                json.dumps({"fail_back": True}).encode())
    assert status == 202, out
    w.until("compute-0", "active")
    assert _on(w, "compute-0") == ["compute-0-vm-0", "compute-0-vm-1"]
    assert all(w.compute.servers[s]["status"] == "ACTIVE"
               for s in _on(w, "compute-0"))
    assert "2/2 servers moved back" in w.state("compute-0")[1]
    status, _, out = api.handle("POST", "/hosts/compute-0/resume",
                                json.dumps({"fail_back": "yes"}).encode())
    assert status == 400 and b"fail_back" in out


def test_decommission_deletes_the_service_and_leaves_the_aggregates():
    from instanceha.drivers.compute.base import Aggregate
    w, api = _api()
    w.compute.aggregates = [Aggregate(name="rack-1", id="7",
                                      hosts=("compute-1", "compute-2"))]
    status, _ = _post(api, "compute-1", {"reason": "retired",
                                         "then": "decommission"})
    assert status == 202
    w.until("compute-1", "decommissioned")
    assert "compute-1" not in w.compute.services
    assert w.compute.aggregates[0].hosts == ("compute-2",)
    reason = w.state("compute-1")[1]
    assert "compute service deleted" in reason and "rack-1" in reason
    assert "inventory entry is left over" in reason


def test_a_smoke_test_failure_keeps_the_host_disabled_with_why():
    w, api = _api()
    # Nova since Train: nothing boots on a disabled compute, forced or
    # not; the smoke test enables the host for its server.
    w.compute.disabled_prefilter = True
    for k, v in (("smoke_test", True), ("smoke_flavor", "f1"),
                 ("smoke_image", "i1")):
        w.conf.set_override(k, v, "maintenance")
    status, _ = _post(api, "compute-0", {"reason": "kernel"})
    w.until("compute-0", "maintenance")
    w.compute.fail_boots_on.add("compute-0")
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.until("compute-0", "failed")
    assert "smoke test failed" in w.state("compute-0")[1]
    assert _svc(w, "compute-0")["status"] == "disabled"
    assert "smoke test failed" in _svc(w, "compute-0")["disabled_reason"]
    # Its heartbeats go on (Nova keeps it up, disabled): the engine keeps
    # it failed until its operator resumes it (found on real Nova: the
    # next heartbeat took it to active).
    for _ in range(5):
        w.pass_(5.0)
    assert w.state("compute-0")[0] == "failed"
    # Repaired and resumed again: the smoke test runs again, passes, and
    # the host is re-enabled.
    w.compute.fail_boots_on.discard("compute-0")
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.until("compute-0", "active")
    assert "smoke test passed" in w.state("compute-0")[1]
    assert _svc(w, "compute-0")["status"] == "enabled"
    assert not [s for s in w.compute.servers
                if s.startswith("instanceha-smoke")
                or "smoke" in w.compute.servers[s].get("name", "")]
