"""etc/prometheus/instanceha-rules.yml: valid for promtool, every alert
covered by promtool unit tests (tests/unit/prometheus/rules_test.yml) that
show it firing and silent, and every rule reading only job="instanceha"."""

import re

import yaml

from tests.unit.prometheus.promtool import (
    METRIC, RULE_TESTS, RULES, alerts, promtool, recorded, rules)


def test_promtool_checks_the_rules():
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: %d rules found" % len(rules()) in out.stdout


def test_promtool_unit_tests_pass():
    out = promtool("test", "rules", str(RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    with open(RULE_TESTS) as f:
        cases = [c for t in yaml.safe_load(f)["tests"]
                 for c in t.get("alert_rule_test", [])]
    names = {a["alert"] for a in alerts()}
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    silent = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert names - fires == set(), "never shown firing"
    assert names - silent == set(), "never shown silent"
    assert {c["alertname"] for c in cases} <= names


def test_every_alert_says_how_bad_what_and_why():
    for a in alerts():
        assert a["alert"].startswith("InstanceHA"), a["alert"]
        assert a["labels"]["severity"] in ("critical", "warning"), a
        assert a["annotations"]["summary"].strip(), a["alert"]
        assert len(a["annotations"]["description"]) > 80, a["alert"]


def test_what_pages():
    """The issue's list: unprotected hosts, a storm hold, a failed host,
    no replica acting, recovery slower than a threshold, agents silent,
    the journal unreachable."""
    paging = {a["alert"] for a in alerts()
              if a["labels"]["severity"] == "critical"}
    assert {"InstanceHAUnprotectedHost", "InstanceHAStormHold",
            "InstanceHAHostFailed", "InstanceHANoReplicaActing",
            "InstanceHARecoveryStuck", "InstanceHAFencingSlow",
            "InstanceHAIsolationSlow", "InstanceHAEvacuationSlow",
            "InstanceHAAgentsSilent",
            "InstanceHAJournalUnreachable"} <= paging


def test_every_selector_reads_the_instanceha_job():
    """Every metric a rule reads is selected with job="instanceha", so a
    Prometheus scraping other jobs never mixes theirs in."""
    for r in rules():
        expr = r["expr"]
        for m in re.finditer(r"\b(instanceha_[a-z_]+|up)\b(\{[^}]*\})?",
                             expr):
            assert m.group(2) and 'job="instanceha"' in m.group(2), (
                r.get("alert") or r.get("record"), m.group(0))


def test_recording_rules_are_named_by_convention_and_read_raw_metrics():
    for r in rules():
        if "record" not in r:
            continue
        assert re.fullmatch(r"instanceha:[a-z_]+:[a-z0-9_]+", r["record"])
        # Each reads the exported metrics directly, never another recorded
        # name: the evaluation order within a group does not matter.
        assert not any(name in r["expr"] for name in recorded()), r
        assert METRIC.search(r["expr"]), r
