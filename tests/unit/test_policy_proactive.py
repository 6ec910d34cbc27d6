"""Proactive HA's pure policy (which degraded hosts are drained now) and
its engine part against a fake engine (the preflight, the event sent)."""

from types import SimpleNamespace

from instanceha.drivers.fencing.health import Component, Health, Severity
from instanceha.engine.proactive import ProactiveHA
from instanceha.events import DrainRequest, EventKind as E
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State
from instanceha.policy import proactive as p

CRIT = Health.of([Component("power supply PS1", Severity.CRITICAL,
                            "Redfish Status.Health Critical")])
WARN = Health.of([Component("fan Fan1", Severity.WARNING,
                            "Redfish Status.Health Warning")])
OK = Health.of([])

ON = p.Settings(enabled=True, severity=Severity.CRITICAL, max_concurrent=1,
                max_per_interval=2, rate_interval=3600)


def active(*hosts):
    return {h: "active" for h in hosts}


def test_off_drains_nothing():
    plan = p.plan({"a": CRIT}, active("a"), p.Settings(), 0, [], 0.0)
    assert plan.drain == () and plan.held == {}


def test_critical_drained_warning_ignored_at_critical():
    plan = p.plan({"a": CRIT, "b": WARN, "c": OK}, active("a", "b", "c"),
                  ON, 0, [], 100.0)
    assert [h for h, _ in plan.drain] == ["a"]
    assert "power supply PS1 Critical" in plan.drain[0][1]
    assert plan.held == {}


def test_warning_severity_drains_both_most_severe_first():
    s = p.Settings(enabled=True, severity=Severity.WARNING,
                   max_concurrent=5, max_per_interval=5)
    plan = p.plan({"a": WARN, "b": CRIT}, active("a", "b"), s, 0, [], 0.0)
    assert [h for h, _ in plan.drain] == ["b", "a"]


def test_concurrency_holds_the_second():
    plan = p.plan({"a": CRIT, "b": CRIT}, active("a", "b"), ON, 0, [], 0.0)
    assert [h for h, _ in plan.drain] == ["a"]
    assert "max_concurrent 1" in plan.held["b"]
    plan = p.plan({"b": CRIT}, active("b"), ON, 1, [], 0.0)
    assert plan.drain == () and "1 proactive drain(s) under way" \
        in plan.held["b"]


def test_rate_limit_window():
    s = p.Settings(enabled=True, max_concurrent=5, max_per_interval=1,
                   rate_interval=600)
    plan = p.plan({"b": CRIT}, active("b"), s, 0, [1000.0], 1200.0)
    assert plan.drain == ()
    assert "max_per_interval 1), next in 400s" in plan.held["b"]
    plan = p.plan({"b": CRIT}, active("b"), s, 0, [1000.0], 1600.0)
    assert [h for h, _ in plan.drain] == ["b"]


def test_storm_hold_and_state():
    plan = p.plan({"a": CRIT}, active("a"), ON, 0, [], 0.0,
                  storm="storm hold: 3 of 10")
    assert plan.drain == () and "storm hold is on" in plan.held["a"]
    plan = p.plan({"a": CRIT, "b": CRIT}, {"a": "maintenance"}, ON, 0, [],
                  0.0)
    assert plan.drain == ()
    assert "in state maintenance" in plan.held["a"]
    assert "unknown to the engine" in plan.held["b"]


class FakeEngine:
    def __init__(self, states, ok=True, refusals=()):
        self.recs = {"id-" + h: HostRecord(id="id-" + h, name=h,
                                           state=State(s))
                     for h, s in states.items()}
        self.ok, self.refusals, self.sent = ok, list(refusals), []

    def records(self):
        return self.recs

    def cluster_status(self):
        return (True, "") if self.ok else (False, "storm hold: 4 of 10")

    def drain_preflight(self, rec, request):
        assert request == DrainRequest(then="maintenance")
        return {"ok": not self.refusals, "proceed": False,
                "refusals": self.refusals}

    def submit(self, event):
        self.sent.append(event)


def conf(**kw):
    values = dict(enabled=True, severity="Critical", max_concurrent=1,
                  max_per_interval=2, rate_interval=3600)
    values.update(kw)
    return SimpleNamespace(proactive=SimpleNamespace(**values))


