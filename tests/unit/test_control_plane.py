"""The control-plane monitor: its pure verdict, the monitor on a fake
clock with in-memory drivers, the engine holding fencing on it, and the
simulator's control plane (scheduler, conductor, Placement, a failing
API) through the real Nova driver."""

import datetime
import tempfile

import pytest
from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha.drivers.compute import base as cb
from instanceha.sim import SimCloud, SimServer
from instanceha.sources.control_plane import (ControlPlaneMonitor,
                                              judge_services)
from tests.unit.fakes import Clock, FakeCompute
from tests.unit.test_engine import World


def svc(binary, host, state="up", updated_at=1000.0):
    return cb.ComputeService(id="%s-%s" % (binary, host), host=host,
                             state=state, status="enabled", forced_down=False,
                             disabled_reason=None, updated_at=updated_at,
                             zone="internal", binary=binary)


# -- the pure verdict ---------------------------------------------------------

def test_judge_counts_rows_up_per_binary_and_ignores_unlisted():
    services = [svc("nova-scheduler", "c1"),
                svc("nova-scheduler", "c0", state="down", updated_at=900.0),
                svc("nova-compute", "compute-0")]
    verdict = judge_services(services, ("nova-scheduler", "nova-conductor"),
                             1000.0, 30.0)
    assert set(verdict) == {"nova-scheduler"}    # no conductor row: unjudged
    up, total, down = verdict["nova-scheduler"]
    assert (up, total) == (1, 2)
    assert down == ["c0: Nova reports the service down (last report 100s "
                    "ago)"]


def test_judge_sees_a_stale_heartbeat_nova_still_calls_up():
    # Staleness on Nova's clock, as the reconciler judges computes.
    services = [svc("nova-conductor", "c0", updated_at=950.0)]
    up, total, down = judge_services(services, ("nova-conductor",), 1000.0,
                                     30.0)["nova-conductor"]
    assert (up, total) == (0, 1)
    assert "Nova still says up" in down[0]


# -- the monitor --------------------------------------------------------------

class Mon:
    def __init__(self, overrides=None, reconciler=None):
        groups = {"detection": {"delta": 10}}
        groups.update(overrides or {})
        self.conf = conf_pkg.make(groups)
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts=2, servers_per_host=0)
        self.rec = reconciler
        self.monitor = ControlPlaneMonitor(
            self.conf, self.compute, self.clock,
            reconciler_health=None if reconciler is None
            else (lambda: dict(self.rec)))

    def check(self, seconds=1.0):
        self.clock.advance(seconds)
        return self.monitor.check_once()


def test_not_checked_yet_is_not_ok():
    m = Mon()
    assert m.monitor.status() == (False, "not checked yet")
    assert m.check() == (True, "")


def test_every_scheduler_down_holds_and_its_return_lifts():
    m = Mon()
    m.compute._control()["nova-scheduler"] = {"c0": None, "c1": None}
    assert m.check() == (True, "")
    m.compute.kill_control("nova-scheduler", "c0")
    assert m.check(20)[0]                       # one of two still up
    m.compute.kill_control("nova-scheduler", "c1")
    ok, reason = m.check(20)
    assert not ok
    assert reason.startswith("nova-scheduler: 0 of 2 up (c0: ")
    assert m.monitor.health()["nova-scheduler"] == "0 of 2 up"
    m.compute.start_control("nova-scheduler", "c1")
    assert m.check() == (True, "")


def test_every_conductor_down_holds():
    m = Mon()
    m.check()
    m.compute.kill_control("nova-conductor")
    ok, reason = m.check(20)
    assert not ok and reason.startswith("nova-conductor: 0 of 1 up")


def test_a_binary_nova_does_not_list_is_not_judged():
    # Cells v2: the super-conductor may have no row at all.
    m = Mon()
    m.compute._control().pop("nova-conductor")
    with capture_logs() as logs:
        assert m.check() == (True, "")
        assert m.check() == (True, "")
    assert m.monitor.health()["nova-conductor"] == \
        "not listed by Nova; not judged"
    warned = [e for e in logs if e["event"] == "control_plane_not_checked"]
    assert len(warned) == 1 and "nova-conductor" in warned[0]["reason"]


