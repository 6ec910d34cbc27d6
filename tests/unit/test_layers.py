"""The import contracts in ``.importlinter`` hold (issue 22 item 4).

Runs import-linter (``lint-imports``, from test-requirements.txt) on the
tree: a layer imported upwards, a driver or source imported by fsm or
policy, or an import cycle fails this test with import-linter's report.
The last test shows, on a copy of the package, that a cycle made by an
import inside a function fails it too.
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
CONFIG = TOP / ".importlinter"
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd, env=None):
    """(exit status, report) of lint-imports with our contracts."""
    if not LINT_IMPORTS.exists():
        pytest.fail("%s not found: install test-requirements.txt "
                    "(./tools/bootstrap.sh does)" % LINT_IMPORTS)
    # --no-cache: nothing written into the (shared) tree.
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(CONFIG)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_import_contracts_hold():
    status, report = lint_imports(TOP)
    assert status == 0, "import contracts broken:\n" + report
    assert "0 broken" in report


@pytest.mark.parametrize("path,line,broken", [
    # fsm/states.py importing fsm/machine.py (which imports states.py):
    # a cycle.
    ("fsm/states.py", "from instanceha.fsm import machine",
     "No import cycles"),
    # policy importing the engine: a room imported upwards.
    ("policy/storm.py", "from instanceha.engine import engine",
     "Layers"),
])
def test_a_broken_contract_fails(tmp_path, path, line, broken):
    shutil.copytree(TOP / "instanceha", tmp_path / "instanceha",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "instanceha" / path, "a") as f:
        f.write("\n\ndef _late():\n    %s\n" % line)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    status, report = lint_imports(tmp_path, env)
    assert status == 1, report
    assert broken in report.split("Broken contracts")[-1], report
