"""Start-up against backends that do not answer yet, replicas' journals,
and the health of a standby (issue 21, holes 5, 6 and 7).

- A journal database or coordination backend that does not answer at
  start is waited for, with back-off, saying what it waits for (status,
  /healthz, STATUS=); one that refuses (a wrong password) stops the start
  (exit status 2). A stop signal ends the wait.
- Replicas with a SQLite journal are refused at start.
- A standby is alive while it follows its group (/healthz 200 long after
  ``[api] stale_after``) and not ready (/readyz 503, "standby").

No sleeping: the service's ``sleep`` between attempts is a fake that
records the delays (and looks at what the service says meanwhile).
"""

import functools
import json

import pytest
import sqlalchemy.exc as sa_exc
import yaml

from instanceha import conf as conf_pkg
from instanceha import coordination as co
from instanceha import service as service_mod
from instanceha import watchdog
from instanceha.cmd import main as cli
from instanceha.journal import Journal
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer
from tests.unit.test_coordination import Backend, FakeCoordinator


def _conf(tmp_path, **groups):
    inventory = tmp_path / "bmc.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {
        "compute-%d" % i: {"driver": "redfish",
                           "address": "https://bmc-%d" % i,
                           "password": "pw"}
        for i in range(2)}}))
    values = {"DEFAULT": {"workers": 1,
                          "status_file": str(tmp_path / "status.json")},
              "fencing": {"inventory": str(inventory)},
              "journal": {"connection": "sqlite:///%s"
                          % (tmp_path / "journal.sqlite")},
              "api": {"listen_address": "127.0.0.1", "port": 0,
                      "unix_socket": ""}}
    for group, opts in groups.items():
        values.setdefault(group, {}).update(opts)
    path = write_conf_file(str(tmp_path / "instanceha.conf"), values)
    return conf_pkg.load(["--config-file", path]), path


class Notifier:
    """sdnotify.Notifier's interface, recording what would be sent."""
    enabled = True
    watchdog_interval = None

    def __init__(self):
        self.sent = []

    def send(self, **fields):
        self.sent.append(fields)
        return True

    def extend_timeout(self, seconds, status):
        return self.send(extend_timeout_usec=int(seconds * 1e6),
                         status=status)

    def ready(self, status):
        return self.send(ready=1, status=status)

    def status(self, status):
        return self.send(status=status)

    def watchdog(self, status=None):
        return self.send(watchdog=1, status=status)

    def reloading(self, status=""):
        return self.send(reloading=1)

    def stopping(self, status=""):
        return self.send(stopping=1)


def _refused(code=2003, text="Can't connect to MySQL server on 'db' "
                              "([Errno 111] Connection refused)"):
    """What SQLAlchemy raises when pymysql cannot connect."""
    import pymysql
    return sa_exc.OperationalError(None, None,
                                   pymysql.err.OperationalError(code, text))


class FlakyJournal:
    """Journal(url) that fails ``failures`` times (``error()``), then opens
    a SQLite journal in ``path``."""

    def __init__(self, path, failures, error=_refused):
        self.path, self.failures, self.error = path, failures, error
        self.attempts = 0

    def __call__(self, url):
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error()
        return Journal("sqlite:///%s" % self.path)


# -- hole 7: replicas with per-node journals ----------------------------------

def test_replicas_with_a_sqlite_journal_are_refused_naming_both_options(
        tmp_path, capsys, monkeypatch):
    conf, path = _conf(tmp_path, coordination={
        "backend_url": "redis://127.0.0.1:1"})
    with pytest.raises(service_mod.ConfigError) as err:
        service_mod.Service(conf, compute=FakeCompute(Clock(), hosts=2))
    text = str(err.value)
    assert "[coordination] backend_url" in text
    assert "[journal] connection" in text and "SQLite" in text
    monkeypatch.setattr("instanceha.log.setup", lambda *a, **k: None)
    monkeypatch.setattr("instanceha.drivers.compute.nova.NovaDriver",
                        lambda conf: FakeCompute(Clock(), hosts=2))
    assert cli.main(["run", "--config-file", path]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines()
             if ln.startswith("instanceha:")]
    assert len(lines) == 1 and "[journal] connection" in lines[0], lines


