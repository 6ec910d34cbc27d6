"""Issue 35, part 1: ``instanceha status`` never shows a dead engine as
alive. The status file says when it was written, by which process and how
often it is rewritten; a snapshot whose engine has exited, stopped, or
not rewritten it for a few intervals is said STALE on the first line and
exits non-zero. Times read as ISO dates or ages, never epoch floats, and
``status | head`` prints no BrokenPipe traceback."""

import json
import os
import socket
import subprocess
import sys
import time

from instanceha.cmd import main as cli
from instanceha.cmd import status as status_cmd
from instanceha.service import health
from instanceha.util.process import pid_namespace

NOW = 1795924572.0          # 2026-11-29T...Z, the wall clock of the tests


def _snapshot(**extra):
    data = {"generated_at": NOW, "started_at": NOW - 3600,
            "written_at": NOW, "pid": os.getpid(),
            "hostname": socket.gethostname(), "pid_ns": pid_namespace(),
            "write_interval": 2.2,
            "cluster": {"ok": True, "reason": ""},
            "hosts": [{"id": "u1", "name": "compute-1", "state": "active",
                       "since": NOW - 600, "reason": "reporting"}]}
    data.update(extra)
    return data


def _run(tmp_path, data, capsys, now=NOW):
    path = tmp_path / "status.json"
    path.write_text(json.dumps(data))
    conf = tmp_path / "c.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % path)
    rc = status_cmd.main(["--config-file", str(conf)], now=now)
    return rc, capsys.readouterr().out.splitlines()


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_status_file_from_1970_is_stale_not_up_for_498590h(tmp_path,
                                                             capsys):
    """What a fake-clock test left at the default path: no written_at,
    no pid, the engine's clock in 1970."""
    old = {"generated_at": 1000000.0, "started_at": 999700.0,
           "cluster": {"ok": True, "reason": ""},
           "hosts": [{"id": "u1", "name": "compute-1", "state": "active",
                      "since": 999800.0, "reason": "reporting"}]}
    rc, lines = _run(tmp_path, old, capsys)
    assert rc != 0
    assert lines[0].startswith("STALE"), lines
    assert "1970-01-12T13:46:40Z" in lines[0]
    assert not any("498590h" in line for line in lines), lines
    assert not any("engine up" in line for line in lines), lines


def test_a_fresh_snapshot_of_a_live_engine_says_when_and_by_whom(tmp_path,
                                                                capsys):
    rc, lines = _run(tmp_path, _snapshot(), capsys, now=NOW + 1.5)
    assert rc == 0, lines
    assert not any("STALE" in line for line in lines)
    assert lines[0].startswith("instanceha status written "
                               "2026-11-29T") and "(1s ago)" in lines[0]
    assert "engine pid %d" % os.getpid() in lines[0]
    assert "up 60m" in lines[0]


def test_an_exited_engine_is_no_engine_running(tmp_path, capsys):
    # Written a second ago: only the pid tells that its engine is gone.
    rc, lines = _run(tmp_path, _snapshot(pid=_dead_pid()), capsys,
                     now=NOW + 1)
    assert rc != 0
    assert lines[0].startswith("STALE: no engine running"), lines
    assert "has exited" in lines[0]
    assert not any("engine pid" in line and " up " in line
                   for line in lines[1:]), lines


def test_a_pid_of_another_machine_or_namespace_is_not_judged(tmp_path,
                                                             capsys):
    """A CLI on the host reading the file of an engine in a container:
    the engine's pid means nothing here; the file's age tells."""
    for other in ({"hostname": "elsewhere"}, {"pid_ns": "pid:[1]"}):
        rc, lines = _run(tmp_path, _snapshot(pid=_dead_pid(), **other),
                         capsys, now=NOW + 1)
        assert rc == 0, (other, lines)


def test_a_stopped_engine_is_no_engine_running(tmp_path, capsys):
    rc, lines = _run(tmp_path, _snapshot(stopped_at=NOW), capsys,
                     now=NOW + 30)
    assert rc != 0
    assert lines[0].startswith("STALE: no engine running"), lines
    assert "stopped 2026-11-29T" in lines[0] and "30s ago" in lines[0]


