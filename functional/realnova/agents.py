"""Real ``instanceha-agent`` processes for the real-peer bed's fake computes.

One agent per compute host, each its own process started from the
project's console script with a configuration file of its own, as on a
compute host (nothing of the agent is imported here: only its command
line and its options are used):

* ``host`` is the name Nova knows the compute by (``compute-N``);
* beats go to the engine's heartbeat listener (``127.0.0.1:<port>``) over
  one path from the host's own loopback address (``127.0.10.N``), so the
  engine tells the hosts apart by address too and sends its requests
  back there, to ``control_addresses`` on the engine's ``request_port``;
* the key file (mode 0600) is shared by the agents and the engine;
* the computes share this machine, so "is nova-compute running" is read
  from each compute's own pid file (``compute_check = pidfile``, the file
  ``NovaCloud.compute_pidfile(host)``), not from systemd; libvirt is not
  checked (``libvirt_check = none``, no guest count);
* ``restart_command`` (soft fencing) runs ``agent_restart_compute.py``,
  which asks this test process, owner of the fake computes' processes as
  systemd is of real ones, to restart the host's nova-compute
  (:class:`ComputeRestarter`).
"""

import configparser
import os
import pathlib
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time

from functional.peers import procs
from functional.peers.errors import PeerError

AGENT_BIN = pathlib.Path(sys.executable).parent / "instanceha-agent"
RESTART_SCRIPT = pathlib.Path(__file__).resolve().parent \
    / "agent_restart_compute.py"
#: Nova's [DEFAULT] report_interval on the bed (functional/peers/nova.py)
NOVA_REPORT_INTERVAL = 2.0


def host_address(index):
    """The loopback address compute ``index`` beats from."""
    return "127.0.10.%d" % (index + 1)


def free_udp_port(addresses):
    """A UDP port free on every one of ``addresses`` now."""
    for _ in range(50):
        socks = []
        try:
            port = 0
            for address in addresses:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((address, port))
                port = s.getsockname()[1]
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError("no UDP port free on %s" % ", ".join(addresses))


