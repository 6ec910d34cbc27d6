"""``instanceha demo --list`` and ``--scenario``: the names, the error for
a name that is no drill, the hand-off to ``python -m instanceha.drills``.
No drill runs here (functional/sim/test_drills.py runs each)."""

import importlib
import os
import io
import sys

import pytest

from instanceha.cmd import demo
from instanceha.drills import __main__ as drills_main
from instanceha.drills import bed
from instanceha.drills import registry
from instanceha.drills.timeline import Timeline

EXPECTED = ["host-death", "compute-death", "kdump", "kdump-trusted", "storm",
            "cascade", "bmc-unreachable", "drain", "instance-crash"]


def test_list_names_every_scenario_with_a_line_each(capsys):
    assert demo.main(["--list"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[:len(EXPECTED)]] == EXPECTED
    for line, scenario in zip(lines, registry.SCENARIOS):
        assert line.split(None, 1)[1] == scenario.summary
    # Every behaviour has its drill now: no "not yet" line.
    assert registry.PENDING == ()
    assert lines[len(EXPECTED):] == []


def test_list_says_what_is_still_pending(monkeypatch):
    monkeypatch.setattr(registry, "PENDING", (("x-crash", "waits for x"),))
    assert registry.listing().splitlines()[-1] == \
        "(not yet: x-crash: waits for x)"


def test_unknown_scenario_is_refused_naming_it_and_the_valid_ones(capsys):
    ran = []
    args = demo._parse(["--scenario", "host-dearth"])
    assert demo.drill(args, sys.stdout, run=lambda *a: ran.append(a)) == 2
    out, err = capsys.readouterr()
    assert ran == [] and out == ""
    assert err.startswith("instanceha demo: no scenario 'host-dearth'; ")
    for name in EXPECTED:
        assert name in err
    assert demo.main(["--scenario", "host-dearth"]) == 2


def test_the_drill_runs_as_its_own_process():
    ran = []
    out = io.StringIO()
    args = demo._parse(["--scenario", "storm", "--workdir", "/tmp/x"])
    assert demo.drill(args, out, run=lambda *a: ran.append(a) or 0) == 0
    assert ran == [(sys.executable, [sys.executable, "-m",
                                     "instanceha.drills", "storm",
                                     "--workdir", "/tmp/x"])]
    assert out.getvalue() == ""


@pytest.mark.parametrize("argv", [
    ["--scenario", "storm", "--hosts", "3"],
    ["--list", "--kill", "compute-0"],
    ["--list", "--scenario", "storm"],
])
def test_the_demo_options_are_not_a_drills(argv, capsys):
    with pytest.raises(SystemExit) as e:
        demo._parse(argv)
    assert e.value.code == 2
    assert "instanceha demo: error:" in capsys.readouterr().err


def test_plain_demo_options_still_parse():
    args = demo._parse(["--hosts", "3", "--kill", "compute-2"])
    assert (args.hosts, args.kill, args.scenario, args.list) == (
        3, "compute-2", None, False)


def test_the_drills_module_refuses_an_unknown_name_too(capsys):
    assert drills_main.main(["nope"]) == 2
    assert "no scenario 'nope'" in capsys.readouterr().err


def test_every_scenario_names_a_function_and_its_summary_is_one_line():
    assert registry.names() == EXPECTED
    for s in registry.SCENARIOS:
        module, func = s.target.split(":")
        fn = getattr(importlib.import_module("instanceha.drills." + module),
                     func)
        assert callable(fn), s
        assert "\n" not in s.summary and len(s.summary) < 120, s
    assert registry.lookup("kdump").name == "kdump"
    assert registry.lookup("kdum") is None


def test_timeline_prints_elapsed_seconds_and_keeps_first_marks():
    now = [100.0]
    out = io.StringIO()
    tl = Timeline(out, clock=lambda: now[0])
    now[0] = 101.25
    tl.say("compute-1  active -> suspect", mark="compute-1:suspect")
    now[0] = 103.0
    tl.say("again", mark="compute-1:suspect")
    assert out.getvalue() == ("  [  1.2s] compute-1  active -> suspect\n"
                              "  [  3.0s] again\n")
    assert tl.marks == {"compute-1:suspect": 1.25}


class _Drill:
    def __init__(self, verdict=None, error=None):
        self.verdict, self.error, self.closed = verdict, error, 0

    def __call__(self, make):
        if self.error:
            raise self.error
        return self.verdict


@pytest.mark.parametrize("fn, status, last", [
    (_Drill("it held"), 0, "PASS: it held (x, "),
    (_Drill(error=bed.DrillFailed("compute-1 is on")), 1,
     "FAIL: compute-1 is on (x, "),
    (_Drill(error=KeyError("compute-9")), 1,
     "FAIL: the drill broke: KeyError: 'compute-9' (x, "),
])
def test_run_ends_with_one_verdict_line_and_its_status(tmp_path, fn, status,
                                                       last):
    out = io.StringIO()
    scenario = registry.Scenario("x", "a drill", "none:none")
    assert drills_main.run(scenario, fn, str(tmp_path), out,
                           log_setup=lambda *a, **k: None) == status
    lines = out.getvalue().splitlines()
    assert lines[0] == "instanceha drill x: a drill"
    assert lines[-1].startswith(last), lines
    assert lines[-2] == "kept for inspection: %s" % tmp_path


def test_settings_text_names_the_drills_own_overrides():
    class G:
        pass
    conf = G()
    conf.detection, conf.fencing, conf.evacuation = G(), G(), G()
    conf.detection.poll_interval, conf.detection.delta = 0.5, 3.0
    conf.detection.grace_period = 1.0
    conf.fencing.timeout, conf.evacuation.concurrency = 15.0, 10
    text = bed.settings_text(conf, {"policy": {"threshold": 50}})
    assert text.splitlines()[1] == "  [policy] threshold = 50"
    assert "suspect after 3s without heartbeat, 1s grace" in text


def test_a_temporary_workdir_removed_after_a_pass_is_said_removed(
        tmp_path, monkeypatch):
    """The log path a drill prints (in its temporary directory) is gone
    after a PASS: the drill says so, not "kept" nor nothing."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = io.StringIO()
    scenario = registry.Scenario("x", "a drill", "none:none")
    assert drills_main.run(scenario, _Drill("it held"), None, out,
                           log_setup=lambda *a, **k: None) == 0
    lines = out.getvalue().splitlines()
    [made] = [p for p in lines if p.startswith("removed ")]
    workdir = made.split()[1]
    assert made == "removed %s (a PASS; --workdir DIR keeps it)" % workdir
    assert workdir.startswith(str(tmp_path)) and os.listdir(tmp_path) == []