def test_the_first_failed_nova_call_holds_until_services_are_read_again():
    """Hole 4 of issue 21: the hold closed only after [control_plane]
    failures (3) failed checks in a row, so a suspect host was powered off
    while Nova's API answered 503. Now the first failure holds."""
    m = Mon()
    m.check()
    m.compute.fail["list_control_services"] = [
        cb.ComputeError("GET /os-services: HTTP 503: down")]
    ok, reason = m.check()
    assert not ok
    assert reason == ("Nova API: a call failed at %s, since the last "
                      "successful read of Nova's services: GET "
                      "/os-services: HTTP 503: down" % _utc(m.clock()))
    assert m.check() == (True, "")
    # Any call through the driver counts (an action's, say), at once,
    # without waiting for the monitor's next check.
    m.clock.advance(0.5)
    m.compute.api_record.failed(m.clock(), "POST /servers/x/action",
                                cb.ComputeError("POST /servers/x/action: "
                                                "HTTP 500: boom"))
    ok, reason = m.monitor.status()
    assert not ok and reason.endswith("POST /servers/x/action: HTTP 500: "
                                      "boom")
    assert m.check() == (True, "")


def _utc(at):
    return datetime.datetime.fromtimestamp(
        int(at), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_held_reason_does_not_change_while_the_outage_lasts():
    """The gate's reason becomes the held host's reason, and a changed
    reason is a new transition (a journal row, a log line): it names when
    the call failed, not how long ago, so a host held through an outage
    is not journalled again at every tick."""
    m = Mon()
    m.check()
    m.compute.fail["list_control_services"] = [
        cb.ComputeError("GET /os-services: HTTP 503: down")] * 3
    m.check()
    first = m.monitor.status()
    reasons = set()
    for _ in range(20):
        m.clock.advance(0.1)
        reasons.add(m.monitor.status())
    assert reasons == {first} and not first[0], reasons
    m.clock.advance(0.1)
    m.check()          # fails again: a newer failure, a new reason
    assert m.monitor.status() != first and not m.monitor.status()[0]


def test_a_failed_first_call_is_not_ok_until_an_answer():
    m = Mon()
    m.compute.fail["list_control_services"] = [cb.ComputeError("refused")]
    ok, reason = m.check()
    assert not ok
    assert reason == ("Nova API: a call failed at %s, since the last "
                      "successful read of Nova's services: refused"
                      % _utc(m.clock()))
    assert m.check() == (True, "")


def test_no_power_off_on_an_old_view_of_nova():
    """The last successful os-services read must be younger than about one
    poll interval: 1.5 x [detection] poll_interval unless set."""
    m = Mon({"detection": {"delta": 10, "poll_interval": 4}})
    assert m.monitor.view_max_age() == 6
    assert m.check() == (True, "")
    read = m.clock()
    m.clock.advance(6)
    assert m.monitor.status() == (True, "")
    m.clock.advance(0.5)
    ok, reason = m.monitor.status()
    assert not ok
    assert reason == ("no fresh view of Nova: its services last read at %s "
                      "(more than 6.0s ago)" % _utc(read))
    assert m.check() == (True, "")
    m.conf.set_override("view_max_age", 2, "control_plane")
    m.clock.advance(2.5)
    assert not m.monitor.status()[0]


def test_placement_unreachable_holds_after_failures_in_a_row():
    m = Mon()
    m.check()
    m.compute.placement_error = cb.ComputeError("ConnectFailure: refused")
    assert m.check()[0] and m.check()[0]
    ok, reason = m.check()
    assert not ok
    assert reason == ("placement: unreachable: ConnectFailure: refused (3 "
                      "checks in a row)")
    m.compute.placement_error = None
    assert m.check() == (True, "")


def test_no_placement_endpoint_is_not_checked_rather_than_held():
    m = Mon()
    m.compute.placement_error = cb.NoEndpoint("no Placement endpoint")
    assert m.check() == (True, "")
    assert m.monitor.health()["placement"] == \
        "not checked: no Placement endpoint"


def test_a_failed_reconciler_pass_holds_at_once():
    """The reconciler's reads count like the monitor's: a failed pass
    holds at once; its next good pass is a fresh view again."""
    from instanceha.sources.reconciler import Reconciler
    m = Mon()
    rec = Reconciler(m.conf, m.compute, lambda event: None, m.clock)
    rec.run_once()
    assert m.check() == (True, "")
    m.clock.advance(1)
    m.compute.fail["list_services"] = [
        cb.ComputeError("GET /os-services: ConnectFailure")]
    with pytest.raises(cb.ComputeError):
        rec.run_once()
    ok, reason = m.monitor.status()
    assert not ok and reason.endswith("GET /os-services: ConnectFailure")
    m.clock.advance(1)
    rec.run_once()
    assert m.monitor.status() == (True, "")
    # The reconciler's reads keep the view fresh between the monitor's.
    for _ in range(10):
        m.clock.advance(5)
        rec.run_once()
        assert m.monitor.status() == (True, "")


def test_a_stuck_monitor_is_not_trusted():
    m = Mon({"control_plane": {"poll_interval": 10, "failures": 3,
                               "view_max_age": 100},
             "DEFAULT": {"api_timeout": 5}})
    m.check()
    assert m.monitor.stale_after() == 10 * 4 + 3 * 5
    m.clock.advance(54)
    assert m.monitor.status() == (True, "")
    m.clock.advance(2)
    ok, reason = m.monitor.status()
    assert not ok and reason.startswith("no check finished for 56s")


def test_one_log_line_per_change_with_its_reason():
    m = Mon()
    with capture_logs() as logs:
        m.check()
        m.compute.kill_control("nova-scheduler")
        for _ in range(5):
            m.check(5)
            m.monitor.status()
        m.compute.start_control("nova-scheduler")
        m.check()
    lines = [(e["ok"], e["reason"]) for e in logs
             if e["event"] == "control_plane"]
    assert [ok for ok, _ in lines] == [True, False, True]
    assert lines[1][1].startswith("no fencing: nova-scheduler: 0 of 1 up")


def test_engine_powers_nothing_off_while_novas_api_fails():
    """Hole 4 of issue 21, the decision in the engine: Nova's API starts
    failing one pass before a suspect host's grace period ends. Before,
    the hold needed three failed checks, so the host was powered off on
    time; now it stays suspect, its BMC on, until Nova's services are read
    whole again, and then the normal path resumes."""
    w = World(hosts=4)
    monitor = ControlPlaneMonitor(w.conf, w.compute, w.clock,
                                  reconciler_health=w.reconciler.health)
    w.ctx.readiness.control_plane = monitor.status
    w.pass_()
    monitor.check_once()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
        monitor.check_once()
        if w.state("compute-1")[0] == "suspect":
            break
    assert w.state("compute-1")[0] == "suspect"
    # grace_period is 5 s: fail the API just before it ends.
    for _ in range(3):
        w.pass_()
        monitor.check_once()
    outage = cb.ComputeError("GET /os-services: HTTP 503: Service "
                             "Unavailable")
    w.compute.fail["list_services"] = [outage] * 8
    w.compute.fail["list_control_services"] = [outage] * 8
    for _ in range(8):
        with pytest.raises(cb.ComputeError):
            w.pass_()
        w.drain()
        w.engine.tick()
        w.drain()
        monitor.check_once()
        state, reason = w.state("compute-1")
        assert state == "suspect", (state, reason)
        assert w.fencer.powered_off == []
    assert "control plane not ready for a recovery: Nova API: a call " \
           "failed" in reason and "HTTP 503" in reason
    assert not w.compute.services["compute-1"]["forced_down"]
    # The API answers again: the host is fenced and evacuated.
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]


