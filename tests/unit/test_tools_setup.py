"""The README's two commands and what each installs (issue 35, part 5):
``./tools/demo`` sets up the Python virtualenv only, never a system
package; ``./tools/test`` (which .ci/run calls) installs the system
packages the tests use, then the virtualenv.

Each runs the real script with a PATH of stubs: apt-get and sudo record
their calls, the virtualenv is a warm one (its stamp current, so no pip
runs) whose ``instanceha`` and ``python`` record theirs. None of etcd,
shellcheck, prometheus is on that PATH, so each is wanted."""

import hashlib
import os
import shutil
import subprocess
import sys

TOP = os.path.join(os.path.dirname(__file__), "..", "..")
#: What the scripts run besides the stubs.
TOOLS = ("bash", "cat", "cut", "dirname", "id", "sha256sum")


def _stub(path, log):
    with open(path, "w") as f:
        f.write('#!/bin/sh\necho "%s $*" >> %s\n'
                % (os.path.basename(path), log))
    os.chmod(path, 0o755)


def _world(tmp_path):
    """(env, log): a PATH of stubs and a warm venv under ``tmp_path``."""
    log = tmp_path / "calls"
    log.write_text("")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_ / tool)
    for name in ("apt-get", "sudo"):
        _stub(bin_ / name, log)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "instanceha"):
        _stub(venv / "bin" / name, log)
    digest = hashlib.sha256()
    for name in ("requirements.txt", "test-requirements.txt", "setup.cfg"):
        with open(os.path.join(TOP, name), "rb") as f:
            digest.update(f.read())
    (venv / ".instanceha-stamp").write_text(digest.hexdigest() + "\n")
    env = {"PATH": str(bin_), "INSTANCEHA_VENV": str(venv),
           "PYTHON": sys.executable, "HOME": str(tmp_path)}
    return env, log


def _run(script, env, *args):
    return subprocess.run([os.path.join(TOP, "tools", script)] + list(args),
                          env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_demo_installs_no_system_package(tmp_path):
    env, log = _world(tmp_path)
    done = _run("demo", env, "--list")
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    # The demo ran (the venv's instanceha) and nothing else did.
    assert calls == ["instanceha demo --list"], calls


def test_the_test_command_installs_the_packages_the_tests_use(tmp_path):
    env, log = _world(tmp_path)
    done = _run("test", env, "tests/unit/test_tools_setup.py")
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    installs = [c for c in calls if " install " in c]
    assert len(installs) == 1, calls
    for pkg in ("etcd-server", "shellcheck", "prometheus"):
        assert pkg in installs[0].split(), installs
    # Then the suite itself, through the venv's python.
    assert calls[-1].startswith("python -m pytest "), calls
    assert calls.index(installs[0]) < len(calls) - 1
