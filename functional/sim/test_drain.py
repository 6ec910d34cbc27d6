"""Planned drain (issue 24) on the simulator: the real ``instanceha run``
drains a live host over HTTP (Nova's live and cold migrations, Placement,
Redfish), commanded through its operator API and its CLI as an operator
would. Each test asserts the state of the world: where the simulator has
every server and in which status, the compute service's status and
disabled_reason, the BMC's power, the migration records, the engine's
state and reason (``GET /status``), and the host's journal
(``GET /hosts/H/history``), both through its operator API.

Timings: the simulator's live and cold migrations take 1 s each; a drain
looks at its host every [drain] poll_interval (1 s here, the smallest it
takes). Every wait is on a condition with a budget that holds on a loaded
2-core machine (the engine starts in ~2.5 s idle and up to 30 s at a load
of 12: its budget is the harness's).
"""

import json

from functional import operator_api as op
from functional.sim.conftest import wait_for
from instanceha.util.marker import MARKER

#: what a drain writes in the disabled_reason (engine.drain.DRAIN_REASON)
DRAIN_MARK = MARKER + " draining"

#: [drain] for these tests: a pass every second
FAST_DRAIN = {"poll_interval": 1}


def _servers(c):
    return c.sim.snapshot()["servers"]


def _on(c, host):
    return {sid for sid, s in _servers(c).items() if s["host"] == host}


def _by_name(c, host):
    return {s["name"]: sid for sid, s in _servers(c).items()
            if s["host"] == host}


def _service(c, host):
    return c.sim.snapshot()["services"][host]


_api, _state, _settle = op.api, op.state, op.settle
_history, _path = op.history, op.path


def _moves(c, sid):
    """The simulator's live and cold migration records of a server."""
    return [m for m in c.sim.snapshot()["migrations"]
            if m["instance_uuid"] == sid
            and m["migration_type"] in ("live-migration", "migration")]


def _running_stalled(c, sids):
    """Every server of ``sids`` has a live migration running (stalled)."""
    snap = c.sim.snapshot()
    running = {m["instance_uuid"] for m in snap["migrations"]
               if m["migration_type"] == "live-migration"
               and m["status"] == "running"}
    return set(sids) <= running


def _no_move_under_way(c):
    return all(m["status"] in ("completed", "cancelled", "error",
                               "confirmed", "done", "failed")
               for m in c.sim.snapshot()["migrations"])


def _assert_safe(c):
    """Never a guest on two hosts; never an evacuate request for a server
    whose host was not powered off."""
    snap = c.sim.snapshot()
    assert snap["double_running"] == [], snap["double_running"]
    assert c.sim.unsafe_evacuate_requests() == []


# -- drain, maintenance, resume -----------------------------------------------

