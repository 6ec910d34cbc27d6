"""The engine with in-memory drivers, driven step by step on a fake clock."""

import pytest

from instanceha import conf as conf_pkg
from instanceha.drivers.compute import base as cb
from instanceha.drivers.fencing.inventory import BMC
from instanceha.engine.engine import Context, Engine
from instanceha.engine.progress import ProgressBoard
from instanceha.events import Event, EventKind as E
from instanceha.journal import Journal
from instanceha.sources.reconciler import Reconciler
from tests.unit.fakes import Clock, FakeCompute, FakeFencer


class ClockBoard(ProgressBoard):
    """The progress board on the injected clock: a wait lets its timeout
    pass on the clock at once (an evacuation's polls and back-offs)."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def wait(self, since_generation, timeout):
        if self.generation() == since_generation:
            self.clock.advance(timeout)
        return self.generation()


class World:
    def __init__(self, hosts=3, servers=2, refuse=(), threshold=50,
                 leave_disabled=False, capacity=100, options=None):
        self.conf = conf_pkg.make(dict({
            "detection": {"grace_period": 5, "delta": 10},
            "policy": {"threshold": threshold},
            "evacuation": {"poll_interval": 0.05, "retry_backoff": 30,
                           "leave_disabled": leave_disabled}},
            **(options or {})))
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts, servers, capacity)
        self.fencer = FakeFencer(self.compute, refuse)
        self.journal = Journal("sqlite://")
        inv = {n: BMC(host=n, driver="fake", address="bmc-" + n)
               for n in self.compute.services}
        self.ctx = Context(self.conf, self.compute, self.journal, inv,
                           lambda name: self.fencer, self.clock,
                           ClockBoard(self.clock))
        self.engine = Engine(self.conf, self.ctx, self.journal, self.clock)
        self.reconciler = Reconciler(
            self.conf, self.compute, self.engine.submit, self.clock,
            on_capacity=self.engine.capacity_appeared,
            # As the service wires it: between full passes, only changed
            # verdicts and the rows of hosts not quietly active.
            wants_every_report=self.engine.wants_every_report)

    def drain(self):
        for _ in range(1000):
            self.engine.queue.pump()
            key = self.engine.queue.get(timeout=0)
            if key is None:
                return
            self.engine.work(key)
        raise AssertionError("engine did not settle")

    def pass_(self, seconds=1.0):
        """Time passes; the world heartbeats; reconciler and ticker run."""
        self.clock.advance(seconds)
        self.compute.heartbeat()
        self.reconciler.run_once()
        self.drain()
        self.engine.tick()
        self.drain()

    def until(self, host, state, passes=60):
        for _ in range(passes):
            self.pass_()
            if self.state(host)[0] == state:
                return
        raise AssertionError("%s never reached %s: %s"
                             % (host, state, self.state(host)))

    def state(self, host):
        rec = next(r for r in self.engine.records().values()
                   if r.name == host)
        return rec.state.value, rec.reason


def test_host_death_is_recovered_and_host_put_back_after_cleanup():
    w = World()
    w.pass_()
    assert {w.state(h)[0] for h in w.compute.services} == {"active"}
    w.compute.kill("compute-1")
    for _ in range(20):
        w.pass_()
    state, reason = w.state("compute-1")
    assert state == "evacuated", reason
    assert reason == "2/2 servers evacuated"
    svc = w.compute.services["compute-1"]
    assert svc["forced_down"] and svc["status"] == "disabled"
    assert svc["disabled_reason"].startswith("instanceha: evacuating ")
    assert w.fencer.powered_off == ["compute-1"]
    assert all(v["host"] != "compute-1" and v["status"] == "ACTIVE"
               for v in w.compute.servers.values())
    # Host returns: re-enabled only once migrations are completed.
    w.compute.services["compute-1"]["alive"] = True
    w.pass_()
    assert w.state("compute-1")[0] == "recovering"
    assert "not completed" in w.state("compute-1")[1]
    assert w.compute.services["compute-1"]["forced_down"]
    w.compute.boot("compute-1")
    for _ in range(10):
        w.pass_()
    assert w.state("compute-1")[0] == "active"
    assert w.compute.services["compute-1"]["status"] == "enabled"
    assert not w.compute.services["compute-1"]["forced_down"]
    dsts = [t["dst"] for t in w.journal.transitions()
            if t["host_name"] == "compute-1"]
    dsts = [d for i, d in enumerate(dsts) if i == 0 or dsts[i - 1] != d]
    assert dsts == ["suspect", "fencing", "fenced", "evacuating",
                    "evacuated", "recovering", "active"]
    evacs = w.journal.evacuations()
    assert len(evacs) == 2 and {e["status"] for e in evacs} == {"done"}
    kinds = [(a["kind"], a["outcome"]) for a in w.journal.actions()]
    assert ("fence", "fence_ok") in kinds and ("evacuate", "evacuate_ok") in kinds


def test_leave_disabled():
    w = World(leave_disabled=True)
    w.pass_()
    w.compute.kill("compute-0")
    for _ in range(20):
        w.pass_()
    w.compute.boot("compute-0")
    for _ in range(10):
        w.pass_()
    svc = w.compute.services["compute-0"]
    assert w.state("compute-0")[0] == "active"
    assert not svc["forced_down"] and svc["status"] == "disabled"
    assert "left disabled" in w.state("compute-0")[1]


def test_threshold_fences_nothing():
    w = World(hosts=4)
    w.pass_()
    for h in ("compute-0", "compute-1", "compute-2"):
        w.compute.kill(h)
    for _ in range(30):
        w.pass_()
    assert w.fencer.powered_off == []
    state, reason = w.state("compute-0")
    assert state == "suspect" and "threshold" in reason
    assert not any(s["forced_down"] for s in w.compute.services.values())


def test_fencing_refused_nothing_evacuated():
    w = World(refuse={"compute-2"})
    w.pass_()
    w.compute.kill("compute-2")
    for _ in range(20):
        w.pass_()
    state, reason = w.state("compute-2")
    assert state == "failed" and "BMC refused power off" in reason
    assert not w.compute.migrations
    assert not w.compute.services["compute-2"]["forced_down"]


def test_nova_error_during_action_is_retried_with_backoff():
    w = World()
    w.pass_()
    w.compute.kill("compute-0")
    w.until("compute-0", "suspect")
    for _ in range(4):
        w.pass_()
    assert w.state("compute-0")[0] == "suspect"
    w.compute.fail["force_down"] = [cb.ComputeError("HTTP 503", 503)]
    w.pass_()   # fence OK, isolate fails once
    errors = [a for a in w.journal.actions() if a["outcome"] == "error"]
    assert len(errors) == 1 and "503" in errors[0]["detail"]
    shown = {h["name"]: h for h in w.engine.snapshot()["hosts"]}
    assert "isolate failed (ComputeError: HTTP 503); retry 1" == \
        shown["compute-0"]["retrying"]
    for _ in range(10):
        w.pass_()
    assert w.state("compute-0")[0] == "evacuated"
    assert w.engine.snapshot()["hosts"][0]["retrying"] is None


def test_no_capacity_goes_pending_then_recovers():
    w = World(hosts=2, servers=2, capacity=3)
    w.pass_()
    w.compute.kill("compute-0")
    w.until("compute-0", "pending")
    state, reason = w.state("compute-0")
    assert state == "pending" and "No valid host" in reason
    w.compute.capacity = 10
    for _ in range(40):
        w.pass_()
    assert w.state("compute-0")[0] == "evacuated"


def test_restart_resumes_from_journal():
    w = World()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    # The engine stops after the fence transition was journalled, before
    # the fence action ran.
    w.clock.advance(10)
    w.engine.tick()
    key = w.engine.queue.get(timeout=0)
    rec = w.engine.records()[key]
    w.engine._apply(w.engine._inbox.take(key, w.clock()))
    assert w.journal.latest()[key]["state"] == "fencing"
    assert w.fencer.powered_off == []
    w2 = Engine(w.conf, w.ctx, w.journal, w.clock)
    w.engine = w2
    assert w2.resume_from_journal() == 1
    w.reconciler = Reconciler(w.conf, w.compute, w2.submit, w.clock)
    for _ in range(10):
        w.pass_()
    assert w.state("compute-1")[0] == "evacuated"


def test_resume_from_nova_marker_without_journal():
    w = World()
    svc = w.compute.services["compute-2"]
    svc.update(forced_down=True, status="disabled", alive=False,
               updated_at=w.clock() - 100,
               disabled_reason="instanceha: evacuating 2026-01-01T00:00:00Z")
    w.pass_()
    # No journal: held for boot time + grace (300 + 5 s) in case it is
    # booting, then proven dead again and evacuated.
    assert w.state("compute-2")[0] == "pending"
    for _ in range(303):
        w.pass_()
    assert w.fencer.powered_off == []
    for _ in range(5):
        w.pass_()
    assert w.fencer.powered_off == ["compute-2"]
    assert w.state("compute-2")[0] == "evacuated"
    assert all(v["host"] != "compute-2" for v in w.compute.servers.values())


def test_external_force_down_is_fenced_first():
    w = World()
    w.pass_()
    svc = w.compute.services["compute-0"]
    svc.update(forced_down=True, disabled_reason="masakari")
    for _ in range(10):
        w.pass_()
    assert w.fencer.powered_off == ["compute-0"]
    assert w.state("compute-0")[0] == "evacuated"


def test_snapshot_lists_hosts():
    w = World()
    w.pass_()
    snap = w.engine.snapshot()
    assert [h["name"] for h in snap["hosts"]] == sorted(w.compute.services)
    assert snap["cluster"]["ok"]


def test_our_own_write_is_not_taken_for_a_returning_heartbeat():
    # kdump-fast path: fenced seconds after death, so the force-down write
    # bumps updated_at to "now" while the host is dead.
    w = World()
    w.pass_()
    w.compute.kill("compute-1")
    w.compute.services["compute-1"].update(forced_down=True,
                                           disabled_reason="other tool")
    for _ in range(16):       # fresh updated_at from our write within delta
        w.pass_()
        assert w.state("compute-1")[0] in ("suspect", "fencing", "fenced",
                                           "evacuating", "evacuated")
    assert w.state("compute-1")[0] == "evacuated"
    w.compute.services["compute-1"]["alive"] = True   # really back
    w.pass_()
    assert w.state("compute-1")[0] == "recovering"


def test_passed_deadline_is_decided_without_waiting_for_a_tick():
    w = World()
    w.conf.set_override("grace_period", 0, "detection")
    w.engine.policy = w.engine.policy.__class__.from_conf(w.conf)
    w.pass_()
    rec = w.engine.find("compute-2")
    w.compute.kill("compute-2")
    w.engine.submit(Event(E.FORCED_DOWN, rec.id, w.clock(), name="compute-2",
                          source="notification", reason="another actor"))
    w.drain()                       # no tick, no reconciler pass
    assert w.fencer.powered_off == ["compute-2"]


def test_threshold_hold_does_not_spin_on_passed_deadline():
    w = World(hosts=2, threshold=0)
    w.conf.set_override("grace_period", 0, "detection")
    w.engine.policy = w.engine.policy.__class__.from_conf(w.conf)
    w.pass_()
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.HEARTBEAT_LOST, rec.id, w.clock(),
                          name="compute-0", source="test"))
    w.drain()                       # would raise "did not settle" on a spin
    state, reason = w.state("compute-0")
    assert state == "suspect" and "threshold" in reason
    assert w.fencer.powered_off == []


def test_one_failing_evacuate_request_does_not_block_the_others():
    w = World(servers=4)
    w.conf.set_override("action_retries", 2)
    w.pass_()
    real = w.compute.evacuate

    def evacuate(server_id):
        if server_id == "compute-1-vm-0":
            raise cb.ComputeError("HTTP 500", 500)
        return real(server_id)
    w.compute.evacuate = evacuate
    w.compute.kill("compute-1")
    w.until("compute-1", "failed", passes=200)
    on_host = [s for s, v in w.compute.servers.items()
               if v["host"] == "compute-1"]
    assert on_host == ["compute-1-vm-0"]          # the other 3 moved
    reason = w.state("compute-1")[1]
    # Nova's API failing one server's requests is not a failed rebuild:
    # the action is retried with back-off (action_retries), then failed.
    assert "HTTP 500" in reason and "raised 2 times in a row" in reason


def test_action_that_keeps_raising_gives_up_after_action_retries():
    w = World()
    w.conf.set_override("action_retries", 3)
    w.pass_()
    w.compute.fail["force_down"] = [cb.ComputeError("HTTP 503", 503)] * 10
    w.compute.kill("compute-0")
    w.until("compute-0", "failed", passes=200)
    state, reason = w.state("compute-0")
    assert "isolate raised 3 times in a row" in reason and "503" in reason
    assert len(w.compute.fail["force_down"]) == 7   # no more attempts


def test_journal_failure_when_an_action_starts_is_retried_not_lost():
    w = World()
    w.pass_()
    w.compute.kill("compute-0")
    w.compute.fail["force_down"] = [cb.ComputeError("HTTP 503", 503)]
    real = w.journal.action_started
    calls = []

    def flaky(*a):
        calls.append(a)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return real(*a)
    w.journal.action_started = flaky
    w.until("compute-0", "evacuated", passes=120)
    assert len(calls) >= 2


def test_operator_suspend_preempts_the_next_action():
    w = World()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    rec = w.engine.find("compute-1")
    w.clock.advance(10)
    w.engine.tick()                       # TICK queued: would start fencing
    key = w.engine.queue.get(timeout=0)
    w.engine._apply(w.engine._inbox.take(key, w.clock()))   # -> fencing + FENCE
    w.engine.submit(Event(E.OPERATOR_SUSPEND, rec.id, w.clock(),
                          name="compute-1", source="operator",
                          reason="wrong BMC"))
    w.engine.process(key)
    w.engine.queue.done(key)
    assert w.state("compute-1")[0] == "suspended"
    assert w.fencer.powered_off == []


def test_host_that_reports_back_mid_evacuation_stops_it():
    w = World(servers=3)
    w.conf.set_override("concurrency", 1, "evacuation")
    w.pass_()
    w.compute.complete = False               # evacuations stay in flight
    sent = []
    real = w.compute.evacuate

    def evacuate(server_id):
        sent.append(server_id)
        real(server_id)
        # First request made: the host comes back (a kdump reboot).
        w.clock.advance(1)
        w.compute.services["compute-2"].update(alive=True)
        w.compute.heartbeat()
        m = w.compute.migrations[-1]
        m["status"] = "done"
        w.compute.servers[server_id]["host"] = m["dest"]
    w.compute.evacuate = evacuate
    w.compute.kill("compute-2")
    w.until("compute-2", "failed")
    assert len(sent) == 1
    assert "reported back while being evacuated" in w.state("compute-2")[1]


def test_threshold_is_judged_when_a_queued_tick_is_applied():
    w = World(hosts=4)
    w.pass_()
    w.compute.kill("compute-0")
    w.until("compute-0", "suspect")
    w.clock.advance(10)
    w.engine.tick()                  # TICK queued while only 1 of 4 is dead
    for name in ("compute-1", "compute-2"):
        rec = w.engine.find(name)
        w.engine.submit(Event(E.HEARTBEAT_LOST, rec.id, w.clock(), name=name,
                              source="reconciler", reason="down"))
        w.engine.process(rec.id)     # these are processed first
    w.drain()
    state, reason = w.state("compute-0")
    assert state == "suspect" and "threshold" in reason
    assert w.fencer.powered_off == []
