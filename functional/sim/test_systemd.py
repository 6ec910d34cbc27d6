"""The real ``instanceha run`` under a stand-in for systemd: a notify
socket (AF_UNIX datagrams, as systemd binds it) and WATCHDOG_USEC. It says
READY=1 only once it has seen Nova, pings the watchdog while it recovers
a host, reloads on SIGHUP (RELOADING=1, READY=1) and says STOPPING=1."""

import os
import signal
import socket
import threading
import time

from functional.peers.faultproxy import HttpFaultProxy
from functional.sim.conftest import wait_for


class NotifySocket:
    """systemd's end: a bound datagram socket, read by a thread that
    stamps each message with its arrival time."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.path = path
        self.received = []          # (monotonic time, {KEY: value})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), dict(
                line.split("=", 1) for line in data.decode().splitlines())))

    def drain(self):
        return list(self.received)

    def wait(self, predicate, timeout, what):
        return wait_for(lambda: [m for _, m in self.drain() if predicate(m)],
                        timeout, what)

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def test_ready_watchdog_reload_and_stop(make_cloud, tmp_path):
    c = make_cloud(hosts=3)
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    try:
        env = dict(os.environ, NOTIFY_SOCKET=notify.path,
                   WATCHDOG_USEC="2000000")
        c.engine.start(3, timeout=30, env=env)
        ready = notify.wait(lambda m: m.get("READY") == "1", 15, "READY=1")
        assert "watching 3 compute host(s)" in ready[0]["STATUS"]
        # Nothing said READY=1 before the first reconcile pass: the
        # messages before READY are all "starting".
        before = []
        for _, m in notify.received:
            if m.get("READY") == "1":
                break
            before.append(m)
        assert all(m["STATUS"].startswith("starting") for m in before)
        # A host dies and is recovered while the watchdog keeps being fed.
        c.sim.kill("compute-1")
        c.wait_state("compute-1", "evacuated", timeout=60)
        pings = [t for t, m in notify.drain() if m.get("WATCHDOG") == "1"]
        assert len(pings) >= 3
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert max(gaps) < 2.0, gaps   # within WATCHDOG_USEC
        # SIGHUP: mutable options change, an immutable one is kept. With
        # 3 hosts a second loss is a storm at the default 50% threshold;
        # the reload lifts it to 100%.
        conf = open(c.conf_path).read()
        conf = conf.replace("grace_period = 1.0", "grace_period = 2.5")
        conf = conf.replace("resume_boot_time = 3.0",
                            "resume_boot_time = 3.0\nthreshold = 100")
        conf = conf.replace("workers = 8", "workers = 4")
        with open(c.conf_path, "w") as f:
            f.write(conf)
        count = len(notify.drain())
        c.engine.proc.send_signal(signal.SIGHUP)
        notify.wait(lambda m: m.get("RELOADING") == "1", 10, "RELOADING=1")
        after = notify.wait(lambda m: (m.get("READY") == "1"
                                                and "reloaded" in
                                                m.get("STATUS", "")),
                            10, "READY=1 after the reload")
        assert after
        assert len(notify.received) > count
        wait_for(lambda: "config_change_ignored" in c.engine.log_text(),
                 10, "the ignored change logged")
        log = c.engine.log_text()
        assert "detection.grace_period: 1.0 -> 2.5; " \
            "policy.threshold: 50 -> 100" in log
        assert "options='DEFAULT.workers'" in log
        # Still recovering after the reload, under the new threshold.
        c.sim.kill("compute-2")
        c.wait_state("compute-2", "evacuated", timeout=60)
        c.engine.stop()
        notify.wait(lambda m: m.get("STOPPING") == "1", 5, "STOPPING=1")
    finally:
        c.engine.stop()
        notify.close()


def test_a_hung_reconciler_stops_the_watchdog_pings(make_cloud, tmp_path):
    """A real stuck engine: Nova's API holds every read longer than
    [DEFAULT] watchdog_stall_timeout, so the reconciler attempts no pass.
    The process stops sending WATCHDOG=1 (systemd, with WatchdogSec, would
    kill and restart it) and says why in STATUS=; once Nova answers again
    the pings resume."""
    c = make_cloud({"DEFAULT": {"watchdog_stall_timeout": 10.0,
                                "api_timeout": 60.0}}, hosts=3)
    proxy = HttpFaultProxy(c.server.url, prefix="/compute", delay_rate=1.0,
                           delay=16.0, methods=["GET"])
    proxy.enabled = False
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    try:
        c.compute_through(proxy)
        env = dict(os.environ, NOTIFY_SOCKET=notify.path,
                   WATCHDOG_USEC="2000000")
        c.engine.start(3, timeout=30, env=env)
        notify.wait(lambda m: m.get("READY") == "1", 15, "READY=1")
        proxy.enabled = True
        sick = notify.wait(lambda m: m.get("STATUS", "").startswith(
            "UNHEALTHY"), 40, "STATUS=UNHEALTHY")
        assert "the reconciler attempted no pass for" in sick[0]["STATUS"]
        proxy.enabled = False
        sick_at = next(t for t, m in notify.drain()
                       if m.get("STATUS", "").startswith("UNHEALTHY"))
        wait_for(lambda: [t for t, m in notify.drain()
                          if t > sick_at and m.get("WATCHDOG") == "1"],
                 40, "WATCHDOG=1 again once Nova answers")
        pings = [t for t, m in notify.drain() if m.get("WATCHDOG") == "1"]
        # No UNHEALTHY message carried a ping, and the pings stopped for
        # longer than WatchdogSec (2 s): systemd would have restarted it.
        assert not [m for _, m in notify.drain()
                    if m.get("STATUS", "").startswith("UNHEALTHY")
                    and "WATCHDOG" in m]
        assert max(b - a for a, b in zip(pings, pings[1:])) > 2.0
        # One log line each way, saying why.
        lines = [line for line in c.engine.log_text().splitlines()
                 if "event='watchdog'" in line]
        assert len(lines) == 2, lines
        assert "healthy=False" in lines[0] and "no WATCHDOG=1" in lines[0]
        assert "healthy=True" in lines[1]
    finally:
        c.engine.stop()
        notify.close()
        proxy.close()
