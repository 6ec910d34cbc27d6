"""A backend that does not answer when ``instanceha run`` starts (issue 21,
hole 5): after a site power loss Keystone, Nova or the journal database may
come up after instanceha. The real process waits for it, says what it waits
for (status file, /healthz, /readyz), acts on nothing meanwhile, and
recovers a dead host once the backend answers. Before, it exited with
status 2, which systemd never restarts (RestartPreventExitStatus=2).

The replicas' backend (Redis) is covered in functional/test_coordination.py.
"""

import json
import os
import socket
import threading
import urllib.parse

from functional import waiting
from functional.engine_process import EngineProcess
from functional.httpcall import request
from functional.test_coordination import journal_url  # noqa: F401 fixture
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer


def _get(status, path):
    code, _, body = request(status["api"] + path)
    return code, json.loads(body)


def _waiting_for(engine, prefix):
    """The status file's 'starting' once it names ``prefix`` and at least
    two attempts (a back-off was taken)."""
    def check():
        starting = engine.status().get("starting") or {}
        return starting.get("waiting_for", "").startswith(prefix) \
            and starting.get("attempts", 0) >= 2 and starting
    return waiting.wait_for(check, 30, lambda: "the status to say it waits "
                            "for %s (log %s)" % (prefix, engine.log_path))


def _says_it_waits(engine, prefix):
    starting = _waiting_for(engine, prefix)
    status = engine.status()
    code, health = _get(status, "/healthz")
    assert code == 200, health
    assert health["reason"].startswith("starting: waiting for " + prefix)
    code, ready = _get(status, "/readyz")
    assert code == 503 and ready["role"] == "starting", ready
    assert engine.proc.poll() is None
    return starting


def _recovers(engine, sim, host="compute-1"):
    """Every host seen, nothing awaited any more; then ``host`` dies and is
    evacuated, each of its servers once."""
    engine.wait(lambda: len(engine.states()) == len(sim.hosts)
                and "starting" not in engine.status(), 60,
                "the engine to see every host")
    assert "backend_reached" in engine.log_text()
    victims = [s.id for s in sim.servers.values() if s.host == host]
    sim.kill(host)
    engine.wait_state(host, "evacuated", timeout=60)
    calls = sim.snapshot()["evacuate_calls"]
    assert sorted(s for s in calls if s in victims) == sorted(victims)
    assert all(calls[s] == 1 for s in victims)


def test_nova_down_at_start_is_waited_for_then_the_engine_acts(tmp_path):
    """Keystone and Nova (the simulator's API) not listening at start."""
    sim = SimCloud(hosts=3, servers_per_host=2, evacuation_time=0.2)
    server = SimServer(sim).start()
    port = server.port
    conf = simrun.write_config(str(tmp_path), server, {
        "DEFAULT": {"startup_retry_max_interval": 2}})
    server.stop()
    engine = EngineProcess(tmp_path, conf, str(tmp_path / "status.json"),
                           "sqlite:///%s" % (tmp_path / "journal.sqlite"))
    again = None
    try:
        engine.start(0, timeout=30)
        starting = _says_it_waits(engine, "Nova (cloud sim)")
        assert "cannot" in starting["error"], starting
        assert sim.snapshot()["evacuate_calls"] == {}
        again = SimServer(sim, port=port).start()
        _recovers(engine, sim)
    finally:
        engine.stop()
        if again is not None:
            again.stop()


class Forwarder:
    """A TCP port that forwards to ``target`` once started: the journal
    database 'comes up' when this starts listening."""

    def __init__(self, target):
        self.target = target
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._listener = None
        self._stop = threading.Event()

    def start(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(16)
        ls.settimeout(0.2)
        self._listener = ls
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b),
                                 daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        self._stop.set()
        if self._listener is not None:
            self._listener.close()


def test_journal_database_down_at_start_is_waited_for_then_the_engine_acts(
        tmp_path, journal_url):  # noqa: F811 - the fixture
    """The journal on MariaDB (else PostgreSQL), reached through a port
    that listens only later."""
    url = urllib.parse.urlsplit(journal_url)
    forwarder = Forwarder((url.hostname, url.port))
    late_url = journal_url.replace("%s:%d" % (url.hostname, url.port),
                                   "127.0.0.1:%d" % forwarder.port)
    sim = SimCloud(hosts=3, servers_per_host=2, evacuation_time=0.2)
    server = SimServer(sim).start()
    conf = simrun.write_config(str(tmp_path), server, {
        "DEFAULT": {"startup_retry_max_interval": 2},
        "journal": {"connection": late_url}})
    engine = EngineProcess(tmp_path, conf, str(tmp_path / "status.json"),
                           journal_url)
    try:
        engine.start(0, timeout=30)
        starting = _says_it_waits(engine, "the journal database")
        assert str(forwarder.port) in starting["waiting_for"], starting
        assert sim.snapshot()["evacuate_calls"] == {}
        forwarder.start()
        _recovers(engine, sim)
        # The journal it waited for is the one it wrote.
        with engine.reading_journal() as j:
            assert any(t["dst"] == "evacuated" for t in j.transitions())
    finally:
        engine.stop()
        forwarder.stop()
        server.stop()
    assert not os.path.exists(tmp_path / "journal.sqlite")
