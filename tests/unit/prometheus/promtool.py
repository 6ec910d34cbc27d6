"""Where the rules, their promtool tests and the dashboard are, and
promtool itself: missing, the tests using it skip, or fail naming it under
INSTANCEHA_REQUIRE_SERVICES=1 (tools/test-packages.sh installs Debian's
prometheus package, which has it)."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
RULES = REPO / "etc" / "prometheus" / "instanceha-rules.yml"
RULE_TESTS = pathlib.Path(__file__).resolve().parent / "rules_test.yml"
DASHBOARD = REPO / "etc" / "grafana" / "instanceha-dashboard.json"
REQUIRE = os.environ.get("INSTANCEHA_REQUIRE_SERVICES") == "1"

#: a metric name of the engine's (recorded names have a colon instead)
METRIC = re.compile(r"\binstanceha_[a-z_]+")


def promtool(*args):
    """Run ``promtool ARGS`` (CompletedProcess, text); skips or fails when
    it is not installed."""
    exe = shutil.which("promtool")
    if exe is None:
        what = ("promtool is not installed (Debian package prometheus; "
                "tools/test-packages.sh installs it)")
        if REQUIRE:
            pytest.fail(what, pytrace=False)
        pytest.skip(what)
    return subprocess.run([exe, *args], capture_output=True, text=True,
                          timeout=120)


def rules():
    """The rule groups' rules, in order."""
    with open(RULES) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def alerts():
    return [r for r in rules() if "alert" in r]


def recorded():
    return {r["record"] for r in rules() if "record" in r}