def test_disabled_is_always_ok():
    m = Mon({"control_plane": {"enabled": False}})
    assert m.monitor.status() == (True, "")
    m.compute.kill_control("nova-scheduler")
    assert m.check(20) == (True, "")


# -- the engine holds fencing on it -------------------------------------------

def test_engine_holds_fencing_while_the_scheduler_is_down():
    w = World(hosts=4)
    monitor = ControlPlaneMonitor(w.conf, w.compute, w.clock,
                                  reconciler_health=w.reconciler.health)
    w.ctx.readiness.control_plane = monitor.status
    w.compute.kill_control("nova-scheduler")
    for _ in range(10):
        w.pass_()
        monitor.check_once()
    w.compute.kill("compute-1")
    for _ in range(20):
        w.pass_()
        monitor.check_once()
    state, reason = w.state("compute-1")
    assert state == "suspect"
    assert "control plane not ready for a recovery: nova-scheduler: 0 of 1 " \
           "up" in reason
    assert w.fencer.powered_off == []
    assert not w.compute.services["compute-1"]["forced_down"]
    ok, why = w.engine.cluster_status()
    assert not ok and "nova-scheduler: 0 of 1 up" in why
    w.compute.start_control("nova-scheduler")
    monitor.check_once()
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]


# -- the simulator's control plane through the real driver --------------------