# -- hole 5: what a retry can cure, and what it cannot ---------------------

@pytest.mark.parametrize("error, retried", [
    (lambda: _refused(2003), True),                       # refused
    (lambda: _refused(2013, "Lost connection"), True),
    (lambda: _refused(1040, "Too many connections"), True),
    (lambda: _refused(1045, "Access denied for user 'ih'"), False),
    (lambda: _refused(1049, "Unknown database 'ih'"), False),
    (lambda: sa_exc.OperationalError(None, None, Exception(
        'connection to server at "db", port 5432 failed: Connection '
        'refused')), True),
    (lambda: sa_exc.OperationalError(None, None, Exception(
        "FATAL:  the database system is starting up")), True),
    (lambda: sa_exc.OperationalError(None, None, Exception(
        'FATAL:  password authentication failed for user "ih"')), False),
    (lambda: sa_exc.ArgumentError("Could not parse SQLAlchemy URL"), False),
    (lambda: sa_exc.NoSuchModuleError("Can't load plugin: nosuch"), False),
])
def test_journal_errors_a_retry_may_cure(error, retried):
    assert service_mod.journal_unreachable(error()) is retried


def test_a_sqlite_file_that_cannot_be_opened_is_not_waited_for():
    import sqlite3
    e = sa_exc.OperationalError(None, None, sqlite3.OperationalError(
        "unable to open database file"))
    assert not service_mod.journal_unreachable(e)


def _chained(outer, inner):
    try:
        try:
            raise inner
        except Exception as e:
            raise outer from e
    except Exception as e:
        return e


class ToozConnectionError(Exception):
    pass


class AuthenticationError(Exception):
    pass


@pytest.mark.parametrize("error, retried", [
    (ConnectionRefusedError(111, "Connection refused"), True),
    (TimeoutError("timed out"), True),
    (OSError(-2, "Name or service not known"), True),
    (_chained(ToozConnectionError("Error 111"),
              ConnectionRefusedError(111, "refused")), True),
    (_chained(ToozConnectionError("auth"),
              AuthenticationError("invalid username-password pair")), False),
    (ValueError("WRONGPASS invalid username-password pair"), False),
    (RuntimeError("No 'tooz.backends' driver found, looking for 'nosuch'"),
     False),
])
def test_coordination_errors_a_retry_may_cure(error, retried):
    assert co.unreachable(error) is retried


# -- hole 5: the wait --------------------------------------------------------

def _status(tmp_path):
    return json.loads((tmp_path / "status.json").read_text())


def test_a_journal_database_down_at_start_is_waited_for_then_acts(
        tmp_path, monkeypatch):
    """Three refusals, then the database answers: the start waits (1, 2,
    4 s apart), saying what it waits for in the status, /healthz and
    STATUS= (systemd's start timeout extended), then acts. Before: the
    service could not be built (ConfigError, exit status 2)."""
    conf, _ = _conf(tmp_path, DEFAULT={"startup_retry_max_interval": 3})
    flaky = FlakyJournal(tmp_path / "j.sqlite", failures=4)
    monkeypatch.setattr(service_mod, "Journal", flaky)
    clock = Clock()
    compute = FakeCompute(clock, hosts=2)
    notifier = Notifier()
    seen = []

    def sleep(seconds):
        svc.write_status()
        seen.append((seconds, svc.api.handle("GET", "/healthz"),
                     svc.api.handle("GET", "/readyz"),
                     _status(tmp_path).get("starting")))
        clock.advance(seconds)
        return False
    svc = service_mod.Service(conf, compute=compute, clock=clock,
                              fencer=lambda name: FakeFencer(compute),
                              notifier=notifier, sleep=sleep)
    svc.start()
    try:
        assert [s[0] for s in seen] == [1, 2, 3]       # capped at 3
        assert flaky.attempts == 5
        for _, healthz, readyz, starting in seen:
            body = json.loads(healthz[2])
            assert healthz[0] == 200, body
            assert body["reason"].startswith(
                "starting: waiting for the journal database sqlite:///")
            assert "OperationalError: (2003, \"Can't connect" in \
                body["reason"] and "since 1970-01-12T13:46:40Z" \
                in body["reason"]
            assert readyz[0] == 503
            assert json.loads(readyz[2])["role"] == "starting"
            assert starting["waiting_for"].startswith(
                "the journal database")
            assert starting["since"] == 1_000_000.0
        extends = [m for m in notifier.sent if "extend_timeout_usec" in m]
        assert len(extends) == 3
        assert all(m["status"].startswith("starting: waiting for the "
                                          "journal database")
                   for m in extends)
        assert svc._acting and svc.engine.ctx.journal.latest() == {}
        assert "starting" not in svc.engine.snapshot()
    finally:
        svc.stop()


