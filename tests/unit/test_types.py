"""mypy finds no type error in events, fsm, engine, policy, sources and
service (issue 22 item 3), and each of them is strict: every function
annotated, parameters and return (issue 36 part 6).

Runs the virtualenv's mypy (from test-requirements.txt) with the
project's ``mypy.ini``: a type error in those packages fails this test
with mypy's report. The last test shows that the typed event payloads
are checked: reading a field of the wrong payload is an error.
"""

import configparser
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
CONFIG = TOP / "mypy.ini"
MYPY = pathlib.Path(sys.executable).parent / "mypy"
PACKAGES = ("instanceha.events", "instanceha.fsm", "instanceha.engine",
            "instanceha.policy", "instanceha.sources", "instanceha.service")
# Outside the (shared) tree, one per user: a warm run takes a second or
# two instead of several.
CACHE = pathlib.Path(tempfile.gettempdir()) / (
    "instanceha-mypy-cache-%d" % os.getuid())


def mypy(*args):
    """(exit status, report) of mypy with our configuration."""
    if not MYPY.exists():
        pytest.fail("%s not found: install test-requirements.txt "
                    "(./tools/bootstrap.sh does)" % MYPY)
    done = subprocess.run(
        [str(MYPY), "--config-file", str(CONFIG), "--cache-dir", str(CACHE),
         "--show-error-codes"] + list(args),
        cwd=TOP, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_the_typed_packages_are_clean():
    args = []
    for package in PACKAGES:
        args += ["-p", package]
    status, report = mypy(*args)
    assert status == 0, "mypy found type errors:\n" + report


def test_every_checked_package_is_strict():
    """mypy.ini names each package (and its modules) in a section with
    disallow_untyped_defs: none is left with a list of its typed
    modules."""
    ini = configparser.ConfigParser()
    ini.read(CONFIG)
    strict = set()
    for section in ini.sections():
        if section.startswith("mypy-") and ini.getboolean(
                section, "disallow_untyped_defs", fallback=False) \
                and ini.getboolean(section, "check_untyped_defs",
                                   fallback=False):
            strict.update(section[len("mypy-"):].split(","))
    for package in PACKAGES:
        assert package in strict, (package, sorted(strict))
        if (TOP / package.replace(".", "/")).is_dir():
            assert package + ".*" in strict, (package, sorted(strict))


def test_a_misread_payload_is_an_error(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from instanceha.events import Event, EventKind, ServiceReport\n"
        "\n"
        "\n"
        "def until(ev: Event) -> float:\n"
        "    return ev.payload.until\n"
        "\n"
        "\n"
        "def seen(ev: Event) -> float:\n"
        "    if isinstance(ev.payload, ServiceReport):\n"
        "        return ev.payload.written_at\n"
        "    return 0.0\n")
    status, report = mypy(str(probe))
    assert status == 1, report
    assert 'Item "None" of' in report and "[union-attr]" in report, report
    assert '"ServiceReport" has no attribute "written_at"' in report, report
