import json

from instanceha.api.server import OperatorAPI
from tests.unit.test_engine import World


def _api():
    w = World()
    w.pass_()
    return w, OperatorAPI(w.conf, w.engine, w.clock)


def test_status_and_metrics():
    w, api = _api()
    status, ctype, body = api.handle("GET", "/status")
    assert status == 200 and len(json.loads(body)["hosts"]) == 3
    status, ctype, body = api.handle("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'instanceha_hosts{state="active"} 3.0' in text
    assert 'instanceha_host_state{host="compute-0",state="active"} 1.0' in text
    assert "instanceha_threshold_hold 0.0" in text


def test_suspend_with_expiry_then_it_ends_by_itself():
    w, api = _api()
    status, _, body = api.handle(
        "POST", "/hosts/compute-0/suspend",
        json.dumps({"reason": "firmware", "seconds": 30}).encode())
    assert status == 202, body
    w.drain()
    assert w.state("compute-0") == ("suspended",
                                    "suspended by operator: firmware")
    w.compute.kill("compute-0")
    for _ in range(20):
        w.pass_()
    assert w.state("compute-0")[0] == "suspended"   # hands off
    assert w.fencer.powered_off == []
    for _ in range(20):
        w.pass_()
    # Expired: watched afresh, with boot time and grace before any fencing.
    assert w.state("compute-0")[0] == "suspect"
    assert w.fencer.powered_off == []
    for _ in range(300):
        w.pass_()
    assert w.fencer.powered_off == ["compute-0"]     # then recovered
    _, _, body = api.handle("GET", "/metrics")
    assert 'instanceha_actions_total{action="fence",outcome="fence_ok"} 1.0' \
        in body.decode()


def test_maintenance_and_resume():
    w, api = _api()
    assert api.handle("POST", "/hosts/compute-1/maintenance",
                      b'{"reason": "BIOS"}')[0] == 202
    w.drain()
    assert w.state("compute-1")[0] == "maintenance"
    assert api.handle("POST", "/hosts/compute-1/resume", b"")[0] == 202
    w.drain()
    assert w.state("compute-1")[0] == "active"


def test_bad_requests_are_named():
    w, api = _api()
    status, _, body = api.handle("POST", "/hosts/nope/suspend", b"")
    assert status == 404 and b"unknown host 'nope'" in body
    status, _, body = api.handle("POST", "/hosts/compute-0/reboot", b"")
    assert status == 404 and b"unknown command" in body
    status, _, body = api.handle("POST", "/hosts/compute-0/suspend", b"[1]")
    assert status == 400 and b"JSON object" in body
    status, _, body = api.handle("POST", "/hosts/compute-0/suspend",
                                 b'{"seconds": -1}')
    assert status == 400 and b"positive" in body
    status, _, body = api.handle("POST", "/hosts/compute-0/suspend", b"{x")
    assert status == 400
    assert api.handle("GET", "/nothing")[0] == 404


def test_healthz_goes_stale_without_reconciler_passes():
    w, api = _api()
    w.engine.health["reconciler"] = w.reconciler.health
    assert api.handle("GET", "/healthz")[0] == 200
    w.clock.advance(w.conf.api.stale_after + 1)
    status, _, body = api.handle("GET", "/healthz")
    assert status == 503 and b"last pass" in body


def test_a_command_that_does_not_apply_is_refused_not_ignored():
    w, api = _api()
    status, _, body = api.handle("POST", "/hosts/compute-0/resume", b"{}")
    assert status == 409, body
    assert b"resume does not apply to host compute-0 in state active" in body
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    status, _, body = api.handle("POST", "/hosts/compute-1/maintenance",
                                 b'{"reason": "BIOS"}')
    assert status == 409 and b"suspend stops a recovery" in body, body
    assert w.state("compute-1")[0] == "evacuated"


def test_status_says_whether_the_engines_view_is_live():
    """Issue 35, part 1: GET /status carries /healthz's verdict, so that
    ``openstack instanceha host list`` can say a stale view is stale."""
    w, api = _api()
    w.engine.health["reconciler"] = w.reconciler.health
    live = json.loads(api.handle("GET", "/status")[2])["live"]
    assert live["ok"] is True
    w.clock.advance(w.conf.api.stale_after + 1)
    live = json.loads(api.handle("GET", "/status")[2])["live"]
    assert live["ok"] is False and "last pass" in live["reason"]
