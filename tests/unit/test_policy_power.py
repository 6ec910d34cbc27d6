"""Power state across an evacuation: the pure decision
(instanceha.policy.power), its wiring in the evacuator, and the
simulator's evacuate semantics it relies on."""

import dataclasses

import pytest
from structlog.testing import capture_logs

from instanceha.drivers.compute import base as cb
from instanceha.engine import evacuator
from instanceha.policy import power
from instanceha.sim import SimCloud
from tests.unit.fakes import Clock
from tests.unit.test_engine import World
from tests.unit import fakes  # noqa: E402


# -- the decision -------------------------------------------------------------

def test_active_server_keeps_running_at_the_default_microversion():
    p = power.plan("active", power.RUNNING)
    assert p == power.Plan(True, (2, 94), "active", False, False, p.reason)
    assert "keeps running" in p.reason


def test_stopped_server_is_evacuated_as_configured_and_arrives_stopped():
    # Nova powers a stopped server off again at every microversion: no
    # 2.95 needed (2.95 is refused mid-upgrade), no stop afterwards.
    for mv in ((2, 94), (2, 53), (2, 96)):
        p = power.plan("stopped", power.SHUTDOWN, mv)
        assert (p.evacuate, p.microversion, p.arrives) == (True, mv, "stopped")
        assert p.keep_off and not p.stop_after


def test_active_server_at_2_95_or_later_arrives_stopped():
    p = power.plan("active", power.RUNNING, (2, 95))
    assert (p.microversion, p.arrives, p.keep_off, p.stop_after) == \
        ((2, 95), "stopped", False, False)
    assert "[evacuation] microversion" in p.reason


def test_error_server_with_power_off_is_stopped_after_it_arrives():
    for mv in ((2, 94), (2, 95)):      # Nova ignores 2.95 for error
        p = power.plan("error", power.SHUTDOWN, mv)
        assert (p.evacuate, p.arrives, p.keep_off, p.stop_after) == \
            (True, "active", True, True)
        assert "stops it once it has arrived" in p.reason


def test_error_server_running_or_unknown_is_not_stopped():
    for ps in (power.RUNNING, power.CRASHED, power.NOSTATE, None):
        p = power.plan("error", ps)
        assert p.evacuate and p.arrives == "active"
        assert not p.keep_off and not p.stop_after


@pytest.mark.parametrize("state, words", [
    ("paused", "paused by its owner"),
    ("suspended", "suspended by its owner"),
    ("shelved", "shelved"),
    ("rescued", "rescue"),
    ("resized", "resize"),
    ("building", "being built"),
    ("weird", "not a state Nova evacuates"),
])
def test_other_states_are_reported_not_evacuated(state, words):
    p = power.plan(state, power.PAUSED)
    assert not p.evacuate and p.microversion is None and p.arrives is None
    assert "vm_state %s" % state in p.reason and words in p.reason
    assert "only active, stopped or error" in p.reason


def test_vm_state_falls_back_to_the_status():
    assert power.plan(None, None, status="SHUTOFF").arrives == "stopped"
    assert power.plan(None, None, status="ACTIVE").arrives == "active"
    assert not power.plan(None, None, status="PAUSED").evacuate
    p = power.plan(None, None, status="REBUILD")
    assert not p.evacuate and "unknown (status REBUILD)" in p.reason
    assert power.plan("STOPPED").arrives == "stopped"


def test_parse_microversion():
    assert power.parse_microversion("2.94") == (2, 94)
    assert power.parse_microversion(" 2.100 ") == (2, 100)
    with pytest.raises(ValueError):
        power.parse_microversion("latest")


def _srv(host="compute-2", vm_state="active", task_state=None):
    return cb.Server(id="s", name="s", status="", host=host,
                     vm_state=vm_state, task_state=task_state)


def test_stop_reason_only_for_a_powered_off_server_nova_started():
    off = power.plan("error", power.SHUTDOWN)
    assert "Nova started it on compute-2" in power.stop_reason(
        off, _srv(), "compute-1")
    # Still on the lost host, not ACTIVE yet, or busy: no stop.
    assert power.stop_reason(off, _srv(host="compute-1"), "compute-1") is None
    assert power.stop_reason(off, _srv(vm_state="stopped"), "compute-1") \
        is None
    assert power.stop_reason(off, _srv(task_state="powering-off"),
                             "compute-1") is None
    # A stopped server Nova started anyway is stopped too.
    assert power.stop_reason(power.plan("stopped"), _srv(), "compute-1")
    # A server that was running: never.
    assert power.stop_reason(power.plan("active"), _srv(), "compute-1") \
        is None
    assert power.stop_reason(None, _srv(), "compute-1") is None


# -- the evacuator ------------------------------------------------------------

class _Recorder:
    """FakeCompute with os-stop, power states in its listing, and every
    evacuate request's microversion recorded."""

    def __init__(self, w, power_states=None, stop_error=None):
        self.c = w.compute
        self.requests = {}
        self.stops = []
        real_evacuate, real_get = self.c.evacuate, self.c.get_server
        ps = dict(power_states or {})

        def evacuate(sid, microversion=None):
            self.requests[sid] = microversion
            return real_evacuate(sid, microversion)

        def get_server(sid):
            s = real_get(sid)
            return dataclasses.replace(s, power_state=ps.get(sid))

        def stop_server(sid):
            if stop_error is not None:
                raise stop_error
            self.stops.append(sid)
            self.c.servers[sid].update(vm_state="stopped", status="SHUTOFF")

        self.c.evacuate = evacuate
        self.c.get_server = get_server
        self.c.stop_server = stop_server


