"""sd_notify over a real AF_UNIX datagram socket, and what the service
tells systemd: READY=1 after the first reconcile pass, WATCHDOG=1 only
while the engine is healthy, STATUS= saying what it does."""

import os
import socket
import threading

import pytest
import yaml
from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha import sdnotify
from instanceha import service as service_mod
from instanceha import watchdog
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer


class Socket:
    """The listening end systemd holds: a bound AF_UNIX datagram socket."""

    def __init__(self, path, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + path if abstract else path)
        self.sock.setblocking(False)
        self.env = {"NOTIFY_SOCKET": ("@" + path) if abstract else path}

    def messages(self):
        """Every datagram received so far, each as {KEY: value}."""
        out = []
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return out
            out.append(dict(line.split("=", 1)
                            for line in data.decode().splitlines()))

    def close(self):
        self.sock.close()


@pytest.fixture
def listener(tmp_path):
    s = Socket(str(tmp_path / "notify.sock"))
    yield s
    s.close()


def test_ready_status_and_watchdog_are_datagrams_of_key_value_lines(
        listener):
    n = sdnotify.Notifier(dict(listener.env, WATCHDOG_USEC="20000000"))
    assert n.enabled and n.watchdog_interval == 10.0
    assert n.ready("watching 3 compute host(s)")
    assert n.watchdog("still\nwatching")
    assert n.status("busy")
    assert n.stopping()
    assert listener.messages() == [
        {"READY": "1", "STATUS": "watching 3 compute host(s)"},
        {"WATCHDOG": "1", "STATUS": "still watching"},
        {"STATUS": "busy"},
        {"STOPPING": "1", "STATUS": "stopping"}]


def test_reloading_carries_the_monotonic_time(listener):
    n = sdnotify.Notifier(listener.env)
    n.reloading()
    [msg] = listener.messages()
    assert msg["RELOADING"] == "1" and int(msg["MONOTONIC_USEC"]) > 0


def test_extend_timeout_asks_for_more_start_time_and_says_why(listener):
    """A start that waits for a backend is not stuck: systemd (>= 236)
    extends TimeoutStartSec by EXTEND_TIMEOUT_USEC at each message."""
    n = sdnotify.Notifier(listener.env)
    assert n.extend_timeout(62.5, "starting: waiting for Nova (x)")
    assert listener.messages() == [
        {"EXTEND_TIMEOUT_USEC": "62500000",
         "STATUS": "starting: waiting for Nova (x)"}]


def test_abstract_socket_name(tmp_path):
    name = "instanceha-test-%d-%s" % (os.getpid(), tmp_path.name)
    s = Socket(name, abstract=True)
    try:
        assert sdnotify.Notifier(s.env).ready("up")
        assert s.messages() == [{"READY": "1", "STATUS": "up"}]
    finally:
        s.close()


def test_without_notify_socket_nothing_is_sent():
    n = sdnotify.Notifier({})
    assert not n.enabled and n.watchdog_interval is None
    assert n.ready("up") is False


def test_a_missing_socket_is_logged_once_and_never_raises(tmp_path):
    n = sdnotify.Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with capture_logs() as logs:
        assert n.watchdog() is False
        assert n.watchdog() is False
    assert [e["event"] for e in logs] == ["sd_notify_failed"]


@pytest.mark.parametrize("env,interval", [
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "junk"}, None),
    ({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}, None),
    ({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}, 2.0),
])
def test_watchdog_only_when_meant_for_this_process(env, interval):
    env = dict(env, NOTIFY_SOCKET="/nonexistent")
    assert sdnotify.Notifier(env).watchdog_interval == interval


# -- liveness -----------------------------------------------------------------

def test_liveness_needs_a_new_attempt_within_the_stall_timeout():
    clock = Clock(0.0)
    live = watchdog.Liveness(60.0, clock)
    assert live.judge(0)[0]
    clock.advance(60)
    assert live.judge(0)[0]
    clock.advance(1)
    ok, why = live.judge(0)
    assert not ok and "no pass for 61s" in why
    # A failed pass is an attempt too: the loop is alive.
    assert live.judge(1)[0]


def test_a_dead_engine_thread_is_unhealthy():
    ok, why = watchdog.Liveness(60.0, Clock(0.0)).judge(5, ["instanceha-x"])
    assert not ok and "instanceha-x" in why


def test_summary_line():
    text = watchdog.summary({
        "hosts": [{"state": "active"}, {"state": "active"},
                  {"state": "evacuating"}],
        "cluster": {"ok": False, "reason": "storm"},
        "unprotected": {"compute-2": "no BMC"},
        "sources": {"reconciler": {"last_pass_at": 90.0,
                                   "last_error": None}}}, now=100.0)
    assert text == ("watching 3 compute host(s) (2 active, 1 evacuating); "
                    "HOLD: storm; 1 UNPROTECTED; last reconcile 10s ago")


# -- the service's link -------------------------------------------------------