def test_drain_moves_active_paused_and_shutoff_servers_then_resume(
        make_cloud):
    c = make_cloud({"drain": FAST_DRAIN}, hosts=4, servers_per_host=3)
    names = _by_name(c, "compute-1")
    paused, stopped = names["compute-1-vm-1"], names["compute-1-vm-2"]
    c.sim.pause_server(paused)
    c.sim.stop_server(stopped)
    before = {sid: _servers(c)[sid]["status"] for sid in names.values()}
    assert sorted(before.values()) == ["ACTIVE", "PAUSED", "SHUTOFF"]
    c.start_engine()

    out = c.cli("drain", "compute-1", "--reason", "kernel update")
    assert out.returncode == 0, out.stderr
    assert "preflight: passed" in out.stdout, out.stdout
    state, reason = _settle(c, "compute-1", "maintenance", 120)
    assert reason.startswith("drained, in maintenance: 3/3 servers moved"), \
        reason

    servers = _servers(c)
    for sid, status in before.items():
        s = servers[sid]
        assert s["host"] not in ("compute-1", None), s
        assert s["status"] == status and s["task_state"] is None, s
    # Live for the running and the paused one, cold and confirmed for the
    # stopped one; each server moved once.
    kinds = {sid: [(m["migration_type"], m["status"]) for m in _moves(c, sid)]
             for sid in before}
    assert kinds[names["compute-1-vm-0"]] == [("live-migration",
                                               "completed")]
    assert kinds[paused] == [("live-migration", "completed")]
    assert kinds[stopped] == [("migration", "confirmed")]
    assert _on(c, "compute-1") == set()
    svc = _service(c, "compute-1")
    assert svc["status"] == "disabled", svc
    assert svc["disabled_reason"].startswith(DRAIN_MARK), svc
    assert c.sim.snapshot()["hosts"]["compute-1"]["power"] == "on"
    # Nothing else was touched.
    for host in ("compute-0", "compute-2", "compute-3"):
        assert _service(c, host)["status"] == "enabled"

    steps = _path(c, "compute-1")
    assert steps[-3:] == ["active", "draining", "maintenance"], steps
    drains = [e for e in _history(c, "compute-1")
              if e["kind"] == "action" and e["action"] == "drain"]
    assert [d["outcome"] for d in drains] == ["drain_ok"], drains
    draining = next(e for e in _history(c, "compute-1")
                    if e["kind"] == "transition" and e["to"] == "draining")
    assert "kernel update" in draining["reason"], draining

    out = c.cli("resume", "compute-1")
    assert out.returncode == 0, out.stderr
    _settle(c, "compute-1", "active", 60)
    svc = _service(c, "compute-1")
    assert svc["status"] == "enabled" and not svc["disabled_reason"], svc
    # Resumed without fail-back: the servers stay where the drain put them.
    servers = _servers(c)
    assert all(servers[sid]["host"] != "compute-1"
               and servers[sid]["status"] == status
               for sid, status in before.items()), servers
    assert _path(c, "compute-1")[-3:] == ["maintenance", "undraining",
                                          "active"]
    _assert_safe(c)


def test_history_names_each_server_the_drain_moved(make_cloud):
    c = make_cloud({"drain": FAST_DRAIN}, hosts=3, servers_per_host=2)
    moved = _on(c, "compute-1")
    c.start_engine()
    status, answer = _api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "history"})
    assert status == 202, answer
    _settle(c, "compute-1", "maintenance", 120)
    servers = _servers(c)
    assert all(servers[sid]["host"] != "compute-1" for sid in moved)
    text = json.dumps(_history(c, "compute-1"))
    missing = [(sid, servers[sid]["host"]) for sid in sorted(moved)
               if sid not in text]
    assert not missing, ("servers moved by the drain that its history "
                         "does not name: %s" % missing)


# -- a stuck live migration ---------------------------------------------------

def test_stuck_migration_is_aborted_retried_then_given_up(make_cloud):
    """[drain] stuck_timeout 2 s, stuck_retries 1: the stalled server's
    live migration is aborted twice (first try and one retry), then the
    server is left, named in the reason; the others move."""
    c = make_cloud({"drain": dict(FAST_DRAIN, stuck_timeout=2,
                                  stuck_retries=1)},
                   hosts=4, servers_per_host=3)
    names = _by_name(c, "compute-1")
    stuck = names["compute-1-vm-0"]
    c.sim.stall_migrations(server_id=stuck)
    c.start_engine()

    status, answer = _api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "firmware"})
    assert status == 202, answer
    state, reason = _settle(c, "compute-1", "maintenance", 180)
    assert "2/3 servers moved" in reason, reason
    assert "not migratable: %s" % stuck in reason, reason

    servers = _servers(c)
    assert servers[stuck]["host"] == "compute-1"
    assert servers[stuck]["status"] == "ACTIVE"
    assert servers[stuck]["task_state"] is None
    # Two live migrations (the try and its one retry), each aborted by
    # the engine: cancelled, none left running.
    assert [m["status"] for m in _moves(c, stuck)] == ["cancelled",
                                                       "cancelled"]
    for name in ("compute-1-vm-1", "compute-1-vm-2"):
        s = servers[names[name]]
        assert s["host"] != "compute-1" and s["status"] == "ACTIVE", s
    svc = _service(c, "compute-1")
    assert svc["status"] == "disabled"
    assert svc["disabled_reason"].startswith(DRAIN_MARK), svc
    maint = [e for e in _history(c, "compute-1")
             if e["kind"] == "transition" and e["to"] == "maintenance"]
    assert stuck in maint[-1]["reason"], maint
    _assert_safe(c)


