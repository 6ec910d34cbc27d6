"""Proactive HA (issue 38 section 3) on the simulator: the real
``instanceha run`` reads each host's hardware health from its simulated
Redfish BMC (the audit, through sushy), drains a host whose power supply
turns Critical into maintenance through the operator's drain (its
servers moved live), never fences it, and holds a second degraded host
by its rate limit. Asserted on the state of the world: where the
simulator has each server, its migration records, the BMC's power, the
compute service, the engine's state and the host's journal (through the
operator API).

Timings: an audit every 2 s, a drain pass every second, live migrations
of 1 s; every wait has a budget that holds on a loaded 2-core machine.
"""


from functional import operator_api as op
from functional.sim.conftest import wait_for


def _set_health(c, host, **parts):
    with c.sim.lock:
        h = c.sim.hosts[host]
        h.hardware_health = dict(h.hardware_health, **parts)


def _proactive(c):
    status, snap = op.api(c, "GET", "/status")
    assert status == 200, snap
    return snap.get("proactive") or {}


def test_degraded_host_drained_never_fenced_and_rate_limited(make_cloud):
    c = make_cloud({"drain": {"poll_interval": 1},
                    "audit": {"interval": 2.0},
                    "proactive": {"enabled": True, "severity": "Critical",
                                  "max_concurrent": 1,
                                  "max_per_interval": 1,
                                  "rate_interval": 3600}},
                   hosts=5, servers_per_host=2)
    servers = c.sim.snapshot()["servers"]
    on1 = {sid for sid, s in servers.items() if s["host"] == "compute-1"}
    on3 = {sid for sid, s in servers.items() if s["host"] == "compute-3"}
    assert len(on1) == 2 and len(on3) == 2
    # Degraded before the start, so that the first audit sees all three
    # (one audit may read hosts before a change and others after it).
    # A Warning is below the severity: nothing happens to compute-2.
    _set_health(c, "compute-2", fan="Warning")
    _set_health(c, "compute-1", power_supply="Critical")
    _set_health(c, "compute-3", fan="Critical")
    c.start_engine()

    state, reason = op.settle(c, "compute-1", "maintenance", 180)
    assert reason.startswith("drained, in maintenance: 2/2 servers moved"), \
        reason
    now = c.sim.snapshot()
    for sid in on1:
        s = now["servers"][sid]
        assert s["host"] not in ("compute-1", None) \
            and s["status"] == "ACTIVE", s
        moves = [(m["migration_type"], m["status"])
                 for m in now["migrations"] if m["instance_uuid"] == sid]
        assert moves == [("live-migration", "completed")], moves
    # Never fenced: powered on, no evacuation, the drain's marker only.
    assert now["hosts"]["compute-1"]["power"] == "on"
    assert c.sim.unsafe_evacuate_requests() == []
    assert not [m for m in now["migrations"]
                if m["migration_type"] == "evacuation"]
    svc = now["services"]["compute-1"]
    assert svc["status"] == "disabled" and not svc["forced_down"], svc
    steps = op.path(c, "compute-1")
    assert steps == ["active", "draining", "maintenance"], steps
    asked = [e for e in op.history(c, "compute-1")
             if e["kind"] == "transition" and e.get("to") == "draining"]
    assert asked and asked[0]["source"] == "proactive", asked
    assert "proactive: hardware health Critical" in asked[0]["reason"], \
        asked[0]
    assert "power supply PS1 Critical" in asked[0]["reason"], asked[0]

    # The second degraded host is held by the rate limit (one per hour),
    # and said so; it keeps its servers; the Warning host is left alone.
    def held():
        hosts = _proactive(c).get("hosts", {})
        return "max_per_interval 1" in hosts.get("compute-3", {}).get(
            "action", "")
    wait_for(held, 60, "compute-3 held by the rate limit")
    assert op.state(c, "compute-3")[0] == "active"
    assert op.state(c, "compute-2")[0] == "active"
    now = c.sim.snapshot()
    assert {sid for sid, s in now["servers"].items()
            if s["host"] == "compute-3"} == on3
    assert now["hosts"]["compute-3"]["power"] == "on"

    # Its health back to OK, compute-1 stays in maintenance (the
    # operator's call): two more audits later, still there.
    _set_health(c, "compute-1", power_supply="OK")
    audits = c.status()["sources"]["audit"]["audits"]
    wait_for(lambda: c.status()["sources"]["audit"]["audits"] >= audits + 2,
             60, "two more audits")
    assert op.state(c, "compute-1")[0] == "maintenance"
    with open(c.log_path) as f:
        log = f.read()
    assert "proactive_drain" in log and "hardware_degraded" in log
    # compute-3's hold by the rate limit is logged once, not every audit.
    held = [line for line in log.splitlines()
            if "proactive_drain_held" in line and "compute-3" in line
            and "max_per_interval" in line]
    assert len(held) == 1, held
    assert "fence_reset_sent" not in log