def _world(**servers):
    """compute-1 dead and isolated, its servers in the given vm_states."""
    w = World()
    w.pass_()
    for sid, state in servers.items():
        w.compute.servers[sid].update(
            vm_state=state, status={"active": "ACTIVE", "stopped": "SHUTOFF",
                                    "error": "ERROR"}.get(state,
                                                         state.upper()))
    w.fencer.power_off(w.ctx.inventory["compute-1"])   # BMC: Off
    w.compute.force_down("uuid-1", "instanceha: evacuating x")
    return w, w.engine.find("compute-1")


def test_active_and_stopped_servers_keep_their_power_state():
    w, rec = _world(**{"compute-1-vm-1": "stopped"})
    r = _Recorder(w, {"compute-1-vm-0": power.RUNNING,
                      "compute-1-vm-1": power.SHUTDOWN})
    out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and not out.failed and not out.skipped
    # Both sent at the configured microversion (the driver's default).
    assert r.requests == {"compute-1-vm-0": None, "compute-1-vm-1": None}
    vm0, vm1 = (w.compute.servers["compute-1-vm-%d" % i] for i in (0, 1))
    assert (vm0["status"], vm1["status"]) == ("ACTIVE", "SHUTOFF")
    assert vm0["host"] != "compute-1" and vm1["host"] != "compute-1"
    assert r.stops == []


def test_error_server_with_power_off_is_stopped_on_its_new_host():
    w, rec = _world(**{"compute-1-vm-0": "error", "compute-1-vm-1": "error"})
    r = _Recorder(w, {"compute-1-vm-0": power.SHUTDOWN,
                      "compute-1-vm-1": power.RUNNING})
    with capture_logs() as logs:
        out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and not out.failed
    assert r.stops == ["compute-1-vm-0"]
    vm0, vm1 = (w.compute.servers["compute-1-vm-%d" % i] for i in (0, 1))
    assert (vm0["status"], vm1["status"]) == ("SHUTOFF", "ACTIVE")
    stopped = [e for e in logs if e["event"] == "evacuated_server_stopped"]
    assert [e["server"] for e in stopped] == ["compute-1-vm-0"]
    assert "was powered off when compute-1 was lost" in stopped[0]["reason"]


@pytest.mark.parametrize("error", [
    cb.Conflict("Cannot 'stop' instance", 409),
    cb.NotFound("There is no such action: os-stop", 404),
    cb.ComputeError("HTTP 503", 503)])
def test_a_failed_stop_is_logged_and_the_evacuation_stands(error):
    w, rec = _world(**{"compute-1-vm-0": "error"})
    _Recorder(w, {"compute-1-vm-0": power.SHUTDOWN}, stop_error=error)
    with capture_logs() as logs:
        out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and not out.failed
    errors = [e for e in logs if e["event"] == "evacuated_server_not_stopped"]
    assert [e["server"] for e in errors] == ["compute-1-vm-0"]
    assert "may be running now" in errors[0]["reason"]


def test_driver_without_os_stop_is_logged_not_fatal():
    w, rec = _world(**{"compute-1-vm-0": "error"})
    r = _Recorder(w, {"compute-1-vm-0": power.SHUTDOWN})
    del w.compute.stop_server          # the base class: NotImplementedError
    with capture_logs() as logs:
        out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and r.stops == []
    assert any(e["event"] == "evacuated_server_not_stopped" for e in logs)


def test_paused_and_suspended_servers_are_reported_never_sent():
    w, rec = _world(**{"compute-1-vm-0": "paused",
                       "compute-1-vm-1": "suspended"})
    r = _Recorder(w)
    with capture_logs() as logs:
        out = fakes.evacuate_to_end(w.ctx, rec)
    assert r.requests == {} and not out.done
    assert set(out.skipped) == {"compute-1-vm-0", "compute-1-vm-1"}
    assert "vm_state paused" in out.skipped["compute-1-vm-0"]
    assert "vm_state suspended" in out.skipped["compute-1-vm-1"]
    warn = next(e for e in logs if e["event"] == "servers_not_evacuable")
    assert warn["servers"] == out.skipped
    # Both servers stay where they were, in their state.
    assert {w.compute.servers[s]["host"] for s in out.skipped} == \
        {"compute-1"}


# -- the simulator mirrors Nova -----------------------------------------------

def _sim_fenced():
    clock = Clock()
    cloud = SimCloud(hosts=3, servers_per_host=3, report_interval=1.0,
                     service_down_time=4.0, schedule_time=0.05,
                     evacuation_time=0.5, boot_time=2.0, clock=clock)
    cloud.power("compute-0", on=False)
    cloud.update_service(cloud.hosts["compute-0"].service_uuid,
                         forced_down=True, status="disabled",
                         disabled_reason="instanceha: t")
    return cloud, clock, [s.id for s in cloud.list_servers(host="compute-0")]


@pytest.mark.parametrize("stop, arrive", [
    (False, {"active": "ACTIVE", "stopped": "SHUTOFF", "error": "ACTIVE"}),
    (True, {"active": "SHUTOFF", "stopped": "SHUTOFF", "error": "ACTIVE"}),
])
def test_sim_evacuate_power_semantics_match_nova(stop, arrive):
    cloud, clock, ids = _sim_fenced()
    states = dict(zip(("active", "stopped", "error"), ids))
    with cloud.lock:
        for state, sid in states.items():
            cloud.servers[sid].vm_state = state
    for sid in ids:
        cloud.evacuate(sid, stop=stop)
    clock.advance(2)
    snap = cloud.snapshot()["servers"]
    assert {state: snap[sid]["status"] for state, sid in states.items()} \
        == arrive
    assert all(snap[sid]["host"] != "compute-0" for sid in ids)