# -- heartbeat loss mid-drain -------------------------------------------------

def _drain_until_two_stalled(c):
    """Drain compute-1 (four servers) with vm-2 and vm-3 stalling: returns
    ({vm-0, vm-1}, {vm-2, vm-3}) once the first two moved and the last two
    are mid-migration."""
    names = _by_name(c, "compute-1")
    early = {names["compute-1-vm-0"], names["compute-1-vm-1"]}
    late = {names["compute-1-vm-2"], names["compute-1-vm-3"]}
    for sid in late:
        c.sim.stall_migrations(server_id=sid)
    c.start_engine()
    status, answer = _api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "disk swap"})
    assert status == 202, answer
    wait_for(lambda: not (early & _on(c, "compute-1"))
             and _running_stalled(c, late), 120,
             lambda: "vm-0/1 moved and vm-2/3 stalled mid-migration "
                     "(servers %s)" % _servers(c))
    assert _state(c, "compute-1")[0] == "draining"
    return early, late


def _assert_fenced_and_rest_evacuated(c, early, late, moved_to):
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "off"
    servers = snap["servers"]
    for sid in early:
        assert servers[sid]["host"] == moved_to[sid], servers[sid]
    for sid in early | late:
        assert servers[sid]["host"] != "compute-1"
        assert servers[sid]["status"] == "ACTIVE", servers[sid]
    # Only what was left is evacuated, once each.
    evacuated = [m["instance_uuid"] for m in snap["migrations"]
                 if m["migration_type"] == "evacuation"]
    assert sorted(evacuated) == sorted(late), evacuated
    assert snap["double_running"] == []
    assert c.sim.unsafe_evacuate_requests() == []
    steps = _path(c, "compute-1")
    assert "draining" in steps, steps
    assert steps[steps.index("draining") + 1] == "suspect", steps
    assert "fenced" in steps and steps[-1] == "evacuated", steps
    fence = [e for e in _history(c, "compute-1")
             if e["kind"] == "action" and e["action"] == "fence"]
    assert fence and fence[-1]["outcome"] == "fence_ok", fence


def test_host_lost_mid_drain_is_fenced_and_the_rest_evacuated(make_cloud):
    """Two servers moved, two stalled mid-migration, then the host dies:
    the failure path takes it (fenced, powered off) and evacuates only
    the two left; what moved stays where it went. [drain] stuck_retries
    is high here so that the drain cannot give up on the two before the
    loss is seen (that race: the next test)."""
    c = make_cloud({"drain": dict(FAST_DRAIN, stuck_retries=30)},
                   hosts=4, servers_per_host=4)
    early, late = _drain_until_two_stalled(c)
    moved_to = {sid: _servers(c)[sid]["host"] for sid in early}

    c.sim.kill("compute-1")
    _settle(c, "compute-1", "evacuated", 120)
    # The stalled live migrations failed with their source (and so did
    # the retries the drain sent before the loss was seen).
    for sid in late:
        assert {m["status"] for m in _moves(c, sid)} == {"error"}
    _assert_fenced_and_rest_evacuated(c, early, late, moved_to)


def test_host_lost_mid_drain_before_the_engine_notices(make_cloud):
    """The same loss, with the engine's detection slower than the drain's
    passes (as with Nova's 60 s service_down_time against [drain]
    poll_interval 5 s x 3 tries): the host must still be handed to the
    failure path, not declared drained."""
    c = make_cloud({"drain": dict(FAST_DRAIN, stuck_retries=2),
                    "detection": {"delta": 15.0}},
                   hosts=4, servers_per_host=4)
    early, late = _drain_until_two_stalled(c)
    moved_to = {sid: _servers(c)[sid]["host"] for sid in early}

    c.sim.kill("compute-1")
    state, reason = c.engine.wait(
        lambda: c.states()["compute-1"][0] in ("evacuated", "maintenance")
        and c.states()["compute-1"], 120,
        "compute-1 evacuated (or, the bug, in maintenance)")
    assert state == "evacuated", (
        "a dead host was declared drained: %s; its power is %s, its "
        "servers %s" % (reason,
                        c.sim.snapshot()["hosts"]["compute-1"]["power"],
                        sorted(_on(c, "compute-1"))))
    _assert_fenced_and_rest_evacuated(c, early, late, moved_to)


