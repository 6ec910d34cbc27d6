"""etc/systemd/instanceha-agent.service: notify, always restarted except
on a start-up error, no dependency on nova-compute, its sandbox leaves
the default key and configuration readable, systemd-analyze accepts it."""

import os
import shutil
import subprocess
import sys

import pytest

from instanceha.conf import agent as agent_conf
from tests.unit.agent import helpers

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "etc",
                    "systemd", "instanceha-agent.service")


def _unit():
    """{section: {key: [values]}}."""
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


def test_notify_restart_and_start_up_errors():
    assert _one("Service", "Type") == "notify"
    assert _one("Service", "NotifyAccess") == "main"
    assert _one("Service", "ExecStart").endswith(
        "instanceha-agent --config-file %s" % agent_conf.DEFAULT_CONFIG_FILE)
    assert _one("Service", "Restart") == "always"
    assert _one("Service", "RestartPreventExitStatus") == "2"


def test_no_dependency_on_the_daemons_it_watches():
    unit = _unit()["Unit"]
    for key in ("Requires", "BindsTo", "PartOf", "Requisite", "After",
                "Wants"):
        for value in unit.get(key, []):
            assert "nova" not in value and "libvirt" not in value, value


def test_the_sandbox_leaves_its_files_readable_and_sockets_usable():
    service = _unit()["Service"]
    assert "User" not in service         # root: systemd, nova.conf, libvirt
    assert service["ProtectSystem"] == ["strict"]   # read-only, not hidden
    conf = helpers.make_conf()
    for path in (conf.agent.key_file, conf.agent.nova_conf):
        assert not path.startswith(("/home", "/root", "/tmp")), path
    families = set(_one("Service", "RestrictAddressFamilies").split())
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= families
    assert _one("Service", "NoNewPrivileges") == "yes"


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    script = os.path.join(os.path.dirname(sys.executable),
                          "instanceha-agent")
    if not os.path.exists(script):
        pytest.skip("no instanceha-agent console script beside %s"
                    % sys.executable)
    with open(UNIT) as f:
        text = f.read().replace("/usr/local/bin/instanceha-agent", script)
    unit = tmp_path / "instanceha-agent.service"
    unit.write_text(text)
    result = subprocess.run([analyze, "verify", str(unit)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "instanceha-agent.service" not in result.stderr, result.stderr
