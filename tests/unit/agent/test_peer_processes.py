"""Peer witnesses with real agent processes (issue 37, section 1): three
instanceha-agent processes without a watchdog, each the peer of the
others on loopback, beat to a sink playing the engine. Their beats say
which peers answer their probes; a peer killed becomes unheard within its
window, the others stay heard."""

import signal
import socket
import subprocess
import sys
import time

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.agent.test_main import TOP, write_conf
from tests.unit.heartbeat import helpers as hb

NAMES = ["compute-1", "compute-2", "compute-3"]
#: a budget that holds on a loaded 2-core machine
BUDGET = 60.0


def _free_ports(count):
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _start(tmp_path, sink_port):
    key = hb.write_key(tmp_path / "agent.key")
    peer_key = hb.write_key(tmp_path / "peer.key", secret=b"p" * 40)
    ports = dict(zip(NAMES, _free_ports(len(NAMES))))
    procs = {}
    for name in NAMES:
        where = tmp_path / name
        where.mkdir()
        conf = write_conf(
            where, key, engines="127.0.0.1:%d" % sink_port,
            interval="0.2", paths="lo=127.0.0.1", guest_events="false",
            peers=",".join("%s=127.0.0.1:%d" % (n, ports[n])
                           for n in NAMES if n != name),
            peer_address="127.0.0.1:%d" % ports[name],
            peer_key_file=str(peer_key), peer_interval="0.2",
            peer_window="0.8")
        text = conf.read_text().replace("host = compute-1",
                                        "host = %s" % name)
        conf.write_text(text)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "instanceha.agent.main",
             "--config-file", str(conf)], cwd=TOP,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return procs


def _heard_by(beat):
    """{peer digest: heard} of a beat's report."""
    report = beat.watchdog
    return dict(zip(report.peers, report.hearing))


def _wait_for(sink, host, want, budget=BUDGET):
    """The first beat of ``host`` whose hearing matches ``want`` ({peer
    name: heard}), within ``budget`` seconds."""
    ring = keys.Keyring(hb.KEY)
    want = {protocol.name_digest(n): v for n, v in want.items()}
    end = time.monotonic() + budget
    last = None
    while time.monotonic() < end:
        beat = protocol.decode(sink.recv(2048), ring)
        if beat.host != host or beat.watchdog is None \
                or beat.watchdog.hearing is None:
            continue
        last = _heard_by(beat)
        if all(last.get(d) == v for d, v in want.items()):
            return beat
    raise AssertionError("no beat of %s with %r in %.0f s; last %r"
                         % (host, want, budget, last))


def test_agents_report_which_peers_answer_and_a_killed_one_goes_unheard(
        tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(BUDGET)
        procs = _start(tmp_path, sink.getsockname()[1])
        try:
            beat = _wait_for(sink, "compute-1",
                             {"compute-2": True, "compute-3": True})
            assert beat.watchdog.state == protocol.WATCHDOG_NONE
            assert beat.watchdog.hearing_window == 0.8
            procs["compute-2"].send_signal(signal.SIGKILL)
            procs["compute-2"].wait(timeout=BUDGET)
            _wait_for(sink, "compute-1",
                      {"compute-2": False, "compute-3": True})
            _wait_for(sink, "compute-3",
                      {"compute-2": False, "compute-1": True})
        finally:
            errs = {}
            for name, proc in procs.items():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                errs[name] = proc.communicate(timeout=BUDGET)[1]
    for name in ("compute-1", "compute-3"):
        assert procs[name].returncode == 0, errs[name]
        assert "agent.peers_chosen" in errs[name]