def test_a_journal_that_refuses_stops_the_start_with_one_line(
        tmp_path, monkeypatch):
    conf, _ = _conf(tmp_path)
    monkeypatch.setattr(service_mod, "Journal", FlakyJournal(
        tmp_path / "j.sqlite", failures=9,
        error=lambda: _refused(1045, "Access denied for user 'ih'@'x'")))
    with pytest.raises(service_mod.ConfigError) as err:
        service_mod.Service(conf, compute=FakeCompute(Clock(), hosts=2))
    assert "Access denied" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_stop_signal_ends_the_wait_with_nothing_done(tmp_path,
                                                       monkeypatch):
    conf, _ = _conf(tmp_path)
    monkeypatch.setattr(service_mod, "Journal", FlakyJournal(
        tmp_path / "j.sqlite", failures=99))
    clock = Clock()
    compute = FakeCompute(clock, hosts=2)
    fencer = FakeFencer(compute)
    svc = service_mod.Service(conf, compute=compute, clock=clock,
                              fencer=lambda name: fencer,
                              notifier=Notifier(), sleep=lambda s: True)
    with pytest.raises(service_mod.StartInterrupted) as err:
        svc.start()
    assert "waiting for the journal database" in str(err.value)
    assert not svc._acting and fencer.powered_off == []
    svc.engine.stop()


def _membership(clock, backend, failures):
    """What builds a real Membership on the fake tooz coordinator whose
    first ``failures`` starts are refused (with the service's hooks)."""
    coordinator = FakeCoordinator(backend)
    calls = {"n": 0}

    def start(start_heart=False):
        calls["n"] += 1
        if calls["n"] <= failures:
            raise ConnectionRefusedError(111, "Connection refused")
    coordinator.start = start
    return functools.partial(
        co.Membership, "redis://:Secret-Pw@127.0.0.1:6399", lease=10,
        margin=3, interval=1, clock=clock, mono=clock,
        coordinator=coordinator, member="me",
        spawn=lambda target: None), calls


def _replica(tmp_path, monkeypatch, failures, clock, sleep):
    conf, _ = _conf(tmp_path, journal={
        "connection": "mysql+pymysql://ih@db/instanceha"},
        coordination={"backend_url": "redis://:Secret-Pw@127.0.0.1:6399"})
    monkeypatch.setattr(service_mod, "Journal",
                        FlakyJournal(tmp_path / "j.sqlite", failures=0))
    backend = Backend()
    membership, calls = _membership(clock, backend, failures)
    compute = FakeCompute(clock, hosts=2)
    svc = service_mod.Service(conf, compute=compute, clock=clock,
                              fencer=lambda name: FakeFencer(compute),
                              notifier=Notifier(), sleep=sleep,
                              membership=membership)
    return svc, backend, calls