def test_a_snapshot_not_rewritten_for_a_few_intervals_is_stale(tmp_path,
                                                               capsys):
    """The engine's process is there (a hung engine, or a pid taken
    again) but the file is not rewritten."""
    rc, lines = _run(tmp_path, _snapshot(), capsys,
                     now=NOW + status_cmd.STALE_WRITES * 2.2 + 1)
    assert rc != 0
    assert lines[0].startswith("STALE"), lines
    assert "rewritten every 2.2s" in lines[0]
    rc, _ = _run(tmp_path, _snapshot(), capsys,
                 now=NOW + status_cmd.STALE_WRITES * 2.2 - 1)
    assert rc == 0


def test_an_engine_whose_reconciler_is_stuck_is_stale(tmp_path, capsys):
    live = {"ok": False, "reason": "the reconciler's last pass was 300s ago"}
    rc, lines = _run(tmp_path, _snapshot(live=live), capsys, now=NOW + 1)
    assert rc != 0
    assert lines[0] == "STALE: the reconciler's last pass was 300s ago"


def test_times_read_as_iso_dates_not_epoch_floats():
    data = _snapshot(sources={"audit": {"last_at": 1795924572.229673,
                                        "audits": 3, "last_seconds": 0.5}})
    text = cli.format_status(data, now=NOW + 2)
    line = next(ln for ln in text.splitlines() if ln.startswith("source "))
    assert "1795924572" not in text
    assert "last_at=2026-11-29T" in line and "audits=3" in line
    assert "last_seconds=0.5" in line


def test_the_status_file_says_when_by_whom_and_how_often(tmp_path):
    class Engine:
        def snapshot(self):
            return {"generated_at": 1000.0, "hosts": []}

    class Conf:
        status_file = str(tmp_path / "status.json")

    h = health.StatusFile(Conf(), Engine().snapshot,
                          lambda: (True, "reconciler passed 1.0s ago"),
                          wall=lambda: NOW)
    h.write()
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["written_at"] == NOW and data["generated_at"] == 1000.0
    assert data["pid"] == os.getpid()
    assert data["hostname"] == socket.gethostname()
    assert data["pid_ns"] == pid_namespace()
    assert data["write_interval"] >= health.STATUS_EVERY
    assert data["live"] == {"ok": True,
                            "reason": "reconciler passed 1.0s ago"}
    assert "stopped_at" not in data
    h.write(final=True)
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["stopped_at"] == NOW


def test_status_piped_into_head_prints_no_traceback(tmp_path):
    """``instanceha status | head -3``: the reader goes away after a few
    lines; the rest is dropped without a BrokenPipeError traceback."""
    data = _snapshot(written_at=time.time(), hosts=[
        {"id": "u%d" % i, "name": "compute-%d" % i, "state": "active",
         "since": NOW, "reason": "reporting " + "x" * 60}
        for i in range(3000)])          # ~300 KB: more than a pipe holds
    path = tmp_path / "status.json"
    path.write_text(json.dumps(data))
    conf = tmp_path / "c.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from instanceha.cmd.main "
         "import main; sys.exit(main())", "status", "--config-file",
         str(conf)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert first.startswith(b"instanceha status written")


def test_a_journal_read_into_a_closed_pipe_is_no_journal_error(tmp_path):
    """``instanceha history HOST | head``: the broken pipe is not said
    as "cannot read the journal" (instanceha.cmd.main drops it)."""
    import pytest
    from instanceha.cmd import common
    from instanceha.journal import Journal

    url = "sqlite:///%s" % (tmp_path / "journal.sqlite")
    Journal(url).close()

    class Conf:
        class journal:
            connection = url

    def read(journal):
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        common.reading_journal(Conf, read)


def test_a_stopped_service_leaves_a_file_that_says_no_engine_runs(
        tmp_path, capsys):
    """The service's last write at stop says so: ``instanceha status``
    right after ``systemctl stop`` says STALE, not "engine up"."""
    from instanceha import service as service_mod
    from tests.unit.fakes import Clock, FakeCompute, FakeFencer
    from tests.unit.test_backend_wait import Notifier, _conf

    conf, path = _conf(tmp_path)
    clock = Clock()
    compute = FakeCompute(clock, hosts=2)
    svc = service_mod.Service(conf, compute=compute, clock=clock,
                              fencer=lambda name: FakeFencer(compute),
                              notifier=Notifier(), sleep=lambda s: False)
    svc.start()
    svc.stop()
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["pid"] == os.getpid() and data["stopped_at"] > NOW
    capsys.readouterr()         # the service's own log lines
    rc = status_cmd.main(["--config-file", path],
                         now=data["stopped_at"] + 5)
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert lines[0].startswith("STALE: no engine running: it stopped ")
