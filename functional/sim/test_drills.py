"""Every drill of ``instanceha demo --scenario`` passes: each run as an
operator types it, ``python -m instanceha.cmd.main demo --scenario X``,
in its own process (the real engine on the simulator), exit status 0 and
a PASS verdict as its last line.

A drill takes 6-15 s on an idle 2-core machine; its own waits hold 60-90
s per step. The budget here covers a loaded machine's engine start and a
slow step or two.
"""

import subprocess
import sys

import pytest

from instanceha.drills import registry

BUDGET = 240


@pytest.mark.parametrize("name", registry.names())
def test_drill_passes(name, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "demo", "--scenario",
         name, "--workdir", str(tmp_path / "drill")],
        capture_output=True, text=True, timeout=BUDGET)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith("instanceha drill %s: " % name), lines[:3]
    assert lines[-1].startswith("PASS: "), lines[-3:]
    assert lines[-1].endswith("s)") and "(%s, " % name in lines[-1], \
        lines[-1]
    # The live timeline: elapsed seconds on each event line.
    assert any(line.startswith("  [") and "s] >> " in line
               for line in lines), done.stdout


def test_a_failing_drill_says_fail_and_exits_1(tmp_path):
    """The verdict is read from the world: a drill whose expectation the
    world does not meet ends FAIL, exit 1, its workdir kept."""
    script = (
        "import sys\n"
        "from instanceha.drills import __main__ as m, registry\n"
        "def never(make):\n"
        "    d = make(hosts=2, servers_per_host=1)\n"
        "    d.check(d.cloud.snapshot()['hosts']['compute-0']['power']"
        " == 'off', 'compute-0 is on')\n"
        "sys.exit(m.run(registry.Scenario('never', 'a drill that fails',"
        " 'x:y'), never, sys.argv[1], sys.stdout))\n")
    work = tmp_path / "kept"
    done = subprocess.run([sys.executable, "-c", script, str(work)],
                          capture_output=True, text=True, timeout=BUDGET)
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert lines[-1].startswith("FAIL: compute-0 is on (never, "), lines
    assert lines[-2] == "kept for inspection: %s" % work
    assert (work / "instanceha.log").exists()
