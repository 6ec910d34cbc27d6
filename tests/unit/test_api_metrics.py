"""/metrics: recovery durations (histograms) and the age of each host's
last successful fencing audit, checked against the journal's times."""

import math

from prometheus_client.parser import text_string_to_metric_families

from instanceha.api.server import OperatorAPI
from instanceha.fsm.states import State
from tests.unit.test_engine import World


def _samples(api):
    text = api.handle("GET", "/metrics")[2].decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _entered(journal, host_id, state):
    return [t["at"] for t in journal.transitions(host_id)
            if t["dst"] == state]


def test_recovery_durations_match_the_journal():
    w = World()
    w.pass_()
    api = OperatorAPI(w.conf, w.engine, w.clock)   # listening from here
    w.compute.kill("compute-0")
    w.until("compute-0", "evacuated", passes=300)
    host_id = w.engine.find("compute-0").id
    suspect = _entered(w.journal, host_id, "suspect")[0]
    fenced = _entered(w.journal, host_id, "fenced")[0]
    isolated = _entered(w.journal, host_id, "evacuating")[0]
    evacs = [r for r in w.journal.evacuations(host_id)
             if r["status"] == "done"]
    assert len(evacs) == 2
    m = _samples(api)
    assert m[("instanceha_detection_to_fenced_seconds_count", ())] == 1
    assert math.isclose(m[("instanceha_detection_to_fenced_seconds_sum",
                           ())], fenced - suspect)
    assert fenced - suspect > 0
    assert m[("instanceha_fenced_to_isolated_seconds_count", ())] == 1
    assert math.isclose(m[("instanceha_fenced_to_isolated_seconds_sum",
                           ())], isolated - fenced)
    assert m[("instanceha_evacuation_seconds_count", ())] == 2
    assert math.isclose(m[("instanceha_evacuation_seconds_sum", ())], sum(
        r["finished_at"] - r["requested_at"] for r in evacs))
    # A second scrape counts nothing twice.
    again = _samples(api)
    assert again[("instanceha_evacuation_seconds_count", ())] == 2
    assert again[("instanceha_detection_to_fenced_seconds_count", ())] == 1


def test_a_suspect_host_that_comes_back_is_not_timed():
    w = World()
    w.pass_()
    api = OperatorAPI(w.conf, w.engine, w.clock)
    rec = w.engine.find("compute-1")

    class Ev:
        at = 10.0
    timings = api.timings
    active = type("R", (), {"id": rec.id, "state": State.ACTIVE})
    suspect = type("R", (), {"id": rec.id, "state": State.SUSPECT})
    fenced = type("R", (), {"id": rec.id, "state": State.FENCED})
    timings.on_change(active, suspect, Ev)
    timings.on_change(suspect, active, Ev)      # heartbeat back
    Ev.at = 50.0
    timings.on_change(active, fenced, Ev)       # no detection to time
    m = _samples(api)
    assert m[("instanceha_detection_to_fenced_seconds_count", ())] == 0


class AuditEngine:
    """What the metrics read: hosts, the audit's last verdict."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.unprotected = {}
        self.last_at = None
        self.stats = {}
        self.health = {"audit": lambda: {"last_at": self.last_at}}
        self.started_at = 0.0

    def snapshot(self):
        return {"hosts": [{"id": h, "name": h, "state": "active"}
                          for h in self.hosts],
                "cluster": {"ok": True}, "sources": {},
                "unprotected": dict(self.unprotected)}


def test_audit_age_per_host():
    from instanceha import conf as conf_pkg
    now = [1000.0]
    engine = AuditEngine(["c0", "c1"])
    api = OperatorAPI(conf_pkg.make({}), engine, lambda: now[0])

    def ages():
        m = _samples(api)
        return {h: m[("instanceha_fencing_audit_age_seconds",
                      (("host", h),))] for h in engine.hosts}
    assert ages() == {"c0": math.inf, "c1": math.inf}   # never audited
    engine.last_at = 1000.0
    engine.unprotected = {"c1": "BMC unreachable"}
    now[0] = 1010.0
    assert ages() == {"c0": 10.0, "c1": math.inf}
    engine.last_at = 1300.0              # c1 still unprotected
    now[0] = 1330.0
    assert ages() == {"c0": 30.0, "c1": math.inf}
    engine.last_at, engine.unprotected = 1600.0, {}
    engine.unprotected = {"c0": "no inventory entry"}
    now[0] = 1601.0
    assert ages() == {"c0": 301.0, "c1": 1.0}


def test_no_audit_no_age_gauge():
    w = World()
    api = OperatorAPI(w.conf, w.engine, w.clock)
    assert not any(k[0] == "instanceha_fencing_audit_age_seconds"
                   for k in _samples(api))