def test_a_coordination_backend_down_at_start_is_waited_for(tmp_path,
                                                          monkeypatch):
    """Before: 'cannot reach [coordination] backend_url', exit status 2,
    and systemd never restarts a status 2 (RestartPreventExitStatus)."""
    clock = Clock()
    said = []

    def sleep(seconds):
        said.append(svc.liveness())
        clock.advance(seconds)
        return False
    svc, backend, calls = _replica(tmp_path, monkeypatch, 2, clock, sleep)
    svc.start()
    try:
        assert calls["n"] == 3 and len(said) == 2
        assert all(ok for ok, _ in said)
        assert said[0][1].startswith(
            "starting: waiting for the coordination backend "
            "redis://:***@127.0.0.1:6399 (ConnectionRefusedError")
        assert "Secret-Pw" not in repr(said)
        # Joined: a member of the group (elected at once here: the fake
        # backend's lock is free).
        assert svc.membership.beat_ok_at is not None
        assert svc.role() in ("standby", "elected")
    finally:
        svc.stop()


# -- hole 6: a standby's health ----------------------------------------------

def test_a_standby_that_follows_its_group_is_alive_and_not_ready(
        tmp_path, monkeypatch):
    """Another member holds the leadership; long after [api] stale_after
    (120 s) the standby's heartbeats still succeed: /healthz 200, /readyz
    503 saying standby. Before: 503 'the reconciler has never completed a
    pass' after two minutes, and a liveness probe restarted it."""
    clock = Clock()
    svc, backend, _ = _replica(tmp_path, monkeypatch, 0, clock,
                               lambda s: False)
    backend.holder = object()           # another member acts
    svc.start()
    try:
        for _ in range(200):
            clock.advance(1.0)
            svc.membership.beat()
        code, _, body = svc.api.handle("GET", "/healthz")
        assert code == 200, body
        assert json.loads(body)["reason"].startswith(
            "standby in group instanceha: the backend answered 0.0s ago")
        code, _, body = svc.api.handle("GET", "/readyz")
        assert code == 503
        assert json.loads(body)["role"] == "standby"
        # Its heartbeat loop stuck (no round for longer than stale_after):
        # genuinely unhealthy.
        clock.advance(121)
        code, _, body = svc.api.handle("GET", "/healthz")
        assert code == 503, body
        assert "attempted nothing" in json.loads(body)["reason"]
    finally:
        svc.stop()


def test_liveness_decisions():
    now, stale = 1000.0, 120.0
    live = watchdog.liveness
    assert live({"starting": "starting: waiting for x"}, now, stale) == (
        True, "starting: waiting for x")
    standby = {"role": "standby", "group": "g", "beat_attempt_at": 995.0,
               "beat_ok_at": 995.0, "backend_error": None}
    assert live(standby, now, stale)[0]
    waiting = dict(standby, backend_error="ConnectionError: refused",
                   backend_error_since=900.0)
    ok, why = live(waiting, now, stale)
    assert ok and why.startswith("standby: waiting for the coordination "
                                 "backend (ConnectionError: refused) since")
    assert not live(dict(standby, beat_attempt_at=800.0), now, stale)[0]
    assert not live({"role": "lost", "reason": "lapsed"}, now, stale)[0]
    # Elected an hour after its start: its first pass is due from then.
    acting = {"role": "acting", "acting_since": 990.0, "last_pass_at": None}
    assert live(acting, now, stale) == (
        True, "starting: waiting for the first reconcile pass")
    assert not live(dict(acting, acting_since=800.0), now, stale)[0]
    assert live(dict(acting, last_pass_at=995.0), now, stale)[0]
    assert not live(dict(acting, acting_since=100.0, last_pass_at=850.0),
                    now, stale)[0]


def test_readiness_decisions():
    ready = watchdog.readiness
    assert ready({"role": "acting", "passes": 3}) == (
        True, "acting", "acting for every host")
    assert ready({"role": "acting", "passes": 0})[:2] == (False, "starting")
    assert ready({"role": "standby", "group": "g",
                  "acting_member": "ctl-1:1:ab"}) == (
        False, "standby", "standby in group g: ctl-1:1:ab acts")
    assert ready({"role": "elected", "reason": "elected: waiting"})[:2] == (
        False, "elected")
    assert ready({"starting": "starting: waiting for y",
                  "role": "acting"})[:2] == (False, "starting")