def test_engine_part_sends_operator_drain_once():
    eng = FakeEngine({"a": "active", "b": "active"})
    now = [1000.0]
    pro = ProactiveHA(conf(), eng, lambda: now[0])
    assert pro.on_health({"a": CRIT, "b": CRIT}) == ["a"]
    (ev,) = eng.sent
    assert ev.kind is E.OPERATOR_DRAIN and ev.source == "proactive"
    assert ev.name == "a" and ev.payload == DrainRequest(then="maintenance")
    assert ev.reason.startswith("proactive: hardware health Critical")
    status = pro.status()
    assert status["hosts"]["a"]["action"] == "drain asked for"
    assert "max_concurrent" in status["hosts"]["b"]["action"]
    # Asked again before the engine took it: still under way, nothing new.
    now[0] += 10
    assert pro.on_health({"a": CRIT, "b": CRIT}) == []
    # a drained into maintenance: b's turn (one more in the window).
    eng.recs["id-a"] = HostRecord(id="id-a", name="a",
                                  state=State.MAINTENANCE)
    now[0] += 200
    assert pro.on_health({"a": CRIT, "b": CRIT}) == ["b"]
    assert [e.name for e in eng.sent] == ["a", "b"]


def test_engine_part_refused_preflight_and_storm_send_nothing():
    eng = FakeEngine({"a": "active"}, refusals=["HA admission: no room"])
    pro = ProactiveHA(conf(), eng, lambda: 0.0)
    assert pro.on_health({"a": CRIT}) == []
    assert "preflight refuses: HA admission: no room" in \
        pro.status()["hosts"]["a"]["action"]
    eng = FakeEngine({"a": "active"}, ok=False)
    pro = ProactiveHA(conf(), eng, lambda: 0.0)
    assert pro.on_health({"a": CRIT}) == [] and eng.sent == []
    assert "storm hold" in pro.status()["hosts"]["a"]["action"]
    assert ProactiveHA(conf(enabled=False), eng, lambda: 0.0).on_health(
        {"a": CRIT}) == []


def test_proactive_needs_the_audit(tmp_path):
    import pytest
    from oslo_config import cfg
    from instanceha import conf as conf_pkg
    path = tmp_path / "instanceha.conf"
    path.write_text("[proactive]\nenabled = true\n[audit]\nenabled = false\n")
    with pytest.raises(cfg.Error) as e:
        conf_pkg.load(["--config-file", str(path)])
    assert "[proactive] enabled needs [audit] enabled" in str(e.value)
    path.write_text("[proactive]\nenabled = true\nseverity = Warning\n")
    conf = conf_pkg.load(["--config-file", str(path)])
    assert p.Settings.from_conf(conf).severity is Severity.WARNING


def test_status_text_shows_degraded_hosts():
    from instanceha.cmd.status import format_status
    eng = FakeEngine({"a": "active", "b": "active"})
    pro = ProactiveHA(conf(), eng, lambda: 0.0)
    pro.on_health({"a": CRIT, "b": CRIT})
    text = format_status({"generated_at": 0, "started_at": 0, "hosts": [],
                          "proactive": pro.status()}, now=0)
    assert "HARDWARE DEGRADED (proactive HA, drains at Critical): 2" in text
    assert "  a: Critical (power supply PS1 Critical): drain asked for" \
        in text
    assert "  b: Critical (power supply PS1 Critical): held:" in text


def test_a_hold_is_logged_once_while_its_reason_stays():
    from structlog.testing import capture_logs
    eng = FakeEngine({"a": "active", "b": "active"})
    now = [1000.0]
    pro = ProactiveHA(conf(max_concurrent=5, max_per_interval=1), eng,
                      lambda: now[0])
    with capture_logs() as logs:
        pro.on_health({"a": CRIT, "b": CRIT})
        now[0] += 30                       # "next in" changes
        pro.on_health({"a": CRIT, "b": CRIT})
    held = [e for e in logs if e["event"] == "proactive_drain_held"]
    assert [e["host"] for e in held] == ["b"], held
