import json
import os
import socket
import time

from instanceha.cmd import main as cli
from instanceha.util.process import pid_namespace


def test_status_table_shows_state_since_and_reason(tmp_path, capsys):
    data = {"generated_at": 1000.0, "started_at": 900.0,
            "cluster": {"ok": False, "reason": "3 of 4 look dead"},
            "hosts": [{"id": "u1", "name": "compute-1", "state": "failed",
                       "since": 940.0, "reason": "fencing failed: BMC down"}],
            "sources": {"reconciler": {"passes": 3, "errors": 0}}}
    text = cli.format_status(data, now=1000.0)
    assert "HOLD: 3 of 4 look dead" in text
    line = [l for l in text.splitlines() if l.startswith("compute-1")][0]
    assert "failed" in line and "60s ago" in line and "BMC down" in line
    assert "source reconciler: errors=0, passes=3" in text
    status_file = tmp_path / "status.json"
    # As a running engine writes it (issue 35: else it is STALE, exit 1).
    status_file.write_text(json.dumps(dict(
        data, written_at=time.time(), pid=os.getpid(),
        hostname=socket.gethostname(), pid_ns=pid_namespace())))
    conf = tmp_path / "c.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % status_file)
    assert cli.main(["status", "--config-file", str(conf)]) == 0
    assert "compute-1" in capsys.readouterr().out


def test_status_without_service_is_a_clear_error(tmp_path, capsys):
    conf = tmp_path / "c.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % (tmp_path / "none"))
    assert cli.main(["status", "--config-file", str(conf)]) == 1
    assert "is the service running" in capsys.readouterr().err


def test_unknown_command():
    assert cli.main(["frobnicate"]) == 2


def test_bad_config_value_stops_start_naming_group_and_option(tmp_path, capsys):
    conf = tmp_path / "c.conf"
    conf.write_text("[detection]\ngrace_period = -3\n")
    assert cli.main(["run", "--config-file", str(conf)]) == 2, \
        "a negative grace period was accepted"
    err = capsys.readouterr().err
    assert "[detection] grace_period = -3" in err and "from 0 to" in err


def test_status_says_a_host_is_disabled_by_its_operator_in_any_state():
    data = {"generated_at": 1000.0, "started_at": 900.0,
            "cluster": {"ok": True, "reason": ""},
            "hosts": [{"id": "u1", "name": "compute-1", "state": "active",
                       "since": 940.0, "reason": "reporting",
                       "operator_disabled": "RAID swap"},
                      {"id": "u2", "name": "compute-2", "state": "active",
                       "since": 940.0, "reason": "reporting",
                       "operator_disabled": None}]}
    lines = cli.format_status(data, now=1000.0).splitlines()
    one = next(ln for ln in lines if ln.startswith("compute-1"))
    two = next(ln for ln in lines if ln.startswith("compute-2"))
    assert "[disabled by operator: RAID swap]" in one
    assert "disabled" not in two