# -- hole 5: Keystone and Nova, down at start --------------------------------

def _compute_error(cause):
    """ComputeError raised while handling ``cause``, as NovaDriver does."""
    from instanceha.drivers.compute.base import ComputeError
    try:
        try:
            raise cause
        except Exception as inner:
            raise ComputeError("cannot reach Nova for version discovery: "
                               "%s" % inner)
    except ComputeError as e:
        return e


def test_nova_errors_a_retry_may_cure():
    from keystoneauth1 import exceptions as ks
    from instanceha.drivers.compute.base import ComputeError
    assert service_mod.nova_unreachable(_compute_error(
        ks.ConnectFailure("Unable to establish connection")))
    assert service_mod.nova_unreachable(_compute_error(
        ks.ServiceUnavailable()))
    assert not service_mod.nova_unreachable(_compute_error(
        ks.Unauthorized()))
    assert not service_mod.nova_unreachable(ComputeError(
        "Nova supports up to microversion 2.40; instanceha needs 2.53"))


def test_nova_down_at_start_is_waited_for_then_acts(tmp_path, monkeypatch):
    """Keystone refuses twice, then Nova answers: the start waits, saying
    so, then acts. Before: 'cannot start: cannot connect to Nova', exit
    status 2 (never restarted by systemd)."""
    from keystoneauth1 import exceptions as ks
    conf, _ = _conf(tmp_path)
    clock = Clock()
    compute = FakeCompute(clock, hosts=2)
    attempts = []

    def nova_driver(conf):
        attempts.append(clock())
        if len(attempts) <= 2:
            raise _compute_error(ks.ConnectFailure(
                "Unable to establish connection to http://ks:5000"))
        return compute
    monkeypatch.setattr("instanceha.drivers.compute.nova.NovaDriver",
                        nova_driver)
    said = []

    def sleep(seconds):
        said.append(svc.liveness())
        clock.advance(seconds)
        return False
    svc = service_mod.Service(conf, clock=clock, notifier=Notifier(),
                              fencer=lambda name: FakeFencer(compute),
                              sleep=sleep)
    svc.start()
    try:
        # One at construction, two in the start (one wait between).
        assert len(attempts) == 3 and len(said) == 1
        assert said[0][0] and said[0][1].startswith(
            "starting: waiting for Nova (cloud instanceha) (ComputeError: "
            "cannot reach Nova")
        assert svc._acting
        assert svc.compute.list_services()
    finally:
        svc.stop()


def test_the_watchdog_judges_a_standby_by_its_heartbeat_rounds(
        tmp_path, monkeypatch):
    """Under systemd a standby sends WATCHDOG=1 while its coordination
    heartbeat loop makes rounds, and stops once the loop has made none for
    [DEFAULT] watchdog_stall_timeout (systemd then restarts it). Before:
    WATCHDOG=1 whatever the loop did."""
    clock = Clock()
    svc, backend, _ = _replica(tmp_path, monkeypatch, 0, clock,
                               lambda s: False)
    backend.holder = object()           # another member acts
    svc.membership.connect()
    mono = Clock(0.0)
    link = watchdog.SystemdLink(svc, Notifier(), clock=clock,
                                monotonic=mono)
    stall = svc.conf.watchdog_stall_timeout
    for _ in range(3):
        mono.advance(stall / 2)
        svc.membership.beat()
        ok, ready, text = link.check()
        assert ok and ready, text
        assert text.startswith("standby in group instanceha")
    mono.advance(stall + 1)             # no round since
    ok, ready, text = link.check()
    assert not ok
    assert text.startswith("UNHEALTHY: the coordination heartbeat "
                           "attempted nothing for")
    svc.engine.stop()
