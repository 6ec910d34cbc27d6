"""The simulated hosts' heartbeat agents over real UDP on loopback, as
``simrun`` sets them up for an engine: the test binds the engine's
listener itself and decodes the beats with the heartbeat protocol (no
engine runs). A dead host falls silent; a host whose nova-compute died
beats on and says so; a signed restart request brings nova-compute back.

Budgets: beats every 0.2 s; waits of 10-20 s, which a loaded 2-core
machine meets with a wide margin.
"""

import collections
import configparser
import socket
import threading
import time

import pytest

from functional import waiting
from instanceha import simrun
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

INTERVAL = 0.2


class Listener:
    """The engine's heartbeat port as the test sees it: every beat
    received, decoded, with its source address."""

    def __init__(self, port, keyring):
        self.keyring = keyring
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.lock = threading.Lock()
        self.beats = []             # (monotonic time, source, Beat)
        self.dropped = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                data, source = self.sock.recvfrom(protocol.MAX_SIZE + 1)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                beat = protocol.decode(data, self.keyring)
            except protocol.Dropped as e:
                self.dropped[e.reason] += 1
                continue
            with self.lock:
                self.beats.append((time.monotonic(), source, beat))

    def since(self, t, host=None):
        with self.lock:
            return [(s, b) for at, s, b in self.beats
                    if at >= t and (host is None or b.host == host)]

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def bed(tmp_path):
    cloud = SimCloud(hosts=3, servers_per_host=2, boot_time=1.0)
    srv = SimServer(cloud).start()
    setup = simrun.agent_setup(str(tmp_path), two_paths=True,
                               interval=INTERVAL)
    conf_path = simrun.write_config(str(tmp_path), srv, agents=setup)
    listener = Listener(setup.listen_port,
                        keys.load_keyring(setup.key_file))
    agents = SimAgents(cloud, **setup.sim_args()).start()
    yield cloud, agents, listener, setup, conf_path
    agents.stop()
    listener.close()
    srv.stop()


def test_the_engine_is_configured_to_hear_the_agents(bed):
    _, agents, _, setup, conf_path = bed
    parser = configparser.RawConfigParser()
    parser.read(conf_path)
    assert parser.get("agent", "listen_addresses") == \
        "127.0.0.1:%d" % setup.listen_port
    assert parser.get("agent", "key_file") == setup.key_file
    assert parser.getint("agent", "request_port") == setup.request_port
    assert agents.request_addresses == [("127.0.0.1", setup.request_port),
                                        ("127.0.0.2", setup.request_port)]


def test_every_host_beats_on_both_paths_from_their_addresses(bed):
    cloud, _, listener, _, _ = bed
    t = time.monotonic()

    def all_seen():
        seen = {(b.host, b.path, s[0]) for s, b in listener.since(t)}
        return seen >= {(h, p, a) for h in cloud.hosts for p, a in (
            ("mgmt", "127.0.0.1"), ("storage", "127.0.0.2"))}

    waiting.wait_for(all_seen, 10, "beats from every host on both paths")
    assert not listener.dropped


def test_a_dead_host_falls_silent_the_others_beat_on(bed):
    cloud, _, listener, _, _ = bed
    t = time.monotonic()
    waiting.wait_for(lambda: listener.since(t, "compute-1"), 10,
                     "compute-1's beats")
    cloud.kill("compute-1")
    # Whatever was on its way has arrived within a second.
    time.sleep(1.0)
    quiet = time.monotonic()
    waiting.wait_for(
        lambda: len(listener.since(quiet, "compute-0")) >= 10, 15,
        "compute-0's beats going on")
    assert listener.since(quiet, "compute-1") == []


def test_a_dead_compute_beats_on_and_says_so(bed):
    cloud, _, listener, _, _ = bed
    cloud.kill_compute("compute-2")
    t = time.monotonic()

    def down_reported():
        return [b for _, b in listener.since(t, "compute-2")
                if b.facts.compute is False and b.facts.libvirt is True]

    waiting.wait_for(lambda: len(down_reported()) >= 6, 15,
                     "beats of compute-2 saying compute down")
    beats = down_reported()
    assert {b.path for b in beats} == {"mgmt", "storage"}
    assert cloud.snapshot()["hosts"]["compute-2"]["power"] == "on"


def test_a_signed_request_restarts_the_simulated_compute(bed):
    cloud, agents, listener, setup, _ = bed
    cloud.kill_compute("compute-1")
    t = time.monotonic()
    # Where an engine sends it: the source address of the host's beats,
    # at the request port.
    source, _ = waiting.wait_for(
        lambda: listener.since(t, "compute-1"), 10, "compute-1's beats")[0]
    keyring = keys.load_keyring(setup.key_file)
    now = time.time()
    data = protocol.encode_request(protocol.Request(
        kind=protocol.RESTART_COMPUTE, host="compute-1",
        seq=protocol.request_seq(now), sent_at=now,
        reason="functional test: compute down, host beating"),
        keyring.current)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(data, (source[0], setup.request_port))
    waiting.wait_for(
        lambda: cloud.snapshot()["hosts"]["compute-1"]["compute_alive"],
        15, "compute-1's nova-compute running again")
    assert agents.dispatcher.counts["accepted"] == 1
    t = time.monotonic()
    waiting.wait_for(
        lambda: any(b.facts.compute for _, b in
                    listener.since(t, "compute-1")), 10,
        "compute-1's beats saying compute up")


def test_a_forged_request_restarts_nothing(bed):
    cloud, agents, _, setup, _ = bed
    cloud.kill_compute("compute-1")
    now = time.time()
    forged = protocol.encode_request(protocol.Request(
        kind=protocol.RESTART_COMPUTE, host="compute-1",
        seq=protocol.request_seq(now), sent_at=now, reason="forged"),
        keys.Key.from_secret(b"f" * 32))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(forged, ("127.0.0.1", setup.request_port))
    waiting.wait_for(lambda: agents.dispatcher.counts["unknown_key"], 10,
                     "the forged request dropped")
    time.sleep(cloud.boot_time + 0.5)
    assert not cloud.snapshot()["hosts"]["compute-1"]["compute_alive"]
