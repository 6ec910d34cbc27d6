"""The fencing readiness audit: the pure judgement, then the audit over
fake Nova and fake BMCs (no thread, no sleeping)."""

import random

from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha.api.server import OperatorAPI
from instanceha.cmd.main import format_status
from instanceha.drivers.compute.base import ComputeService
from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing.inventory import BMC
from instanceha.sources.audit import FencingAudit, judge
from tests.unit.fakes import Clock, FakeCompute

ON, OFF = fb.PowerState.ON, fb.PowerState.OFF


def svc(state="up", forced_down=False):
    return ComputeService(id="u1", host="c1", state=state, status="enabled",
                          forced_down=forced_down, disabled_reason=None,
                          updated_at=0.0)


BMC1 = BMC(host="c1", driver="redfish", address="https://10.0.0.1")


def test_judge():
    assert judge(svc(), BMC1, [("redfish x", ON)]) == (None, [])
    assert judge(svc(), None, [])[0] == "no entry in the fencing inventory"
    assert "noop" in judge(svc(), BMC(host="c1", driver="noop"), [])[0]
    why, _ = judge(svc(), BMC1, [("redfish x", "c1: credentials refused")])
    assert why.startswith("no fencing method answers") and \
        "credentials refused" in why
    why, _ = judge(svc(), BMC1, [("redfish x", OFF)])
    assert "another machine" in why
    # Off is expected for a host Nova sees down, or that was fenced.
    assert judge(svc("down"), BMC1, [("redfish x", OFF)]) == (None, [])
    assert judge(svc(forced_down=True), BMC1, [("r", OFF)]) == (None, [])
    # One method fails, another answers: protected, degraded.
    why, degraded = judge(svc(), BMC1, [("redfish a", "timeout"),
                                        ("ipmi b", ON)])
    assert why is None and degraded == ["redfish a: timeout"]


class Rig:
    def __init__(self, give_way=None, wait=None, hosts_per_second=0,
                 concurrency=8):
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts=4, servers_per_host=0)
        self.inventory = {h: BMC(host=h, driver="fake", address="10.0.0.%d"
                                 % i) for i, h in
                          enumerate(sorted(self.compute.services))}
        self.broken = {}
        self.off = set()
        rig = self

        class Fencer(fb.FencingDriver):
            name = "fake"

            def power_off(self, bmc):
                raise AssertionError("the audit never powers off")

            def power_state(self, bmc):
                if bmc.host in rig.broken:
                    raise fb.FenceError(rig.broken[bmc.host])
                return OFF if bmc.host in rig.off else ON
        fencer = Fencer()
        self.conf = conf_pkg.make({"audit": {
            "interval": 300, "jitter": 0.1,
            "hosts_per_second": hosts_per_second,
            "concurrency": concurrency}})
        self.audit = FencingAudit(self.conf, self.compute,
                                  self.inventory.get, lambda name: fencer,
                                  self.clock, rng=random.Random(1),
                                  give_way=give_way, wait=wait)
        self.reads = 0
        read = Fencer.power_state

        def counted(this, bmc):
            self.reads += 1
            return read(this, bmc)
        Fencer.power_state = counted


def test_unprotected_hosts_are_found_logged_once_and_cleared():
    r = Rig()
    del r.inventory["compute-3"]
    with capture_logs() as logs:
        assert r.audit.run_once() == {
            "compute-3": "no entry in the fencing inventory"}
        r.broken["compute-1"] = "compute-1: BMC 10.0.0.1 refused the " \
            "credentials (HTTP 401)"
        r.off.add("compute-2")           # a copy-pasted address
        first = r.audit.run_once()
        again = r.audit.run_once()       # nothing changed: nothing logged
    assert first == again and sorted(first) == [
        "compute-1", "compute-2", "compute-3"]
    assert "HTTP 401" in first["compute-1"]
    assert "another machine" in first["compute-2"]
    lines = [x for x in logs if x["event"] == "host_unprotected"]
    assert sorted(x["host"] for x in lines) == [
        "compute-1", "compute-2", "compute-3"]
    # Fixed: protected again, said once.
    del r.broken["compute-1"]
    r.off.discard("compute-2")
    with capture_logs() as logs:
        assert r.audit.run_once() == {
            "compute-3": "no entry in the fencing inventory"}
    assert sorted(x["host"] for x in logs
                  if x["event"] == "host_protected") == ["compute-1",
                                                        "compute-2"]
    h = r.audit.health()
    assert (h["audits"], h["checked"], h["unprotected"]) == (4, 4, 1)


def test_nova_unreadable_keeps_the_last_verdict():
    r = Rig()
    r.broken["compute-0"] = "timeout"
    r.audit.run_once()
    r.compute.fail["list_services"] = [RuntimeError("HTTP 503")]
    assert list(r.audit.run_once()) == ["compute-0"]
    assert "HTTP 503" in r.audit.health()["last_error"]


def test_waits_are_jittered_within_bounds():
    r = Rig()
    waits = [r.audit.next_wait() for _ in range(200)]
    assert min(waits) >= 270 and max(waits) <= 330
    assert max(waits) - min(waits) > 30


