"""Issue 35, part 6: the CLI's conventions. ``instanceha --version``;
``run --help`` and ``status --help`` describe their own options (not
oslo.config's generic parser); ``policy explain --help`` exits 0 and
``policy explain`` takes a server's name as well as its id; a read
command prints no log line on stdout."""

import logging

import pytest
import structlog

from instanceha.cmd import main as cli
from instanceha.cmd import policy
from tests.unit.fakes import Clock, FakeCompute


def _help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    out, _ = capsys.readouterr()
    return out


def test_version(capsys):
    from importlib import metadata
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "instanceha %s" % \
        metadata.version("instanceha")


def test_run_help_describes_run(capsys):
    out = _help(["run", "--help"], capsys)
    assert out.startswith("usage: instanceha run")
    assert "SIGHUP" in out and "--config-file" in out


def test_status_help_describes_status(capsys):
    out = _help(["status", "--help"], capsys)
    assert out.startswith("usage: instanceha status")
    assert "HOST" in out and "STALE" in out and "--config-file" in out


def test_policy_explain_help_exits_zero(capsys):
    out = _help(["policy", "explain", "--help"], capsys)
    assert out.startswith("usage: instanceha policy explain")
    assert "SERVER" in out and "name" in out


@pytest.fixture
def conf_file(tmp_path):
    path = tmp_path / "instanceha.conf"
    path.write_text("[DEFAULT]\nstatus_file = %s\n[journal]\nconnection = "
                    "sqlite:///%s\n" % (tmp_path / "status.json",
                                        tmp_path / "journal.sqlite"))
    return str(path)


@pytest.fixture
def compute():
    c = FakeCompute(Clock())
    c.servers["compute-0-vm-0"]["name"] = "web"
    c.servers["compute-1-vm-0"]["name"] = "db"
    c.servers["compute-2-vm-1"]["name"] = "db"
    return c


def test_policy_explain_takes_a_servers_name(conf_file, compute, capsys):
    assert policy.main(["explain", "web", "--config-file", conf_file],
                       driver=lambda conf: compute) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("server web (compute-0-vm-0) on host compute-0")
    # Its id still works.
    assert policy.main(["explain", "compute-1-vm-1", "--config-file",
                        conf_file], driver=lambda conf: compute) == 0
    assert "(compute-1-vm-1)" in capsys.readouterr().out


def test_policy_explain_names_the_matches_of_an_ambiguous_name(
        conf_file, compute, capsys):
    assert policy.main(["explain", "db", "--config-file", conf_file],
                       driver=lambda conf: compute) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert "2 servers are named 'db'" in err
    assert "compute-1-vm-0 (on compute-1)" in err
    assert "compute-2-vm-1 (on compute-2)" in err


@pytest.fixture
def fresh_logging():
    """Logging as a new process has it (structlog's defaults print to
    stdout); what the test changes is put back."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_read_command_logs_nothing_on_stdout(conf_file, compute, capsys,
                                               fresh_logging, monkeypatch):
    """A driver's log line (a Nova read sent again) while ``policy
    explain`` reads: on stderr, never mixed into the answer."""
    log = structlog.get_logger("instanceha.drivers.compute")
    get_server = compute.get_server

    def logging_get(server_id):
        log.info("nova_read_retry", call="GET /servers/%s" % server_id,
                 reason="transient failure, sending the read again")
        log.warning("nova_slow", call="GET /servers/%s" % server_id,
                    reason="the answer took 9.0 s")
        return get_server(server_id)

    compute.get_server = logging_get
    from instanceha.drivers.compute import nova
    monkeypatch.setattr(nova, "NovaDriver", lambda conf: compute)
    assert cli.main(["policy", "explain", "web", "--config-file",
                     conf_file]) == 0
    out, err = capsys.readouterr()
    assert "nova_read_retry" not in out and "nova_slow" not in out, out
    assert out.startswith("server web ")
    # A warning on stderr; information nowhere.
    assert "nova_slow" in err and "nova_read_retry" not in err
