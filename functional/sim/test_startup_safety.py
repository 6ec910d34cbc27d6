"""The real ``instanceha run`` on the simulator: a start that cannot finish
acts on nothing, a configuration typo stops the start, and an operator's
suspension never becomes endless by accident."""

import json
import socket
import subprocess
import sys
import time

from functional import httpcall
from instanceha.events import Event, EventKind as E
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import State


def _run(cloud, timeout=30):
    """``instanceha run`` that is expected to stop by itself."""
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "run",
         "--config-file", cloud.conf_path],
        capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - started


def _journal_fenced(cloud, host):
    """The journal a crashed instanceha left: ``host`` fenced, not yet
    isolated (a start would force its service down in Nova at once)."""
    uuid = cloud.sim.snapshot()["services"][host]["id"]
    journal = cloud.journal()
    try:
        now = time.time()
        journal.record_transition(
            HostRecord(id=uuid, name=host),
            HostRecord(id=uuid, name=host, state=State.FENCED, since=now,
                       reason="power off confirmed", heartbeat_ok=False,
                       lost_at=now - 10, fenced_at=now),
            Event(E.HEARTBEAT_LOST, uuid, now, name=host,
                  reason="heartbeat lost"))
        assert journal.latest()[uuid]["state"] == "fenced"
        return uuid
    finally:
        journal.close()


def _nothing_done(cloud, host, uuid):
    snap = cloud.sim.snapshot()
    assert snap["hosts"][host]["power"] == "on"
    assert not any(s["forced_down"] or s["status"] != "enabled"
                   for s in snap["services"].values()), snap["services"]
    assert not snap["migrations"]
    journal = cloud.journal()
    try:
        assert journal.latest()[uuid]["state"] == "fenced"
        assert journal.actions() == []
    finally:
        journal.close()


def test_api_port_taken_stops_the_start_before_the_journalled_work(
        make_cloud):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        c = make_cloud({"api": {"listen_address": "127.0.0.1",
                                "port": port}})
        uuid = _journal_fenced(c, "compute-1")
        out, took = _run(c)
    finally:
        taken.close()
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert took < 20, took
    assert "Traceback" not in text
    naming = [line for line in text.splitlines() if str(port) in line]
    assert naming == ["instanceha: cannot start: operator API: cannot bind "
                      "127.0.0.1:%d: [Errno 98] Address already in use"
                      % port], text
    time.sleep(1)   # a Nova write already sent would show by now
    _nothing_done(c, "compute-1", uuid)


def test_kdump_port_taken_stops_the_start_too(make_cloud):
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        c = make_cloud({"kdump": {"enabled": True,
                                  "listen_address": "127.0.0.1",
                                  "port": port}})
        uuid = _journal_fenced(c, "compute-1")
        out, _ = _run(c)
    finally:
        taken.close()
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("instanceha: cannot start: kdump listener: cannot bind "
            "127.0.0.1:%d: " % port) in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    time.sleep(1)
    _nothing_done(c, "compute-1", uuid)


def test_a_misspelt_option_stops_the_start(make_cloud):
    c = make_cloud({"policy": {"treshold": 10}})
    out, took = _run(c)
    assert out.returncode == 2, out.stdout + out.stderr
    assert took < 20
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("instanceha: configuration error: ")
    assert "[policy] unknown option 'treshold'" in lines[0]
    assert "did you mean 'threshold'?" in lines[0]
    assert c.status() == {"hosts": []}    # it never ran


def _post(cloud, host, verb, raw):
    url = "%s/hosts/%s/%s" % (cloud.status()["api"], host, verb)
    status, _, body = httpcall.request(
        url, "POST", raw, {"Content-Type": "application/json"})
    return status, json.loads(body)


def test_suspension_needs_a_valid_length_or_an_explicit_forever(make_cloud):
    c = make_cloud({"api": {"allow_unauthenticated_tcp": True}})
    c.start_engine()
    for value in ("0", "nan", "inf", "-5"):
        out = c.cli("suspend", "compute-1", "--seconds", value)
        assert out.returncode != 0, (value, out.stdout)
        assert "positive, finite" in out.stderr, (value, out.stderr)
    out = c.cli("suspend", "compute-1", "--reason", "disk swap")
    assert out.returncode != 0
    assert "give --seconds N or --forever" in out.stderr
    out = c.cli("suspend", "compute-1", "--seconds", "60", "--forever")
    assert out.returncode != 0 and "not allowed" in out.stderr
    for raw in (b'{"seconds": NaN}', b'{"seconds": Infinity}',
                b'{"seconds": 0}', b'{"reason": "no length"}'):
        status, answer = _post(c, "compute-1", "suspend", raw)
        assert status == 400, (raw, answer)
    time.sleep(1)   # a command the engine had accepted would show by now
    assert c.states()["compute-1"][0] == "active"
    journal = c.journal()
    try:
        assert all(t["dst"] != "suspended" for t in journal.transitions())
    finally:
        journal.close()

    out = c.cli("suspend", "compute-1", "--forever", "--reason", "rack move")
    assert out.returncode == 0, out.stderr
    assert "until 'instanceha resume compute-1'" in out.stdout
    c.wait_state("compute-1", "suspended")
    c.sim.kill("compute-1")
    time.sleep(8)       # detection + grace several times over
    assert c.states()["compute-1"][0] == "suspended"
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "on"
    assert not snap["services"]["compute-1"]["forced_down"]
    assert not snap["migrations"]


def test_suspension_for_seconds_says_until_when(make_cloud):
    c = make_cloud({"api": {"allow_unauthenticated_tcp": True}})
    c.start_engine()
    before = time.time()
    out = c.cli("suspend", "compute-2", "--seconds", "3600")
    assert out.returncode == 0, out.stderr
    assert "until 20" in out.stdout, out.stdout
    assert "(in 60m)" in out.stdout or "(in 59m)" in out.stdout, out.stdout
    c.wait_state("compute-2", "suspended")
    status, answer = _post(c, "compute-3", "suspend", b'{"seconds": 120}')
    assert status == 202
    assert before + 120 <= answer["until"] <= time.time() + 120
    assert answer["still_running"] is None
