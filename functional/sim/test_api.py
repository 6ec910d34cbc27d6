"""The operator API of a real ``instanceha run`` process (cheroot + WebOb)
against the simulator: a host lost and recovered, then its history (unix
socket and CLI) and the recovery timings in /metrics (TCP) agree with the
journal and the world; a cross-site form post changes nothing; noauth on a
non-loopback address never starts; and by default no local process can
switch HA off over TCP: commands go through the unix socket."""

import json
import re
import subprocess
import sys
import urllib.request

from functional import httpcall


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def _post(url, body, ctype):
    status, _, raw = httpcall.request(url, "POST", body,
                                      {"Content-Type": ctype})
    return status, raw


def _metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def test_history_and_timings_of_a_recovered_host(make_cloud):
    c = make_cloud()
    c.start_engine()
    api = c.status()["api"]
    victims = {sid for sid, s in c.sim.snapshot()["servers"].items()
               if s["host"] == "compute-1"}
    assert victims
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated", timeout=60)
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "off"
    for sid in victims:
        assert snap["servers"][sid]["host"] != "compute-1"

    # History over the unix socket, two pages, equal to the journal's rows.
    entries, marker = [], None
    while True:
        url = "/hosts/compute-1/history?limit=5"
        if marker:
            url += "&marker=" + marker
        status, _, body = c.engine.api("GET", url)
        assert status == 200
        page = json.loads(body)
        entries.extend(page["entries"])
        marker = page["next_marker"]
        if marker is None:
            break
    with c.engine.reading_journal() as j:
        host_id = page["host_id"]
        rows = (len(j.transitions(host_id)) + len(j.actions(host_id))
                + len(j.evacuations(host_id)))
        done = [r for r in j.evacuations(host_id) if r["status"] == "done"]
        entered = {t["dst"]: t["at"] for t in
                   reversed(j.transitions(host_id))}
    assert len(entries) == rows > 5
    assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
    moved = {e["server_id"]: e["dest_host"] for e in entries
             if e["kind"] == "evacuation" and e["status"] == "done"}
    assert moved == {sid: snap["servers"][sid]["host"] for sid in victims}

    # The CLI reads the same journal.
    out = c.cli("history", "compute-1", "--json")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == entries
    out = c.cli("history", "compute-1")
    assert "suspect -> fencing" in out.stdout
    assert "fencing -> fenced" in out.stdout

    # Timings: one detection and one isolation, one evacuation per server.
    status, body = _get(api + "/metrics")
    text = body.decode()
    assert _metric(text, "instanceha_detection_to_fenced_seconds_count") \
        == 1
    assert abs(_metric(text, "instanceha_detection_to_fenced_seconds_sum")
               - (entered["fenced"] - entered["suspect"])) < 1e-6
    assert _metric(text, "instanceha_fenced_to_isolated_seconds_count") == 1
    assert _metric(text, "instanceha_evacuation_seconds_count") == len(done)
    assert len(done) == len(victims)


def test_a_form_post_changes_nothing_and_json_does(make_cloud):
    """Commands over loopback TCP without authentication, as an operator
    may explicitly allow: a browser's cross-site post still cannot act."""
    c = make_cloud({"api": {"allow_unauthenticated_tcp": True}})
    c.start_engine()
    api = c.status()["api"]
    url = api + "/hosts/compute-2/suspend"
    for ctype, body in [
            ("application/x-www-form-urlencoded", b"reason=x&forever=true"),
            ("text/plain", b'{"reason": "x", "forever": true}'),
            ("multipart/form-data; boundary=b",
             b'--b\r\nContent-Disposition: form-data; name="reason"\r\n\r\n'
             b"x\r\n--b--\r\n")]:
        status, answer = _post(url, body, ctype)
        assert status == 415, answer
    assert c.states()["compute-2"][0] == "active"
    status, answer = _post(url, b'{"reason": "x", "forever": true}',
                           "application/json")
    assert status == 202, answer
    c.wait_state("compute-2", "suspended", timeout=10)
    status, answer = _post(api + "/hosts/nope/suspend",
                           b'{"forever": true}', "application/json")
    assert status == 404 and b"unknown host 'nope'" in answer


def test_noauth_on_a_public_address_never_starts(make_cloud):
    c = make_cloud({"api": {"listen_address": "0.0.0.0"}})
    out = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "run",
         "--config-file", c.conf_path],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == ["instanceha: configuration error: [api] auth_strategy "
                     "= noauth is only allowed on a loopback listen_address"
                     ", not 0.0.0.0: set [api] auth_strategy = keystone "
                     "(and [keystone_authtoken]) or listen on 127.0.0.1"]
    snap = c.sim.snapshot()
    assert all(h["power"] == "on" for h in snap["hosts"].values())


def _tcp_post(api, path, body=b'{"reason": "x", "forever": true}'):
    return _post(api + path, body, "application/json")


def test_by_default_no_local_process_switches_ha_off_over_tcp(make_cloud):
    """The engine as configured by default (the socket in a directory of
    its own, loopback TCP without authentication): any process on the
    machine reaches the TCP port, but it only reads health and metrics
    there. Suspending a host for ever, maintenance and lifting a storm
    hold are refused 403; the host is recovered when it dies. The CLI
    commands through the socket."""
    c = make_cloud()
    c.start_engine()
    api = c.status()["api"]
    for path in ("/hosts/compute-1/suspend", "/hosts/compute-1/maintenance",
                 "/storm/resume"):
        status, answer = _tcp_post(api, path)
        assert status == 403, (path, answer)
        assert b"use the unix socket" in answer
    for path in ("/status", "/hosts/compute-1/history"):
        assert httpcall.request(api + path)[0] == 403
    assert _get(api + "/healthz")[0] == 200
    status, body = _get(api + "/metrics")
    assert status == 200 and b"instanceha_hosts" in body
    assert c.states()["compute-1"][0] == "active"

    out = c.cli("suspend", "compute-2", "--forever", "--reason", "psu")
    assert out.returncode == 0, out.stderr
    c.wait_state("compute-2", "suspended", timeout=10)

    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated", timeout=60)
    assert c.sim.snapshot()["hosts"]["compute-1"]["power"] == "off"
    # The simulator's config sets [api] port: the operator is told where
    # commands went and what keeps them on TCP.
    log = c.engine.log_text()
    assert "api_listener_warning" in log
    assert "allow_unauthenticated_tcp = true" in log


def test_a_missing_socket_directory_stops_the_start(make_cloud, tmp_path):
    """The default socket's directory is systemd's RuntimeDirectory; where
    it is missing the start stops with one line saying what makes it,
    having done nothing."""
    path = tmp_path / "no-such-dir" / "api.sock"
    c = make_cloud({"api": {"unix_socket": str(path)}})
    out, took = c.engine.run_to_exit(timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines()
             if line.startswith("instanceha:")]
    assert "Traceback" not in out.stderr
    assert lines == ["instanceha: cannot start: operator API: [api] "
                     "unix_socket %s: directory %s: No such file or "
                     "directory (systemd's RuntimeDirectory=instanceha "
                     "makes /run/instanceha; else create a directory of "
                     "mode 0750 owned by the service's user, or set [api] "
                     "unix_socket)" % (path, path.parent)], out.stderr
    snap = c.sim.snapshot()
    assert all(h["power"] == "on" for h in snap["hosts"].values())
    assert not snap["migrations"]
