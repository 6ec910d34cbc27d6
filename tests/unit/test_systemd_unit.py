"""etc/systemd/instanceha.service: what the service needs from systemd is
there (notify, watchdog, reload by SIGHUP), its hardening still lets it
reach its configuration and its journal, and systemd-analyze accepts it."""

import os
import shutil
import subprocess
import sys

import pytest

from instanceha import conf as conf_pkg

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "etc", "systemd",
                    "instanceha.service")


def _unit():
    """{section: {key: [values]}} (systemd allows a key several times)."""
    out, section = {}, None
    with open(UNIT) as f:
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


def _one(section, key):
    [value] = _unit()[section][key]
    return value


def test_notify_watchdog_and_reload():
    assert _one("Service", "Type") == "notify"
    assert _one("Service", "NotifyAccess") == "main"
    assert int(_one("Service", "WatchdogSec")) >= 30
    assert _one("Service", "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert _one("Service", "ExecStart").endswith(
        "instanceha run --config-file /etc/instanceha/instanceha.conf")
    assert _one("Service", "Restart") == "on-failure"
    # A configuration error (exit 2) is not restarted in a loop.
    assert _one("Service", "RestartPreventExitStatus") == "2"


def test_hardening_leaves_the_default_paths_reachable():
    """The defaults of the options naming files sit where the sandbox
    lets the service read (configuration) and write (state)."""
    service = _unit()["Service"]
    assert service["ProtectSystem"] == ["strict"]
    writable = service["ReadWritePaths"][0].split()
    readable = service["ReadOnlyPaths"][0].split()
    conf = conf_pkg.make()
    journal = conf.journal.connection
    assert journal.startswith("sqlite:////")
    for path in (journal[len("sqlite:///"):], conf.status_file):
        assert any(path.startswith(d + "/") for d in writable), path
    assert any(conf.fencing.inventory.startswith(d + "/")
               for d in readable)
    assert _one("Service", "StateDirectory") == "instanceha"
    # [api] unix_socket's directory: no permission for 'other' (the
    # service refuses a socket in a directory that gives it any).
    assert _one("Service", "RuntimeDirectory") == "instanceha"
    assert int(_one("Service", "RuntimeDirectoryMode"), 8) & 0o007 == 0
    families = _one("Service", "RestrictAddressFamilies").split()
    # AF_UNIX: the notify socket; AF_INET(6): Nova, BMCs, a journal
    # database or broker over the network.
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= set(families)
    assert _one("Service", "NoNewPrivileges") == "yes"


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify wants ExecStart's program to exist: point it at this venv's.
    script = os.path.join(os.path.dirname(sys.executable), "instanceha")
    if not os.path.exists(script):
        pytest.skip("no instanceha console script beside %s"
                    % sys.executable)
    with open(UNIT) as f:
        text = f.read().replace("/usr/local/bin/instanceha", script)
    unit = tmp_path / "instanceha.service"
    unit.write_text(text)
    result = subprocess.run([analyze, "verify", str(unit)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # Only our unit's own problems matter; anything naming it fails.
    assert "instanceha.service" not in result.stderr, result.stderr
