"""tests/default_paths_guard.py: a test run that writes to the machine's
own instanceha paths fails, with or without xdist; what was there before
the run is no failure (issue 34 part 6)."""

import os
import pathlib

import pytest

from tests import default_paths_guard as guard

REPO = pathlib.Path(__file__).resolve().parents[2]

WRITES = """
import os
def test_writes():
    os.makedirs({root!r}, exist_ok=True)
    with open(os.path.join({root!r}, "status.json"), "w") as f:
        f.write('{{"generated_at": 1000000.0}}')
def test_other():
    assert True
"""
CLEAN = """
def test_clean(tmp_path):
    (tmp_path / "status.json").write_text("{{}}")
"""


def test_default_roots_are_the_machines_own():
    assert guard.DEFAULT_ROOTS == ("/var/lib/instanceha", "/run/instanceha",
                                   "/etc/instanceha", "/run/instanceha-agent")


def test_listing_and_changes(tmp_path):
    root = str(tmp_path / "state")
    assert guard.listing(root) == {}
    os.mkdir(root)
    old = os.path.join(root, "old.json")
    pathlib.Path(old).write_text("x")
    before = guard.listing(root)
    assert set(before) == {root, old}
    assert guard.changes(before, guard.listing(root)) == []
    new = os.path.join(root, "sub", "new")
    os.makedirs(os.path.dirname(new))
    pathlib.Path(new).write_text("y")
    pathlib.Path(old).write_text("longer")
    found = guard.changes(before, guard.listing(root))
    assert "created %s" % new in found
    assert "created %s" % os.path.dirname(new) in found
    assert "changed %s" % old in found
    assert "changed %s" % root in found          # an entry came
    os.unlink(old)
    assert "removed %s" % old in guard.changes(before, guard.listing(root))


def _run(pytester, root, source, *args):
    pytester.makepyfile(test_inner=source.format(root=root))
    return pytester.runpytest_inprocess(
        "-p", "tests.default_paths_guard", "-p", "no:cacheprovider",
        "--guard-default-path", root, *args)


def test_a_run_that_writes_a_watched_path_fails(pytester, tmp_path):
    root = str(tmp_path / "var-lib-instanceha")
    result = _run(pytester, root, WRITES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*written to the machine's own paths*",
        "FAILED: tests wrote to %s during this run*" % root,
        "  created %s" % root,
        "  created %s" % os.path.join(root, "status.json")])


def test_what_was_there_before_the_run_is_no_failure(pytester, tmp_path):
    root = tmp_path / "var-lib-instanceha"
    root.mkdir()
    (root / "status.json").write_text("left by an earlier run")
    result = _run(pytester, str(root), CLEAN)
    assert result.ret == pytest.ExitCode.OK
    assert "machine's own paths" not in result.stdout.str()
    # the same file rewritten during the run is a failure
    result = _run(pytester, str(root), WRITES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["  changed %s" % (root / "status.json")])


def test_under_xdist_the_controller_fails_the_run(pytester, tmp_path,
                                                  monkeypatch):
    pytest.importorskip("xdist")
    # the workers import the plugin from this repository
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    root = str(tmp_path / "run-instanceha")
    result = _run(pytester, root, WRITES, "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "  created %s" % os.path.join(root, "status.json")])