@pytest.fixture
def simnova():
    clock = Clock(1_800_000_000.0)
    cloud = SimCloud(hosts=2, servers_per_host=1, clock=clock)
    cloud.add_control_service("nova-scheduler", "controller-1")
    server = SimServer(cloud).start()
    from instanceha.drivers.compute.nova import NovaDriver
    try:
        clouds, _ = server.write_client_files(tempfile.mkdtemp())
        conf = conf_pkg.make({"DEFAULT": {"cloud": "sim",
                                          "clouds_file": clouds,
                                          "api_timeout": 5}})
        yield cloud, clock, NovaDriver(conf)
    finally:
        server.stop()


def _states(nova):
    return sorted((s.binary, s.host, s.state)
                  for s in nova.list_control_services())


def test_sim_scheduler_and_conductor_heartbeat_and_die(simnova):
    cloud, clock, nova = simnova
    assert _states(nova) == [("nova-conductor", "controller-0", "up"),
                             ("nova-scheduler", "controller-0", "up"),
                             ("nova-scheduler", "controller-1", "up")]
    cloud.kill_service("nova-scheduler")
    clock.advance(cloud.service_down_time + 1)
    assert _states(nova) == [("nova-conductor", "controller-0", "up"),
                             ("nova-scheduler", "controller-0", "down"),
                             ("nova-scheduler", "controller-1", "down")]
    cloud.start_service("nova-scheduler", "controller-1")
    assert ("nova-scheduler", "controller-1", "up") in _states(nova)
    # The compute rows are still only computes.
    assert {s.binary for s in nova.list_services()} == {"nova-compute"}


def test_sim_placement_unreachable_and_api_failing(simnova):
    cloud, clock, nova = simnova
    nova.check_placement()
    cloud.set_placement(False)
    with pytest.raises(cb.ComputeError) as err:
        nova.check_placement()
    assert "ConnectFailure" in str(err.value)
    cloud.set_placement(True)
    nova.check_placement()
    cloud.fail_api("Unexpected API Error.")
    with pytest.raises(cb.ComputeError) as err:
        nova.list_control_services()
    assert str(err.value) == ("GET /os-services: HTTP 500: Unexpected API "
                              "Error.")
    cloud.fail_api(None)
    assert len(nova.list_control_services()) == 3


def _evacuate_one(cloud, clock):
    server = cloud.list_servers("compute-0")[0]
    cloud.kill("compute-0")
    clock.advance(cloud.service_down_time + 1)
    cloud.evacuate(server.id)
    clock.advance(cloud.schedule_time + cloud.evacuation_time + 0.01)
    cloud.now()
    return server.id


def test_sim_evacuation_waits_for_a_conductor():
    clock = Clock(1_800_000_000.0)
    cloud = SimCloud(hosts=2, servers_per_host=1, clock=clock)
    cloud.kill_service("nova-conductor")
    sid = _evacuate_one(cloud, clock)
    assert cloud.get_server(sid).task_state == "rebuilding"
    assert cloud.list_migrations()[0].status == "accepted"
    cloud.start_service("nova-conductor")
    clock.advance(cloud.report_interval + cloud.evacuation_time + 0.01)
    cloud.now()
    assert cloud.get_server(sid).host == "compute-1"
    assert cloud.list_migrations()[0].status == "done"


def test_sim_evacuation_stuck_without_scheduler_failed_without_placement():
    clock = Clock(1_800_000_000.0)
    cloud = SimCloud(hosts=2, servers_per_host=1, clock=clock)
    cloud.kill_service("nova-scheduler")
    sid = _evacuate_one(cloud, clock)
    clock.advance(60)
    cloud.now()
    assert cloud.get_server(sid).task_state == "rebuilding"
    assert cloud.list_migrations()[0].status == "accepted"

    clock = Clock(1_800_000_000.0)
    cloud = SimCloud(hosts=2, servers_per_host=1, clock=clock)
    cloud.set_placement(False)
    sid = _evacuate_one(cloud, clock)
    server = cloud.get_server(sid)
    assert server.vm_state == "error" and server.host == "compute-0"
    assert "No valid host" in server.fault["message"]
    assert cloud.list_migrations()[0].status == "error"
