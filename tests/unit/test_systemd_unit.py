"""The systemd units in etc/systemd: the engine's (instanceha.service)
and the agent's (instanceha-agent.service).

Both: Type=notify, a start-up error (exit 2) not restarted in a loop,
their ExecStart, a sandbox that keeps the address families they need,
and systemd-analyze accepts them. The engine's: watchdog, reload by
SIGHUP, restarted on failure, its hardening leaves its configuration and
journal reachable. The agent's: always restarted, no dependency on the
daemons it watches, its sandbox leaves the default key and nova.conf
readable."""

import os
import shutil
import subprocess
import sys

import pytest

from instanceha import conf as conf_pkg
from instanceha.conf import agent as agent_conf
from tests.unit.agent import helpers as agent_helpers

UNITS = os.path.join(os.path.dirname(__file__), "..", "..", "etc",
                     "systemd")
ENGINE = "instanceha.service"
AGENT = "instanceha-agent.service"
#: unit -> (console script, its arguments in ExecStart, Restart=)
EXPECTED = {
    ENGINE: ("instanceha",
             "run --config-file /etc/instanceha/instanceha.conf",
             "on-failure"),
    AGENT: ("instanceha-agent",
            "--config-file %s" % agent_conf.DEFAULT_CONFIG_FILE,
            "always"),
}
both = pytest.mark.parametrize("name", sorted(EXPECTED))


def _unit(name):
    """{section: {key: [values]}} (systemd allows a key several times)."""
    out, section = {}, None
    with open(os.path.join(UNITS, name)) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = out.setdefault(line.strip("[]"), {})
                continue
            key, value = line.split("=", 1)
            section.setdefault(key, []).append(value)
    return out


def _one(name, section, key):
    [value] = _unit(name)[section][key]
    return value


@both
def test_notify_exec_start_restart_and_start_up_errors(name):
    script, args, restart = EXPECTED[name]
    assert _one(name, "Service", "Type") == "notify"
    assert _one(name, "Service", "NotifyAccess") == "main"
    assert _one(name, "Service", "ExecStart") == \
        "/usr/local/bin/%s %s" % (script, args)
    assert _one(name, "Service", "Restart") == restart
    # A configuration error (exit 2) is not restarted in a loop.
    assert _one(name, "Service", "RestartPreventExitStatus") == "2"


@both
def test_the_sandbox_keeps_what_both_need(name):
    service = _unit(name)["Service"]
    # strict: the file system read-only, not hidden.
    assert service["ProtectSystem"] == ["strict"]
    families = set(_one(name, "Service", "RestrictAddressFamilies").split())
    # AF_UNIX: the notify socket; AF_INET(6): the engine's peers, the
    # agent's beats.
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= families
    assert _one(name, "Service", "NoNewPrivileges") == "yes"


def test_engine_watchdog_and_reload():
    assert int(_one(ENGINE, "Service", "WatchdogSec")) >= 30
    assert _one(ENGINE, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"


def test_engine_hardening_leaves_the_default_paths_reachable():
    """The defaults of the options naming files sit where the sandbox
    lets the service read (configuration) and write (state)."""
    service = _unit(ENGINE)["Service"]
    writable = service["ReadWritePaths"][0].split()
    readable = service["ReadOnlyPaths"][0].split()
    conf = conf_pkg.make()
    journal = conf.journal.connection
    assert journal.startswith("sqlite:////")
    for path in (journal[len("sqlite:///"):], conf.status_file):
        assert any(path.startswith(d + "/") for d in writable), path
    assert any(conf.fencing.inventory.startswith(d + "/")
               for d in readable)
    assert _one(ENGINE, "Service", "StateDirectory") == "instanceha"
    # [api] unix_socket's directory: no permission for 'other' (the
    # service refuses a socket in a directory that gives it any).
    assert _one(ENGINE, "Service", "RuntimeDirectory") == "instanceha"
    assert int(_one(ENGINE, "Service", "RuntimeDirectoryMode"), 8) \
        & 0o007 == 0


def test_agent_has_no_dependency_on_the_daemons_it_watches():
    unit = _unit(AGENT)["Unit"]
    for key in ("Requires", "BindsTo", "PartOf", "Requisite", "After",
                "Wants"):
        for value in unit.get(key, []):
            assert "nova" not in value and "libvirt" not in value, value


def test_agent_runs_as_root_and_reads_its_default_files():
    # root: systemd, nova.conf, libvirt.
    assert "User" not in _unit(AGENT)["Service"]
    conf = agent_helpers.make_conf()
    for path in (conf.agent.key_file, conf.agent.nova_conf):
        assert not path.startswith(("/home", "/root", "/tmp")), path


@both
def test_systemd_analyze_verify(name, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    script = EXPECTED[name][0]
    # verify wants ExecStart's program to exist: point it at this venv's.
    path = os.path.join(os.path.dirname(sys.executable), script)
    if not os.path.exists(path):
        pytest.skip("no %s console script beside %s"
                    % (script, sys.executable))
    with open(os.path.join(UNITS, name)) as f:
        text = f.read().replace("/usr/local/bin/%s " % script, path + " ")
    unit = tmp_path / name
    unit.write_text(text)
    result = subprocess.run([analyze, "verify", str(unit)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Only our unit's own problems matter; anything naming it fails.
    assert name not in result.stderr, result.stderr


#: unit -> the page its Documentation= names; that page's install steps
#: say where instanceha is installed (``python3 -m venv PREFIX``).
DOCS = {ENGINE: "operators.md", AGENT: "agent.md"}
TOP = os.path.join(os.path.dirname(__file__), "..", "..")


def _data_files():
    """{target directory: [source files]} of setup.cfg's data_files."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(TOP, "setup.cfg"))
    out, target = {}, None
    for line in cfg["files"]["data_files"].splitlines():
        if "=" in line:
            target, _, rest = (p.strip() for p in line.partition("="))
            out[target] = [rest] if rest else []
        elif line.strip():
            out[target].append(line.strip())
    return out


@both
def test_documentation_names_a_page_the_install_puts_there(name):
    """Documentation= is a page that pip installs (setup.cfg data_files,
    share/doc/instanceha) at the prefix the page's own install steps use
    (issue 35, part 7: it named /usr/share/doc, where nothing was)."""
    import re
    page = DOCS[name]
    url = _one(name, "Unit", "Documentation")
    assert url.startswith("file://"), url
    with open(os.path.join(TOP, "doc", page)) as f:
        prefix = re.search(r"python3 -m venv (\S+)", f.read()).group(1)
    assert url[len("file://"):] == os.path.join(
        prefix, "share", "doc", "instanceha", page)
    assert "doc/" + page in _data_files()["share/doc/instanceha"]


def test_every_doc_page_is_installed():
    """The pages link to each other by name: all of them are installed,
    each once, and each listed file exists."""
    import glob
    listed = _data_files()["share/doc/instanceha"]
    pages = sorted(os.path.relpath(p, TOP)
                   for p in glob.glob(os.path.join(TOP, "doc", "*.md")))
    assert sorted(listed) == pages
