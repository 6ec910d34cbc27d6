"""Every drill of ``instanceha demo --scenario`` passes: each run as an
operator types it, ``python -m instanceha.cmd.main demo --scenario X``,
in its own process (the real engine on the simulator), exit status 0 and
a PASS verdict as its last line.

A drill takes 6-15 s on an idle 2-core machine; its own waits hold 60-90
s per step. The budget here covers a loaded machine's engine start and a
slow step or two.
"""

import os
import re
import subprocess
import sys

import pytest

from instanceha.drills import kdump as kdump_drill
from instanceha.drills import registry

BUDGET = 240


def _at(lines, text):
    """The timeline's seconds on the first line containing ``text``."""
    found = [line for line in lines if text in line]
    assert found, "no line says %r: %s" % (text, lines)
    line = found[0]
    return float(re.match(r"  \[ *([0-9.]+)s\]", line).group(1))


def _kdump(lines):
    """The timeout is measured from the last message, as the engine
    measures it, and the verdict says so."""
    timeout = kdump_drill.KDUMP["timeout"]
    # The verdict's first delay after the last message is the timeout's.
    said = re.search(r"([0-9.]+)s after the last (one|message)", lines[-1])
    assert said and float(said.group(1)) >= timeout - 0.05, lines[-1]
    last = _at(lines, "dump kernel: last fence_kdump message")
    decided = _at(lines, "suspect -> fencing  kdump messages stopped")
    assert decided - last >= timeout - 0.1, lines


def _compute_death(lines):
    """Back after 6 s held by the agent: not "within the grace period"."""
    back = [line for line in lines if "suspect -> active" in line]
    assert back and "within the grace period" not in back[-1], back
    assert "agent" in back[-1], back


def _storm(lines):
    """The story and the setup agree: the hosts hang with power on."""
    text = "\n".join(lines)
    assert "loses power" not in text and "PDU" not in text, text
    assert "power still on" in text and "with power on" in lines[-1]


def _bmc_unreachable(lines):
    """The engine's failed power-off tries are on the timeline, before
    the BMC answers again."""
    mended = _at(lines, ">> compute-1's BMC answers again")
    tries = [line for line in lines if "compute-1  fencing: fence failed"
             in line]
    assert tries and _at(tries, "fence failed") < mended, lines
    assert "power-off tries failed" in lines[-1], lines[-1]


#: What a drill's own output must show, beyond PASS.
TRUTHS = {"kdump": _kdump, "compute-death": _compute_death,
          "storm": _storm, "bmc-unreachable": _bmc_unreachable}


@pytest.mark.parametrize("name", registry.names())
def test_drill_passes(name, tmp_path):
    # No --workdir: a temporary directory (under tmp_path), removed
    # after the PASS; what the drill says about its log must hold.
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "demo", "--scenario",
         name], capture_output=True, text=True, timeout=BUDGET, env=env)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith("instanceha drill %s: " % name), lines[:3]
    assert lines[-1].startswith("PASS: "), lines[-3:]
    assert lines[-1].endswith("s)") and "(%s, " % name in lines[-1], \
        lines[-1]
    # The live timeline: elapsed seconds on each event line.
    assert any(line.startswith("  [") and "s] >> " in line
               for line in lines), done.stdout
    _log_path_told_true(lines)
    if name in TRUTHS:
        TRUTHS[name](lines)


def _log_path_told_true(lines):
    """A log path printed is there at the end, or the line naming it says
    it goes after a PASS and a later line says it went."""
    [log] = [line for line in lines if line.startswith("log: ")]
    path = log.split()[1]
    if os.path.exists(path):
        return
    assert "removed after a PASS" in log, log
    workdir = os.path.dirname(path)
    assert "removed %s " % workdir in "\n".join(lines), lines
    assert not os.path.exists(workdir)


def test_the_demo_passes_and_keeps_what_it_says(tmp_path):
    """The README's first command (./tools/demo runs this): exit 0, an
    OK result, and the log path it printed is not a lie."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "demo"],
        capture_output=True, text=True, timeout=BUDGET, env=env)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(line.startswith("RESULT: OK: ") for line in lines), lines
    _log_path_told_true(lines)


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