# -- admission refusal --------------------------------------------------------

def test_refused_drain_changes_nothing_and_force_drains(make_cloud):
    """Two hosts: after a drain one is left, which cannot absorb the loss
    of the largest ([drain] ha_reserve_hosts 1), and one server carries
    the opt-out tag: 409 with both reasons, nothing changed. Forced, the
    drain moves what can move and leaves the tagged server, named."""
    c = make_cloud({"drain": FAST_DRAIN}, hosts=2, servers_per_host=2)
    names = _by_name(c, "compute-1")
    kept = names["compute-1-vm-1"]
    c.sim.set_metadata(kept, tags=["instanceha:no-drain"])
    c.start_engine()
    before = {sid: (s["host"], s["status"]) for sid, s in _servers(c).items()}

    status, answer = _api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "rack move"})
    assert status == 409, answer
    refusals = answer["preflight"]["refusals"]
    assert any("HA admission" in r for r in refusals), refusals
    assert any("compute-1-vm-1" in r for r in refusals), refusals
    assert len(refusals) >= 2, refusals
    for r in refusals:
        assert r in answer["error"], answer
    kinds = {r["kind"] for r in answer["preflight"]["reasons"]}
    assert {"admission", "opt_out"} <= kinds, kinds
    # Nothing changed: Nova, the engine, the journal.
    assert {sid: (s["host"], s["status"]) for sid, s in
            _servers(c).items()} == before
    assert not c.sim.snapshot()["migrations"]
    assert _service(c, "compute-1")["status"] == "enabled"
    assert _state(c, "compute-1")[0] == "active"
    assert "draining" not in _path(c, "compute-1")

    # The CLI says the same, as a refusal.
    out = c.cli("drain", "compute-1")
    assert out.returncode == 1, out.stdout
    assert "REFUSED" in out.stdout and "HA admission" in out.stdout, \
        out.stdout
    assert "refused (409)" in out.stderr, out.stderr
    assert _state(c, "compute-1")[0] == "active"

    out = c.cli("drain", "compute-1", "--force", "--reason", "rack move")
    assert out.returncode == 0, out.stderr
    state, reason = _settle(c, "compute-1", "maintenance", 120)
    assert "1/2 servers moved" in reason, reason
    assert "left: compute-1-vm-1" in reason, reason
    servers = _servers(c)
    assert servers[names["compute-1-vm-0"]]["host"] == "compute-0"
    assert servers[names["compute-1-vm-0"]]["status"] == "ACTIVE"
    assert servers[kept]["host"] == "compute-1"
    assert servers[kept]["status"] == "ACTIVE"
    assert not _moves(c, kept)
    svc = _service(c, "compute-1")
    assert svc["status"] == "disabled"
    assert svc["disabled_reason"].startswith(DRAIN_MARK)
    _assert_safe(c)


# -- cancel -------------------------------------------------------------------

def test_resume_mid_drain_aborts_and_reenables(make_cloud):
    """Two servers moved, two stalled mid-migration: ``instanceha resume``
    aborts the two, re-enables the host; every server stays ACTIVE where
    it is."""
    c = make_cloud({"drain": FAST_DRAIN}, hosts=4, servers_per_host=4)
    names = _by_name(c, "compute-1")
    early = {names["compute-1-vm-0"], names["compute-1-vm-1"]}
    late = {names["compute-1-vm-2"], names["compute-1-vm-3"]}
    for sid in late:
        c.sim.stall_migrations(server_id=sid)
    c.start_engine()

    out = c.cli("drain", "compute-1")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: not (early & _on(c, "compute-1"))
             and _running_stalled(c, late), 120,
             lambda: "vm-0/1 moved and vm-2/3 stalled mid-migration "
                     "(servers %s)" % _servers(c))
    assert _service(c, "compute-1")["disabled_reason"].startswith(
        DRAIN_MARK)
    moved_to = {sid: _servers(c)[sid]["host"] for sid in early}

    out = c.cli("resume", "compute-1", "--reason", "change window closed")
    assert out.returncode == 0, out.stderr
    state, reason = _settle(c, "compute-1", "active", 60)
    assert "2 migration(s) aborted" in reason, reason
    assert "compute service enabled" in reason, reason
    wait_for(lambda: _no_move_under_way(c), 30,
             lambda: "the aborted migrations to end (%s)"
             % c.sim.snapshot()["migrations"])
    svc = _service(c, "compute-1")
    assert svc["status"] == "enabled" and not svc["disabled_reason"], svc
    servers = _servers(c)
    for sid in late:
        assert servers[sid]["host"] == "compute-1", servers[sid]
        assert [m["status"] for m in _moves(c, sid)] == ["cancelled"]
    for sid in early:
        assert servers[sid]["host"] == moved_to[sid], servers[sid]
    for sid in early | late:
        assert servers[sid]["status"] == "ACTIVE", servers[sid]
        assert servers[sid]["task_state"] is None, servers[sid]
    steps = _path(c, "compute-1")
    assert steps[-3:] == ["draining", "undraining", "active"], steps
    _assert_safe(c)