def write_key(path):
    """A new random shared key at ``path``, mode 0600 from its creation."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(str(path), 0o600)
    return path


class ComputeRestarter:
    """What the agents' restart command reaches: a unix socket in this
    process. Each connection names a host; its nova-compute is stopped
    (if it runs) and started again by the bed, then ``ok`` is answered.
    ``restarts`` records (monotonic time, host, old pid, new pid)."""

    def __init__(self, cloud):
        self.cloud = cloud
        self.restarts = []
        self.errors = []
        self.path = os.path.join(tempfile.mkdtemp(prefix="iha-restart-"),
                                 "restart.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="compute-restarter")
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    host = conn.makefile().readline().strip()
                    conn.sendall((self._restart(host) + "\n").encode())
                except Exception as e:  # noqa: BLE001 - seen by the test
                    self.errors.append(repr(e))

    def _restart(self, host):
        if host not in self.cloud.hosts:
            self.errors.append("restart asked for unknown host %r" % host)
            return "unknown host %s" % host
        name = "nova-compute-%s" % host
        old = self.cloud.procs.get(name)
        old_pid = old.pid if old is not None and old.running() else None
        self.cloud.kill_compute(host)
        new_pid = self.cloud.start_compute(host).pid
        self.restarts.append((time.monotonic(), host, old_pid, new_pid))
        return "ok"

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        for p in (self.path, os.path.dirname(self.path)):
            try:
                (os.unlink if p == self.path else os.rmdir)(p)
            except OSError:
                pass


class HostAgents:
    """One real agent process per compute host of ``bed``.

    ``engine_overrides()`` gives the engine's ``[agent]`` group for them;
    ``start()`` starts every agent (or those named)."""

    def __init__(self, bed, workdir, restart_compute=False, interval=1.0,
                 system_uuids=None, watchdog=None):
        """``system_uuids``: {host: the system UUID its agent reads as
        its machine's DMI product_uuid (a file of this workdir)}; hosts
        not named report none (never this machine's /sys).

        ``watchdog``: {"timeout": s, "isolation": s, "check_interval": s}
        to give every agent a watchdog and the other hosts as its peers
        (issue 37): the device is a plain file of this workdir
        (:meth:`device_of`), never /dev/watchdog; whatever reads it plays
        the hardware (functional/realnova/watchdog_hw.py). Each agent
        probes its peers on ``peer_port`` of their loopback addresses,
        signed with a peer key of this workdir."""
        self.bed = bed
        self.watchdog = dict(watchdog) if watchdog else None
        self.system_uuids = dict(system_uuids or {})
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.restart_compute = restart_compute
        self.interval = interval
        self.addresses = {h: host_address(i) for i, h in enumerate(bed.hosts)}
        self.listen_port = free_udp_port(["127.0.0.1"])
        self.request_port = free_udp_port(list(self.addresses.values()))
        self.key_file = write_key(self.workdir / "agent.key")
        self.peer_port = self.peer_key_file = None
        if self.watchdog is not None:
            self.peer_key_file = write_key(self.workdir / "peer.key")
            self.peer_port = free_udp_port(list(self.addresses.values()))
        self.restarter = ComputeRestarter(bed.cloud) if restart_compute \
            else None
        self.procs = {}
        self.conf_files = {h: self._write_conf(h) for h in bed.hosts}

    # -- configuration -------------------------------------------------------
    def engine_overrides(self):
        """The engine's ``[agent]`` options for these agents."""
        return {"agent": {
            "listen_addresses": "127.0.0.1:%d" % self.listen_port,
            "key_file": str(self.key_file),
            "request_port": self.request_port,
            "nova_report_interval": NOVA_REPORT_INTERVAL,
            "restart_compute": self.restart_compute}}

    def _write_conf(self, host):
        address = self.addresses[host]
        agent = {
            "host": host,
            # the host name comes from 'host' alone, never this machine's
            "nova_conf": str(self.workdir / "absent-nova.conf"),
            "engines": "127.0.0.1:%d" % self.listen_port,
            "paths": "mgmt=%s" % address,
            "interval": str(self.interval),
            "key_file": str(self.key_file),
            "compute_check": "pidfile",
            "compute_pidfile": str(self.bed.cloud.compute_pidfile(host)),
            "libvirt_check": "none",
            "count_guests": "false",
            "system_uuid_file": "",
            "debug": "true",
        }
        if host in self.system_uuids:
            path = self.workdir / ("product_uuid-%s" % host)
            path.write_text(self.system_uuids[host].upper() + "\n")
            agent["system_uuid_file"] = str(path)
        if self.watchdog is not None:
            agent.update(self._watchdog_conf(host))
        if self.restarter is not None:
            agent.update({
                "control_addresses": "%s:%d" % (address, self.request_port),
                "restart_compute": "true",
                "restart_command": ",".join(
                    [sys.executable, str(RESTART_SCRIPT),
                     self.restarter.path, host]),
                "restart_timeout": "60",
            })
        cp = configparser.RawConfigParser()
        cp.add_section("agent")
        for k, v in agent.items():
            cp.set("agent", k, v)
        path = self.workdir / ("instanceha-agent-%s.conf" % host)
        with open(path, "w") as f:
            cp.write(f)
        return path

    def device_of(self, host):
        """The test watchdog device of ``host``'s agent: a plain file
        (its name must not start with "watchdog": the agent takes such a
        name for a real one and refuses it under the test suite)."""
        return self.workdir / ("wdt-%s.dev" % host)

    def nonce_file_of(self, host):
        """Where ``host``'s agent keeps its nonces (the host's /run: a
        new boot empties it, see :meth:`reboot`)."""
        return self.workdir / ("run-%s" % host) / "watchdog-nonces"

    def _watchdog_conf(self, host):
        wd = self.watchdog
        device = self.device_of(host)
        device.write_bytes(b"")
        self.nonce_file_of(host).parent.mkdir(exist_ok=True)
        peers = ["%s=%s:%d" % (h, a, self.peer_port)
                 for h, a in self.addresses.items() if h != host]
        return {
            "watchdog_device": str(device),
            "watchdog_timeout": str(int(wd["timeout"])),
            "isolation_timeout": str(wd["isolation"]),
            "watchdog_check_interval": str(wd.get("check_interval", 0.5)),
            "nonce_file": str(self.nonce_file_of(host)),
            "peers": ",".join(peers),
            "peer_address": "%s:%d" % (self.addresses[host], self.peer_port),
            "peer_key_file": str(self.peer_key_file),
        }

    # -- processes -----------------------------------------------------------
    def log_of(self, host):
        return self.workdir / ("instanceha-agent-%s.log" % host)

    def log_text(self, host):
        try:
            return self.log_of(host).read_text(errors="replace")
        except OSError:
            return ""

    def start(self, hosts=None, timeout=30):
        """Start the agents of ``hosts`` (default: every host) and wait
        until each has logged its start (keys read, sockets bound)."""
        if not AGENT_BIN.exists():
            raise PeerError("instanceha-agent", "no console script at %s "
                            "(is the project installed in its venv?)"
                            % AGENT_BIN, None)
        hosts = list(hosts or self.bed.hosts)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("OS_")}
        for host in hosts:
            proc = procs.Proc("instanceha-agent-%s" % host,
                              [AGENT_BIN, "--config-file",
                               self.conf_files[host]],
                              self.log_of(host), env=env)
            self.procs[host] = proc.start()
        for host in hosts:
            procs.wait_until(
                lambda: "agent.started" in self.log_text(host), timeout,
                "started", "instanceha-agent-%s" % host, self.log_of(host),
                procs=[self.procs[host]])
        return self

    def running(self, host):
        proc = self.procs.get(host)
        return proc is not None and proc.running()

    def check(self):
        """Raise PeerError if an agent that should run has exited."""
        for proc in self.procs.values():
            proc.check()

    def kill(self, host):
        """SIGKILL the host's agent (the host died with it)."""
        self.procs[host].kill(signal.SIGKILL)

    def boot(self, host, timeout=30):
        """``host`` boots again after a power loss: its /run is empty (no
        nonce kept from the last boot) and its agent starts."""
        try:
            self.nonce_file_of(host).unlink()
        except FileNotFoundError:
            pass
        return self.start([host], timeout=timeout)

    def stop(self):
        for proc in self.procs.values():
            proc.stop()
        if self.restarter is not None:
            self.restarter.close()
