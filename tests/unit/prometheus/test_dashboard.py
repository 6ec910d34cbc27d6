"""etc/grafana/instanceha-dashboard.json: a Grafana dashboard whose every
query reads a recording rule of etc/prometheus/instanceha-rules.yml or the
engine's metrics, through the dashboard's data source variable.
(functional/sim/test_prometheus.py runs every query against a real
Prometheus scraping the real engine.)"""

import json
import re

from tests.unit.prometheus.promtool import DASHBOARD, METRIC, recorded


def _dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def _targets(dash):
    return [(p, t) for p in dash["panels"] for t in p.get("targets", [])]


def test_it_loads_with_its_datasource_variable():
    dash = _dashboard()
    assert dash["uid"] == "instanceha" and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel, target in _targets(dash):
        assert panel["datasource"]["uid"] == "${datasource}"
        assert target["datasource"]["uid"] == "${datasource}"
        assert target["expr"].strip(), panel["title"]
        assert panel["description"].strip(), panel["title"]


def test_what_it_shows():
    """The issue's panels: hosts by state over time, the three recovery
    durations from the histograms, evacuations per minute, holds,
    unprotected hosts."""
    exprs = " ".join(t["expr"] for _, t in _targets(_dashboard()))
    for name in ("instanceha:hosts:by_state",
                 "instanceha:detection_to_fenced_seconds:p90_1h",
                 "instanceha:fenced_to_isolated_seconds:p90_1h",
                 "instanceha:evacuation_seconds:p90_1h",
                 "instanceha:evacuations:per_minute",
                 "instanceha:storm_hold:by_scope",
                 "instanceha:fencing_held:max",
                 "instanceha:unprotected_hosts:max",
                 "instanceha_host_unprotected"):
        assert name in exprs, name


def test_every_recorded_name_it_reads_is_recorded():
    used = set()
    for panel, target in _targets(_dashboard()):
        used |= set(re.findall(r"\binstanceha:[a-z_]+:[a-z0-9_]+",
                               target["expr"]))
    assert used and used <= recorded(), sorted(used - recorded())


def test_raw_metrics_are_read_from_the_instanceha_job():
    for panel, target in _targets(_dashboard()):
        for m in re.finditer(r"\b(instanceha_[a-z_]+|up)\b(\{[^}]*\})?",
                             target["expr"]):
            assert m.group(2) and 'job="instanceha"' in m.group(2), (
                panel["title"], m.group(0))
        # Plain PromQL: no Grafana macro, so that the functional test runs
        # each query as it stands.
        assert "$__" not in target["expr"], panel["title"]
    assert any(METRIC.search(t["expr"]) for _, t in _targets(_dashboard()))