# -- dry run ------------------------------------------------------------------

def test_dry_run_prints_the_plan_and_changes_nothing(make_cloud):
    c = make_cloud({"drain": FAST_DRAIN}, hosts=4, servers_per_host=3)
    names = _by_name(c, "compute-1")
    c.sim.stop_server(names["compute-1-vm-2"])
    c.start_engine()
    before = {sid: (s["host"], s["status"]) for sid, s in _servers(c).items()}

    out = c.cli("drain", "compute-1", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "preflight: passed", out.stdout
    steps = {ln.split()[1]: ln.split()[0] for ln in lines[1:]
             if ln.split() and ln.split()[1] in names}
    assert steps == {"compute-1-vm-0": "live", "compute-1-vm-1": "live",
                     "compute-1-vm-2": "cold"}, out.stdout

    assert {sid: (s["host"], s["status"]) for sid, s in
            _servers(c).items()} == before
    assert not c.sim.snapshot()["migrations"]
    svc = _service(c, "compute-1")
    assert svc["status"] == "enabled" and not svc["disabled_reason"], svc
    assert _state(c, "compute-1")[0] == "active"
    assert "draining" not in _path(c, "compute-1")


# -- fail-back ------------------------------------------------------------------

def test_resume_with_fail_back_moves_the_drained_servers_home(make_cloud):
    # The host comes back from maintenance; the servers the drain moved
    # are live-migrated back onto it, in order, by the drain's
    # concurrency; a server created elsewhere meanwhile is not moved.
    c = make_cloud({"drain": FAST_DRAIN}, hosts=4, servers_per_host=3)
    home = set(_by_name(c, "compute-1").values())
    c.start_engine()
    out = c.cli("drain", "compute-1", "--reason", "firmware")
    assert out.returncode == 0, out.stderr
    _settle(c, "compute-1", "maintenance", 120)
    assert _on(c, "compute-1") == set()
    elsewhere = {sid: _servers(c)[sid]["host"] for sid in home}

    out = c.cli("resume", "compute-1", "--fail-back")
    assert out.returncode == 0, out.stderr
    state, reason = _settle(c, "compute-1", "active", 120)
    assert "3/3 servers moved back" in reason, reason
    servers = _servers(c)
    for sid in home:
        s = servers[sid]
        assert (s["host"], s["status"], s["task_state"]) == (
            "compute-1", "ACTIVE", None), s
        # Two live migrations each: away to where the drain put it, then
        # back home, both completed.
        moves = [(m["migration_type"], m["status"], m["source_compute"],
                  m["dest_compute"]) for m in _moves(c, sid)]
        assert moves == [
            ("live-migration", "completed", "compute-1", elsewhere[sid]),
            ("live-migration", "completed", elsewhere[sid], "compute-1"),
        ], moves
    assert _on(c, "compute-1") == home
    svc = _service(c, "compute-1")
    assert svc["status"] == "enabled" and not svc["disabled_reason"], svc
    steps = _path(c, "compute-1")
    assert "failing_back" in steps and steps[-1] == "active", steps
    _assert_safe(c)
