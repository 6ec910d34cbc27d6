"""Cascades on the simulator: a host dies, and destinations of its
evacuation die during the rebuild. The real engine, real timing, 20 hosts."""

import collections
import time

from functional.sim.conftest import wait_for
from instanceha.drills import world

VICTIM = "compute-7"
#: Long enough that the host's failure is not a timeout of the stuck
#: rebuilds (what today's code ends with), short enough for a test.
OVERRIDES = {"evacuation": {"stall_timeout": 5.0, "server_retry_delay": 0.5,
                            "server_timeout": 60.0}}


def _servers_of(cloud, host):
    return world.servers_on(cloud.sim, host)


def _dead_hosts(cloud):
    return world.computes_down(cloud.sim, besides={VICTIM})


def test_destinations_dying_mid_rebuild_are_retried_and_host_evacuated(
        make_cloud):
    c = make_cloud(OVERRIDES, hosts=20, servers_per_host=4,
                   evacuation_time=0.5)
    c.start_engine()
    victims = _servers_of(c, VICTIM)
    # The scheduler sends the first server to a host that dies as the
    # rebuild is cast to it (not yet seen down: it never takes it), the
    # second to one that dies once it has claimed it (during the rebuild).
    c.sim.kill_next_destinations(1, stage="cast")
    c.sim.kill_next_destinations(1, stage="claim")
    t0 = time.monotonic()
    c.sim.kill(VICTIM)
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=90)
    elapsed = time.monotonic() - t0
    dead = _dead_hosts(c)
    assert len(dead) == 2, dead
    assert "2 sent again after a failure" in reason, reason
    # The dead destinations get their own recovery.
    for host in dead:
        c.wait_state(host, "evacuated", timeout=60)
    snap = c.sim.snapshot()
    gone = {VICTIM, *dead}
    for sid in victims:
        s = snap["servers"][sid]
        assert s["status"] == "ACTIVE" and s["task_state"] is None, s
        assert s["host"] not in gone and \
            snap["hosts"][s["host"]]["compute_alive"], s
    for s in snap["servers"].values():      # every server of the cloud
        assert s["status"] == "ACTIVE" and s["host"] not in gone, s
    # Never rebuilt on two hosts at once.
    c.sim.now()
    assert c.sim.double_rebuilds == []
    # The journal says which were sent again, and why.
    j = c.journal()
    steps = [t["dst"] for t in j.transitions() if t["host_name"] == VICTIM]
    assert "failed" not in steps and steps[-1] == "evacuated", steps
    rows = collections.defaultdict(list)
    for e in j.evacuations():
        if e["host_name"] == VICTIM:
            rows[e["server_id"]].append(e)
    retried = {sid: r for sid, r in rows.items()
               if any(x["status"] == "retry" for x in r)}
    assert len(retried) == 2
    details = sorted(x["detail"] for r in retried.values() for x in r
                     if x["status"] == "retry")
    assert any("went down during the rebuild" in d for d in details), details
    assert any("no compute took the rebuild" in d for d in details), details
    for sid, r in rows.items():
        assert [x["status"] for x in r][-1] == "done", r
    print("cascade: %s evacuated in %.1fs, destinations %s died mid-rebuild"
          % (VICTIM, elapsed, dead))


def test_restart_while_a_rebuild_is_stuck_on_a_dead_destination(make_cloud):
    """The engine stops while a server's rebuild is stuck on a destination
    that died; the next engine waits for it instead of sending it again,
    then sends it once that destination is fenced."""
    c = make_cloud(dict(OVERRIDES, detection={"grace_period": 6.0}),
                   hosts=20, servers_per_host=3, evacuation_time=0.5)
    c.start_engine()
    victims = _servers_of(c, VICTIM)
    c.sim.kill_next_destinations(1, stage="claim")
    c.sim.kill(VICTIM)

    def stuck():
        snap = c.sim.snapshot()
        return [m for m in snap["migrations"]
                if m["instance_uuid"] in victims
                and m["status"] == "pre-migrating"
                and not snap["hosts"][m["dest_compute"]]["compute_alive"]]
    wait_for(stuck, 30, "a rebuild stuck on a dead destination")
    c.stop_engine()                   # before that destination is fenced
    dead = _dead_hosts(c)
    assert c.sim.snapshot()["services"][dead[0]]["forced_down"] is False
    c.start_engine()
    c.wait_state(VICTIM, "evacuated", timeout=90)
    c.wait_state(dead[0], "evacuated", timeout=60)
    snap = c.sim.snapshot()
    for sid in victims:
        s = snap["servers"][sid]
        assert s["status"] == "ACTIVE" and s["host"] not in (VICTIM, dead[0])
    c.sim.now()
    assert c.sim.double_rebuilds == []
    # Sent twice in all: the stuck request, then one retry after the
    # fencing (never a second request while the first could still run).
    per_server = collections.Counter(
        m["instance_uuid"] for m in snap["migrations"]
        if m["instance_uuid"] in victims)
    assert sorted(per_server.values()) == [1] * (len(victims) - 1) + [2]


def test_returning_destination_runs_its_old_rebuild_and_the_server_is_repaired(
        make_cloud):
    """A destination that died as the rebuild was cast to it keeps the
    rebuild in its queue. The server is rebuilt elsewhere; when that host
    comes back its compute runs the old rebuild, which fails on the changed
    task state and sets the server to error while it runs elsewhere. The
    host's cleanup check must repair that before putting it back."""
    c = make_cloud(OVERRIDES, hosts=20, servers_per_host=4,
                   evacuation_time=0.5)
    c.start_engine()
    victims = _servers_of(c, VICTIM)
    c.sim.kill_next_destinations(2, stage="cast")
    c.sim.kill(VICTIM)
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=90)
    dead = _dead_hosts(c)
    assert len(dead) == 2 and "2 sent again after a failure" in reason, \
        (dead, reason)
    for host in dead:
        c.wait_state(host, "evacuated", timeout=60)
    snap = c.sim.snapshot()
    moved = {sid: snap["servers"][sid]["host"] for sid in victims}
    assert all(h not in (VICTIM, *dead) for h in moved.values()), moved
    # The two dead destinations come back: their old rebuilds run.
    for host in dead:
        c.sim.power(host, True)
    reasons = [c.wait_state(host, "active", timeout=60)[1] for host in dead]
    snap = c.sim.snapshot()
    for sid in victims:
        s = snap["servers"][sid]
        assert (s["status"], s["vm_state"], s["task_state"]) == (
            "ACTIVE", "active", None), s
        assert s["host"] == moved[sid], s        # not moved by the repair
    assert sum("reset to active" in r for r in reasons) == 2, reasons
    # The old rebuilds did run, and failed: that is what was repaired.
    stale = [m for m in snap["migrations"] if m["instance_uuid"] in victims
             and m["dest_compute"] in dead]
    assert len(stale) == 2 and all(m["status"] == "failed" for m in stale), \
        stale
    assert sorted(sid for _, sid, _ in c.sim.resets) == sorted(
        m["instance_uuid"] for m in stale)
    assert c.sim.double_rebuilds == []
    # Nobody could know which of the two dead hosts had each rebuild: both
    # were suspected; each repair was done once, by the host that ran it.
    rows = c.journal().stale_rebuilds(unresolved=False)
    repaired = sorted(r["server_id"] for r in rows
                      if r["resolution"].startswith("repaired:"))
    assert repaired == sorted(m["instance_uuid"] for m in stale), rows
    assert all(r["resolved_at"] for r in rows), rows
    for host in dead:
        svc = snap["services"][host]
        assert not svc["forced_down"] and svc["status"] == "enabled", svc