def test_status_and_metrics_show_unprotected_hosts():
    r = Rig()
    r.broken["compute-1"] = "compute-1: unreachable"
    r.audit.run_once()

    class Engine:
        stats = {}

        def snapshot(self):
            return {"hosts": [], "cluster": {"ok": True, "reason": ""},
                    "sources": {"audit": r.audit.health()},
                    "unprotected": r.audit.unprotected(),
                    "generated_at": 0, "started_at": 0}
    text = format_status(Engine().snapshot(), now=0)
    assert "UNPROTECTED: 1 host(s)" in text and "compute-1: " in text
    api = OperatorAPI(conf_pkg.make({}), Engine(), r.clock)
    body = api.handle("GET", "/metrics")[-1]
    body = body.decode() if isinstance(body, bytes) else body
    assert 'instanceha_host_unprotected{host="compute-1"} 1.0' in body
    assert "instanceha_unprotected_hosts 1.0" in body


def test_power_watch_sends_changes_and_marks_only_hosts_that_lost_power():
    r = Rig()
    events = []
    r.audit._sink = events.append
    r.off.add("compute-3")              # Off from the first read: suspicious,
    r.audit.run_once()                  # not a power loss
    del events[:]                       # (the audit's own reads: below)
    r.audit.watch_once()
    assert [(e.kind.value, e.name) for e in events
            if e.kind.value == "power_off"] == [("power_off", "compute-3")]
    assert r.audit.powered_off() == set()
    del events[:]
    r.audit.watch_once()                # nothing changed: no event
    assert events == []
    r.off.add("compute-1")              # On, then Off: power lost
    with capture_logs() as logs:
        r.audit.watch_once()
    assert [(e.kind.value, e.name, e.host) for e in events] == [
        ("power_off", "compute-1", "uuid-1")]
    assert r.audit.powered_off() == {"compute-1"}
    assert [x["host"] for x in logs if x["event"] == "power_lost"] == [
        "compute-1"]
    r.off.discard("compute-1")          # powered on again
    r.audit.watch_once()
    assert events[-1].kind.value == "power_on"
    assert r.audit.powered_off() == set()



def test_reads_wait_while_hosts_are_in_recovery_then_go_on():
    """Reading every BMC competes with a recovery for the process: the
    audit and the power watch wait (no BMC read, said once) while the
    engine has hosts being proven dead or evacuated."""
    urgent = ["2 host(s) in recovery (fencing 2)"]
    waits = []

    def wait(seconds):
        waits.append(seconds)
        assert r.reads == 0, "a BMC was read during the recovery"
        if len(waits) == 3:
            urgent[0] = None        # the recovery ends while it waits
        return False
    r = Rig(give_way=lambda: urgent[0], wait=wait)
    with capture_logs() as logs:
        assert r.audit.run_once() == {}
    assert r.reads == 4 and len(waits) == 3
    events = [x["event"] for x in logs]
    assert events.count("audit_paused") == 1
    assert events.count("audit_resumed") == 1
    paused = next(x for x in logs if x["event"] == "audit_paused")
    assert "fencing 2" in paused["reason"]
    assert not r.audit.health()["paused_for_recovery"]
    urgent[0] = "1 host(s) in recovery (evacuating 1)"
    del waits[:]
    r.reads = 0
    with capture_logs():
        r.audit.watch_once()
    assert r.reads == 4 and len(waits) == 3


def test_a_stop_while_waiting_ends_the_audit_judging_nothing():
    r = Rig(give_way=lambda: "1 host(s) in recovery (suspect 1)",
            wait=lambda seconds: True)
    r.broken["compute-1"] = "timeout"
    r.audit._stop.set()
    assert r.audit.run_once() == {}
    assert r.reads == 0 and r.audit.health()["audits"] == 0


def test_the_engine_says_when_hosts_are_in_recovery():
    from tests.unit.test_engine import World
    w = World(hosts=3, servers=1)
    w.pass_()
    assert w.engine.urgent() is None
    w.compute.kill("compute-1")
    for _ in range(60):
        w.pass_()
        if w.state("compute-1")[0] == "suspect":
            break
    assert w.engine.urgent() == ("1 host(s) in recovery (suspect 1): "
                                 "fencing and evacuation come first")
    w.until("compute-1", "evacuated")
    assert w.engine.urgent() is None


def test_hosts_are_audited_at_most_hosts_per_second():
    """An audit of thousands of BMCs must not take the process from
    detection: the reads are spread at [audit] hosts_per_second."""
    starts = []

    def wait(seconds):
        r.clock.advance(seconds)
        return False
    # One reader, so that the fake clock advances in one thread.
    r = Rig(wait=wait, hosts_per_second=2, concurrency=1)
    read = r.audit._check

    def noted(service):
        out = read(service)
        starts.append(r.clock())
        return out
    r.audit._check = noted
    t0 = r.clock()
    assert r.audit.run_once() == {}
    assert r.reads == 4
    # 4 hosts at 2 a second: the last one read 1.5 s after the first.
    assert max(starts) - t0 == 1.5
