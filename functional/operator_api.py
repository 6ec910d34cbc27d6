"""The engine's operator API as the functional tests read it: commands,
GET /status, a host's journal. Each function takes the engine's process
(functional.engine_process.EngineProcess) or a harness holding it as
``.engine``."""

import json


def _engine(where):
    return getattr(where, "engine", where)


def api(where, method, path, body=None):
    """(status, JSON answer) of the engine's operator API (unix socket)."""
    data = json.dumps(body).encode() if body is not None else None
    status, _, raw = _engine(where).api(
        method, path, body=data,
        headers={"Content-Type": "application/json"} if data else None,
        timeout=60)
    return status, json.loads(raw)


def state(where, host):
    """(state, reason) of the host in the engine's GET /status."""
    status, snap = api(where, "GET", "/status")
    assert status == 200, snap
    h = next(h for h in snap["hosts"] if h["name"] == host)
    return h["state"], h["reason"] or ""


def settle(where, host, wanted, timeout):
    """Wait for the host's state, then (state, reason) from GET /status."""
    _engine(where).wait_state(host, wanted, timeout=timeout)
    found = state(where, host)
    assert found[0] == wanted, found
    return found


def history(where, host):
    """Every entry of the host's journal, through the API, in order."""
    entries, marker = [], None
    while True:
        url = "/hosts/%s/history?limit=50" % host
        if marker:
            url += "&marker=" + marker
        status, page = api(where, "GET", url)
        assert status == 200, page
        entries.extend(page["entries"])
        marker = page["next_marker"]
        if marker is None:
            return entries


def path(where, host):
    """The host's states in its journal, in order (repeats dropped)."""
    steps = []
    for e in history(where, host):
        if e["kind"] != "transition":
            continue
        if not steps:
            steps.append(e["from"])
        if steps[-1] != e["to"]:
            steps.append(e["to"])
    return steps
