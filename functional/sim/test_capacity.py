"""Where a lost host's servers go, on the simulator with the real engine
(20 hosts, Placement's counts over HTTP): the capacity preflight sends in
priority order what fits and keeps the rest pending until capacity
appears; reserved hosts are brought in, receive the servers and go back
to the reserve when the lost host returns."""

VICTIM = "compute-3"

#: every host holds 5 servers of 2 vCPU on 10 vCPU: the cloud is full
FULL = dict(hosts=20, servers_per_host=5, host_vcpus=10, server_vcpus=2)


def _empty(c, host, keep=0):
    """Delete the servers of ``host`` (but ``keep``) as their owners
    would; returns nothing."""
    with c.sim.lock:
        for sid in sorted(s.id for s in c.sim.servers.values()
                          if s.host == host)[keep:]:
            del c.sim.servers[sid]


def _service(c, host):
    return c.sim.snapshot()["services"][host]


def _set_service(c, host, **kw):
    c.sim.update_service(_service(c, host)["id"], **kw)


def _victims(c):
    return sorted(sid for sid, s in c.sim.snapshot()["servers"].items()
                  if s["host"] == VICTIM)


def _sent(c):
    return [m for m in c.sim.snapshot()["migrations"]
            if m["source_compute"] == VICTIM]


def test_full_cloud_waits_in_priority_order_and_recovers_when_a_host_is_enabled(
        make_cloud):
    c = make_cloud({"evacuation": {"retry_backoff": 120.0,
                                   "concurrency": 1}}, **FULL)
    _empty(c, "compute-18", keep=3)      # room for 2 servers
    _empty(c, "compute-19")              # room for 5, but disabled
    _set_service(c, "compute-19", status="disabled",
                 disabled_reason="spare: racked last week")
    ids = _victims(c)
    for sid, prio in zip(ids, ("1", "50", "0", "100", "2")):
        c.sim.set_metadata(sid, {"instanceha:priority": prio})
    c.start_engine()
    c.sim.kill(VICTIM)
    state, reason = c.wait_state(VICTIM, "pending", timeout=60)
    assert "3 of 5 servers wait for capacity: short of 6 vCPU" in reason, \
        reason
    # The two of highest priority went (100, then 50), onto the only room;
    # nothing was sent into a certain NoValidHost.
    sent = _sent(c)
    assert [m["instance_uuid"] for m in sorted(
        sent, key=lambda m: m["created_at"])] == [ids[3], ids[1]]
    assert {m["status"] for m in sent} == {"done"}
    snap = c.sim.snapshot()
    assert all(snap["servers"][sid]["vm_state"] == "active"
               for sid in ids)
    waiting = {r["server_id"]: r["detail"] for r in c.journal().evacuations()
               if r["status"] == "no_capacity"}
    assert sorted(waiting) == sorted([ids[0], ids[2], ids[4]])
    out = c.cli("status", VICTIM)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("no_capacity") == 3, out.stdout
    assert "preflight: needs 2 vCPU" in out.stdout, out.stdout
    # The operator enables the spare: the host tries again at once, not
    # after its 120 s back-off.
    _set_service(c, "compute-19", status="enabled")
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=40)
    snap = c.sim.snapshot()
    for sid in ids:
        assert snap["servers"][sid]["host"] in ("compute-18", "compute-19")
        assert snap["servers"][sid]["status"] == "ACTIVE"


def test_a_reserved_host_is_brought_in_and_returned_to_the_reserve(
        make_cloud):
    c = make_cloud({"reserved_hosts": {"enabled": True,
                                       "return_to_reserve": True},
                    "evacuation": {"retry_backoff": 120.0}}, **FULL)
    for spare in ("compute-18", "compute-19"):
        _empty(c, spare)
        _set_service(c, spare, status="disabled",
                     disabled_reason="reserved: spares")
    ids = _victims(c)
    c.start_engine()
    c.sim.kill(VICTIM)
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=60)
    assert "reserved host(s) compute-18 in service for it" in reason, reason
    snap = c.sim.snapshot()
    assert {snap["servers"][sid]["host"] for sid in ids} == {"compute-18"}
    assert snap["services"]["compute-19"]["status"] == "disabled"
    # The lost host comes back: compute-18 returns to the reserve, with
    # the servers it took still on it.
    c.sim.power(VICTIM, True)
    state, reason = c.wait_state(VICTIM, "active", timeout=60)
    assert "compute-18 returned to the reserve" in reason, reason
    svc = _service(c, "compute-18")
    assert (svc["status"], svc["disabled_reason"]) == \
        ("disabled", "reserved: spares")
    snap = c.sim.snapshot()
    assert {snap["servers"][sid]["host"] for sid in ids} == {"compute-18"}
    assert snap["services"][VICTIM]["status"] == "enabled"
