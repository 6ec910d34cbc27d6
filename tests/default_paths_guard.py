"""A pytest plugin: the run fails when a test wrote to the machine's own
instanceha paths (issue 34 part 6).

instanceha's defaults point at the machine's own directories
(``[DEFAULT] status_file`` /var/lib/instanceha/status.json, ``[api]
unix_socket`` /run/instanceha/api.sock, ``[fencing] inventory``
/etc/instanceha/bmc.yaml, ...). A test that builds a service without
overriding them writes there: a status file with the fake clock's time was
left behind, and ``instanceha status`` on that machine then reported an
engine up since 1970. Every test writes under its own temporary directory.

The controlling process (the only one without xdist; xdist's controller,
not its workers, with it) lists those directories when pytest starts and
again when the session ends: any entry created, removed or changed (its
kind, size or modification time; a directory's own time changes when an
entry is created or removed in it, even one removed again) fails the run
and is named in the summary. What was there before the run (left by an
earlier one) is not a failure; only what changed during this one.

Loaded by the repository's root conftest.py. ``--guard-default-path DIR``
(repeatable) watches DIR instead of the default directories (this
plugin's own test, tests/unit/test_default_paths_guard.py, uses it).
"""

import os

import pytest

#: the directories instanceha's defaults write to (and read from)
DEFAULT_ROOTS = ("/var/lib/instanceha", "/run/instanceha", "/etc/instanceha",
                 "/run/instanceha-agent")
#: entries listed per root at most (a machine's own /etc/instanceha is
#: small; a bound keeps a surprise from slowing every run)
MAX_ENTRIES = 10000

_KEY = pytest.StashKey()


def pytest_addoption(parser):
    parser.addoption(
        "--guard-default-path", action="append", default=None,
        metavar="DIR", help="fail the run when DIR is written during it "
        "(default: %s)" % ", ".join(DEFAULT_ROOTS))


def listing(root):
    """{path: (kind, size, mtime_ns)} of ``root`` and everything under it
    (no link followed); {} when it does not exist."""
    out = {}
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return out
    except OSError as e:
        return {root: ("unreadable", e.errno, 0)}
    out[root] = _entry(st)
    if not os.path.isdir(root) or os.path.islink(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                out[path] = _entry(os.lstat(path))
            except OSError:
                continue
            if len(out) >= MAX_ENTRIES:
                return out
    return out


def _entry(st):
    import stat
    kind = ("dir" if stat.S_ISDIR(st.st_mode) else
            "file" if stat.S_ISREG(st.st_mode) else
            "link" if stat.S_ISLNK(st.st_mode) else
            "socket" if stat.S_ISSOCK(st.st_mode) else "other")
    # a directory's size says nothing; its time says an entry came or went
    return (kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns)


def changes(before, after):
    """["created PATH", "removed PATH", "changed PATH"], sorted by path."""
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            out.append("created %s" % path)
        elif path not in after:
            out.append("removed %s" % path)
        elif before[path] != after[path]:
            out.append("changed %s" % path)
    return out


def _roots(config):
    return tuple(config.getoption("--guard-default-path") or DEFAULT_ROOTS)


def _is_worker(config):
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if _is_worker(config):
        return
    config.stash[_KEY] = {"before": {r: listing(r) for r in _roots(config)},
                          "found": []}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    state = session.config.stash.get(_KEY, None)
    if state is None:
        return
    found = []
    for root, before in state["before"].items():
        found += changes(before, listing(root))
    state["found"] = found
    if found and session.exitstatus in (pytest.ExitCode.OK,
                                        pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(_KEY, None)
    if not state or not state["found"]:
        return
    terminalreporter.section("written to the machine's own paths", red=True,
                             bold=True)
    terminalreporter.line(
        "FAILED: tests wrote to %s during this run; a test writes only "
        "under its own temporary directory (override status_file, "
        "unix_socket, journal connection, inventory...):"
        % ", ".join(state["before"]), red=True)
    for line in state["found"]:
        terminalreporter.line("  " + line, red=True)
