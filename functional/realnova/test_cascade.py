"""A cascade on real Nova: the host evacuated to dies too.

Three computes: compute-0 dies; its evacuation is aimed at compute-1 (the
only enabled host besides it: compute-2 is disabled for that moment),
which dies just before the rebuild reaches it, while Nova's scheduler still
counts it up. Nova leaves the servers rebuilding on compute-0 with their
migrations 'accepted' and no destination; nothing in Nova ends that. The
engine must send them again once compute-1 is fenced, and everything ends
ACTIVE on compute-2.

Every assertion reads the world through Nova's API or the BMC peer; the
engine's journal is checked for what it must record.
"""

import time

from functional.peers import procs
from functional.realnova.engine import boot_victims

OVERRIDES = {
    # Two of three hosts lost is above any sane threshold: this test is
    # about the cascade, not the threshold.
    "policy": {"threshold": 100},
    "evacuation": {"stall_timeout": 5.0, "server_retry_delay": 1.0,
                   "server_timeout": 180.0},
}
STEER = "test: steering the first evacuation to compute-1"


def _set_status(bed, host, **body):
    svc = bed.cloud.service(host)
    bed.cloud.call("PUT", "/os-services/%s" % svc["id"], body,
                   microversion="2.53")


def _conductor_done(bed, sid):
    """The conductor has sent the latest evacuation to a compute."""
    path = "/servers/%s/os-instance-actions" % sid
    actions = [a for a in bed.cloud.get(path, "2.62")["instanceActions"]
               if a["action"] == "evacuate"]
    if not actions:
        return False
    events = bed.cloud.get("%s/%s" % (path, actions[0]["request_id"]),
                           "2.62")["instanceAction"]["events"]
    return any(e["event"] == "rebuild_server" and e["finish_time"]
               for e in events)


def test_destination_dying_mid_evacuation_ends_all_active_on_the_third(
        bed, engine):
    a, b, c = bed.hosts
    ids = boot_victims(bed, a)
    # On a bed started moments ago a compute may not have written its first
    # heartbeat yet (updated_at null while Nova says up from created_at);
    # today's reconciler takes that for a lost heartbeat and fences it.
    # Not this test's subject: start once every compute has reported.
    procs.wait_until(
        lambda: all(bed.cloud.service(h)["updated_at"] for h in bed.hosts),
        30, "a first heartbeat from every compute", "nova-compute",
        bed.cloud.log_of("nova-compute-%s" % a), interval=0.5)
    _set_status(bed, c, status="disabled", disabled_reason=STEER)
    eng = engine(OVERRIDES).start()
    t0 = time.monotonic()
    bed.cloud.kill_compute(a)
    # compute-1 dies when compute-0 is found dead: a few seconds before
    # compute-0's servers are sent, while Nova still counts compute-1 up.
    eng.wait(lambda: eng.states().get(a, ("",))[0] == "suspect", 60,
             "%s suspect" % a)
    bed.cloud.kill_compute(b)
    procs.wait_until(lambda: len(bed.cloud.migrations(a)) == len(ids)
                     and all(_conductor_done(bed, s) for s in ids),
                     60, "evacuations sent", "nova-conductor",
                     bed.cloud.log_of("nova-conductor"), interval=0.2)
    # The cascade happened: sent to compute-1, which never took them.
    for m in bed.cloud.migrations(a):
        assert m["status"] == "accepted" and m["dest_compute"] is None, m
    for sid in ids:
        s = bed.cloud.server(sid)
        assert s["OS-EXT-SRV-ATTR:host"] == a, s
        assert s["OS-EXT-STS:task_state"] == "rebuilding", s
    _set_status(bed, c, status="enabled")     # the third host takes them
    state, reason = eng.wait_state(a, "evacuated", timeout=150)
    elapsed = time.monotonic() - t0
    servers = bed.cloud.wait_servers(ids, host=c, timeout=60)
    for s in servers:
        assert s["status"] == "ACTIVE" and s["OS-EXT-STS:vm_state"] == \
            "active", s
    assert "%d sent again after a failure" % len(ids) in reason, reason
    eng.wait_state(b, "evacuated", timeout=60)
    assert bed.bmc(a).power_state() == "off"
    assert bed.bmc(b).power_state() == "off"
    for host in (a, b):
        svc = bed.cloud.service(host)
        assert svc["forced_down"] and svc["status"] == "disabled", svc
    j = eng.journal()
    steps = [t["dst"] for t in j.transitions() if t["host_name"] == a]
    assert "failed" not in steps, steps
    rows = [e for e in j.evacuations() if e["host_name"] == a]
    for sid in ids:
        mine = [(e["status"], e["dest_host"]) for e in rows
                if e["server_id"] == sid]
        assert mine == [("retry", None), ("done", c)], mine
    details = [e["detail"] for e in rows if e["status"] == "retry"]
    assert all("no compute took the rebuild" in d and b in d
               for d in details), details
    print("real-nova cascade: %s evacuated to %s in %.1fs after %s died "
          "under its evacuation" % (a, c, elapsed, b))

    # compute-1 comes back. Its queue still holds the rebuilds cast to it
    # as it died; its compute runs them, Nova fails them on the servers'
    # changed task state and sets the servers to error, though they run on
    # compute-2. Its cleanup check repairs that before it is put back.
    bed.bmc(b).power_on()
    state, reason = eng.wait_state(b, "active", timeout=180)
    assert "%d server(s) an old rebuild set to error reset to active" \
        % len(ids) in reason, reason
    for sid in ids:
        s = bed.cloud.server(sid)
        assert (s["status"], s["OS-EXT-STS:vm_state"],
                s["OS-EXT-STS:task_state"], s["OS-EXT-SRV-ATTR:host"]) == (
                    "ACTIVE", "active", None, c), s
    stale = [m for m in bed.cloud.migrations(a)
             if m["instance_uuid"] in ids and m["dest_compute"] == b]
    assert sorted(m["status"] for m in stale) == ["failed"] * len(ids), stale
    rows = j.stale_rebuilds(unresolved=False)
    assert sorted(r["server_id"] for r in rows
                  if r["resolution"].startswith("repaired:")) == sorted(ids)
    svc = bed.cloud.service(b)
    assert not svc["forced_down"] and svc["status"] == "enabled", svc
    print("real-nova cascade: %s came back, ran %d old rebuilds; servers "
          "repaired and still on %s" % (b, len(ids), c))