def _service(tmp_path, notifier, stall=30.0):
    inventory = tmp_path / "bmc.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {
        "compute-%d" % i: {"driver": "redfish",
                           "address": "https://bmc-%d" % i,
                           "password": "pw"}
        for i in range(3)}}))
    path = write_conf_file(str(tmp_path / "instanceha.conf"), {
        "DEFAULT": {"workers": 1, "watchdog_stall_timeout": stall,
                    "status_file": ""},
        "fencing": {"inventory": str(inventory)},
        "journal": {"connection": "sqlite:///%s"
                    % (tmp_path / "journal.sqlite")},
        "api": {"enabled": False}})
    conf = conf_pkg.load(["--config-file", path])
    clock = Clock()
    compute = FakeCompute(clock, hosts=3)
    fencer = FakeFencer(compute)
    svc = service_mod.Service(conf, compute=compute, clock=clock,
                              fencer=lambda name: fencer, notifier=notifier)
    return svc, clock


def test_ready_only_after_the_first_reconcile_pass(tmp_path, listener):
    n = sdnotify.Notifier(dict(listener.env, WATCHDOG_USEC="10000000"))
    svc, clock = _service(tmp_path, n)
    mono = Clock(0.0)
    link = watchdog.SystemdLink(svc, n, clock=clock, monotonic=mono)
    try:
        assert link.step()
        [msg] = listener.messages()
        assert "READY" not in msg and msg["WATCHDOG"] == "1"
        assert msg["STATUS"].startswith("starting: waiting for the first "
                                        "reconcile pass")
        svc.reconciler.run_once()
        # The pass is handed over but the engine has not applied it yet:
        # STATUS= would count no host (found by CI: 'watching 0').
        assert link.step()
        [msg] = listener.messages()
        assert "READY" not in msg and msg["STATUS"].startswith("starting")
        _apply_all(svc.engine)
        assert link.step()
        first, second = listener.messages()
        assert first["READY"] == "1"
        assert "watching 3 compute host(s)" in first["STATUS"]
        assert second["WATCHDOG"] == "1"
        # READY=1 once only.
        link.step()
        assert "READY" not in listener.messages()[0]
    finally:
        svc.journal.close()


def _apply_all(engine):
    """What the engine's workers do, here and now."""
    while True:
        key = engine.queue.get(timeout=0)
        if key is None:
            return
        engine.work(key)


def test_ready_at_the_second_pass_whatever_the_engine_does(tmp_path,
                                                           listener):
    """READY=1 is not held back for ever by an engine that stays busy."""
    n = sdnotify.Notifier(dict(listener.env, WATCHDOG_USEC="10000000"))
    svc, clock = _service(tmp_path, n)
    link = watchdog.SystemdLink(svc, n, clock=clock, monotonic=Clock(0.0))
    try:
        svc.reconciler.run_once()
        link.step()
        assert "READY" not in listener.messages()[0]
        svc.reconciler.run_once()
        link.step()
        assert listener.messages()[0]["READY"] == "1"
    finally:
        svc.journal.close()


def test_a_stalled_reconciler_stops_the_watchdog_pings(tmp_path, listener):
    n = sdnotify.Notifier(dict(listener.env, WATCHDOG_USEC="10000000"))
    svc, clock = _service(tmp_path, n, stall=30.0)
    mono = Clock(0.0)
    link = watchdog.SystemdLink(svc, n, clock=clock, monotonic=mono)
    try:
        svc.reconciler.run_once()
        link.step()
        listener.messages()
        mono.advance(31)
        with capture_logs() as logs:
            assert not link.step()
        [msg] = listener.messages()
        assert "WATCHDOG" not in msg
        assert msg["STATUS"].startswith("UNHEALTHY: the reconciler "
                                        "attempted no pass for 31s")
        assert [(e["event"], e["healthy"]) for e in logs] == \
            [("watchdog", False)]
        # A pass that fails (Nova down) is still the loop running.
        svc.reconciler.errors += 1
        with capture_logs() as logs:
            assert link.step()
        assert listener.messages()[0]["WATCHDOG"] == "1"
        assert [(e["event"], e["healthy"]) for e in logs] == \
            [("watchdog", True)]
    finally:
        svc.journal.close()


def test_a_dead_engine_thread_stops_the_watchdog_pings(tmp_path, listener):
    n = sdnotify.Notifier(dict(listener.env, WATCHDOG_USEC="10000000"))
    svc, clock = _service(tmp_path, n)
    link = watchdog.SystemdLink(svc, n, clock=clock, monotonic=Clock(0.0))
    dead = threading.Thread(target=lambda: None, name="instanceha-worker-0")
    dead.start()
    dead.join()
    svc.engine.threads = lambda: [dead]
    try:
        svc.reconciler.run_once()
        assert not link.step()
        [msg] = listener.messages()
        assert "WATCHDOG" not in msg and "instanceha-worker-0" in \
            msg["STATUS"]
    finally:
        svc.journal.close()


def test_the_link_is_silent_outside_systemd(tmp_path):
    svc, _ = _service(tmp_path, sdnotify.Notifier({}))
    try:
        svc.systemd.start()
        assert svc.systemd.thread is None
    finally:
        svc.journal.close()
