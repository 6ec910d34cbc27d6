"""instanceha-agent as a process: start-up errors exit 2 with one line
naming the problem; a running agent beats to a loopback sink and stops
cleanly on SIGTERM."""

import os
import signal
import socket
import subprocess
import sys

import pytest

from instanceha.agent import main
from instanceha.heartbeat import challenge
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers as hb

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


@pytest.fixture(autouse=True)
def _no_process_logging(monkeypatch):
    # main() points the root logger at the stderr of the moment: in-process
    # that is pytest's capture, closed after the test, and every later
    # test's log line would fail on it ("Logging error").
    monkeypatch.setattr("instanceha.log.setup", lambda *a, **k: None)


def write_conf(tmp_path, key, engines="127.0.0.1:9", **extra):
    lines = ["[agent]", "host = compute-1", "engines = %s" % engines,
             "key_file = %s" % key, "compute_check = none",
             "libvirt_check = none", "count_guests = false"]
    lines += ["%s = %s" % item for item in extra.items()]
    path = tmp_path / "agent.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("setup,message", [
    (lambda p: None, "cannot be read"),
    (lambda p: hb.write_key(p, mode=0o644), "chmod 0600"),
    (lambda p: hb.write_key(p, secret=b"short"), "at least 32"),
])
def test_a_key_file_problem_exits_2_naming_it(tmp_path, capsys, setup,
                                              message):
    key = tmp_path / "agent.key"
    setup(key)
    status = main.main(["--config-file", str(write_conf(tmp_path, key))])
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("instanceha-agent: key file %s" % key)
    assert message in err


@pytest.mark.parametrize("extra,message", [
    (dict(engines=""), "engines: must list"),
    (dict(interval="fast"), "interval"),
    (dict(control_addresses="192.0.2.250:7412"), "cannot bind"),
])
def test_a_configuration_problem_exits_2(tmp_path, capsys, extra, message):
    key = hb.write_key(tmp_path / "agent.key")
    conf = write_conf(tmp_path, key, **extra)
    assert main.main(["--config-file", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("instanceha-agent: ") and message in err


def test_the_agent_beats_and_stops_on_sigterm(tmp_path):
    key = hb.write_key(tmp_path / "agent.key")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(30)
        conf = write_conf(tmp_path, key,
                          engines="127.0.0.1:%d" % sink.getsockname()[1],
                          interval="0.1", paths="lo=127.0.0.1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "instanceha.agent.main",
             "--config-file", str(conf)], cwd=TOP,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ring = keys.Keyring(hb.KEY)
            first = protocol.decode(sink.recv(2048), ring)
            second = protocol.decode(sink.recv(2048), ring)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert first.host == "compute-1" and first.path == "lo"
    assert second.seq == first.seq + 1
    assert first.boot_id == open(
        "/proc/sys/kernel/random/boot_id").read().strip()
    assert "agent.started" in err and "agent.stopped" in err
    assert hb.SECRET.decode() not in err


def _agent_with_watchdog(tmp_path, sink):
    key = hb.write_key(tmp_path / "agent.key")
    device = tmp_path / "wd-test-device"
    device.write_bytes(b"")
    conf = write_conf(tmp_path, key,
                      engines="127.0.0.1:%d" % sink.getsockname()[1],
                      interval="0.1", paths="lo=127.0.0.1",
                      watchdog_device=str(device), watchdog_timeout="30",
                      watchdog_check_interval="0.1", guest_events="false",
                      nonce_file=str(tmp_path / "nonces"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "instanceha.agent.main", "--config-file",
         str(conf)], cwd=TOP, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    return proc, device


def _armed_beat(sink):
    """Play the acting engine: answer the beats (a challenge echoing the
    agent's nonce) until one says the watchdog is armed."""
    ring = keys.Keyring(hb.KEY)
    while True:
        data, source = sink.recvfrom(2048)
        beat = protocol.decode(data, ring)
        if beat.watchdog.state == protocol.WATCHDOG_ARMED:
            return beat
        sink.sendto(challenge.encode(challenge.Challenge(
            b"E" * 8, b"c" * 16, beat.host, beat.watchdog.nonce, True),
            hb.KEY), source)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_orderly_stop_disarms_and_says_so_a_crash_leaves_it_armed(
        tmp_path, how):
    """A test device (a file under tmp_path; the process inherits the
    suite's refusal of real watchdogs): SIGTERM ends it with the magic
    'V' and a last beat saying disarmed; SIGKILL leaves it armed (the
    hardware would reset the host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(30)
        proc, device = _agent_with_watchdog(tmp_path, sink)
        try:
            beat = _armed_beat(sink)
            assert beat.watchdog.state == protocol.WATCHDOG_ARMED
            assert beat.watchdog.timeout == 30
        finally:
            proc.send_signal(signal.SIGTERM if how == "sigterm"
                             else signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
        written = device.read_bytes()
        assert written.startswith(b".")
        if how == "sigkill":
            assert not written.endswith(b"V")
            return
        assert proc.returncode == 0, err
        assert written.endswith(b"V")
        ring = keys.Keyring(hb.KEY)
        last = None
        sink.setblocking(False)     # the process ended: all are queued
        try:
            while True:
                last = protocol.decode(sink.recv(2048), ring)
        except BlockingIOError:
            pass
        assert last.watchdog.state == protocol.WATCHDOG_DISARMED
        assert "agent.watchdog_disarmed" in err
