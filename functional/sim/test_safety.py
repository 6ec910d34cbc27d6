"""Hosts that must not be touched are not: the real ``instanceha run``
against the simulator over HTTP. Each test reads the simulated world (BMC
power, services, migrations), not the engine's calls."""

import os
import time

import pytest
import yaml

from functional.sim.conftest import wait_for


def _servers_of(cloud, host):
    return {sid for sid, s in cloud.sim.snapshot()["servers"].items()
            if s["host"] == host}


def _service_id(cloud, host):
    return cloud.sim.snapshot()["services"][host]["id"]


# -- 2. restart without the journal ---------------------------------------------

@pytest.mark.parametrize("booting", [False, True],
                         ids=["back", "still-booting"])
def test_restart_without_journal_does_not_fence_a_host_that_came_back(
        make_cloud, booting):
    """``back``: its nova-compute reports again before instanceha starts;
    ``still-booting``: instanceha starts while the host boots (Nova's view:
    down, with instanceha's marker), as after a power-on by hand."""
    c = make_cloud()
    c.start_engine()
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated")
    c.stop_engine()
    for suffix in ("", "-wal", "-shm"):          # a new machine, no journal
        path = os.path.join(c.workdir, "journal.sqlite" + suffix)
        if os.path.exists(path):
            os.unlink(path)
    svc = c.sim.snapshot()["services"]["compute-1"]
    assert svc["forced_down"] and svc["disabled_reason"].startswith(
        "instanceha:")
    if booting:
        time.sleep(4)          # our last write is older than delta (3 s)
        c.sim.power("compute-1", True)
    else:
        c.sim.power("compute-1", True)               # back; Nova cleans up
        wait_for(lambda: c.sim.snapshot()["hosts"]["compute-1"]
                 ["compute_alive"] and all(
                     m["status"] == "completed"
                     for m in c.sim.snapshot()["migrations"]), 30,
                 "compute-1 back and cleaned up")
    c.start_engine()
    c.wait_state("compute-1", "active")
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "on"
    svc = snap["services"]["compute-1"]
    assert not svc["forced_down"] and svc["status"] == "enabled"
    actions = c.journal().actions()
    assert "fence" not in [a["kind"] for a in actions], actions
    steps = [t["dst"] for t in c.journal().transitions()
             if t["host_name"] == "compute-1"]
    assert steps[0] == "pending" and "fencing" not in steps, steps
    assert steps[-2:] == ["recovering", "active"], steps


def test_restart_without_journal_proves_a_dead_host_dead_again(make_cloud):
    c = make_cloud(evacuation_time=2.0)
    c.start_engine()
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuating")
    c.stop_engine()            # mid-evacuation, then the journal is lost
    os.unlink(os.path.join(c.workdir, "journal.sqlite"))
    c.start_engine()
    state, reason = c.wait_state("compute-1", "pending")
    assert "no journal" in reason
    c.wait_state("compute-1", "evacuated", timeout=60)
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "off"
    assert all(s["host"] != "compute-1" and s["status"] == "ACTIVE"
               for s in snap["servers"].values())
    per_server = {}
    for m in snap["migrations"]:
        per_server[m["instance_uuid"]] = per_server.get(
            m["instance_uuid"], 0) + 1
    assert set(per_server.values()) == {1}      # nothing evacuated twice


# -- 3. a host its operator disabled -------------------------------------------

def test_host_disabled_by_operator_is_not_recovered_and_status_says_so(
        make_cloud):
    c = make_cloud()
    c.sim.update_service(_service_id(c, "compute-1"), status="disabled",
                         disabled_reason="RAID swap")
    victims = _servers_of(c, "compute-1")
    c.start_engine()
    c.sim.kill("compute-1")
    c.engine.wait(lambda: "disabled by operator: RAID swap"
                  in c.states()["compute-1"][1], 30,
                  "compute-1 held as disabled by operator")
    time.sleep(3)        # detection and grace passed several times over
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "on"
    assert not snap["migrations"]
    assert _servers_of(c, "compute-1") == victims
    svc = snap["services"]["compute-1"]
    assert svc["disabled_reason"] == "RAID swap" and not svc["forced_down"]
    out = c.cli("status")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines()
                if ln.startswith("compute-1"))
    assert "disabled by operator: RAID swap" in line


def test_disabled_host_recovered_on_request_gets_its_state_back(make_cloud):
    c = make_cloud({"policy": {"recover_disabled_hosts": True}})
    c.sim.update_service(_service_id(c, "compute-2"), status="disabled",
                         disabled_reason="RAID swap")
    c.start_engine()
    c.sim.kill("compute-2")
    c.wait_state("compute-2", "evacuated")
    assert c.sim.snapshot()["hosts"]["compute-2"]["power"] == "off"
    c.sim.power("compute-2", True)
    c.wait_state("compute-2", "active")
    svc = c.sim.snapshot()["services"]["compute-2"]
    assert not svc["forced_down"]
    assert svc["status"] == "disabled" and svc["disabled_reason"] == \
        "RAID swap"


# -- 4. resume from maintenance -------------------------------------------------

def test_resume_from_maintenance_gives_boot_time_and_grace(make_cloud):
    c = make_cloud({"policy": {"resume_boot_time": 4.0},
                    "detection": {"grace_period": 1.0}})
    c.start_engine()
    out = c.cli("maintenance", "compute-1", "--reason", "BIOS")
    assert out.returncode == 0, out.stderr
    c.wait_state("compute-1", "maintenance")
    c.sim.kill("compute-1")        # down during the planned work
    time.sleep(5)                  # Nova reports it down meanwhile
    assert c.sim.snapshot()["services"]["compute-1"]["state"] == "down"
    resumed = time.time()
    assert c.cli("resume", "compute-1").returncode == 0
    # Not before boot time + grace (5 s) after the resume.
    while time.time() < resumed + 3.5:
        assert c.sim.snapshot()["hosts"]["compute-1"]["power"] == "on"
        time.sleep(0.1)
    # The host never reported: it is recovered after that.
    c.wait_state("compute-1", "evacuated")
    assert c.sim.snapshot()["hosts"]["compute-1"]["power"] == "off"
    fence = next(a for a in c.journal().actions() if a["kind"] == "fence")
    assert fence["started_at"] >= resumed + 5.0 - 0.5, (fence, resumed)


# -- 5. two inventory entries, one BMC --------------------------------------------

def test_no_power_off_through_a_bmc_that_a_live_service_maps_to(make_cloud):
    c = make_cloud()
    # compute-3 is the stale row of a host since renamed compute-2: its
    # inventory entry still reaches the same (live) machine.
    path = os.path.join(c.workdir, "bmc.yaml")
    with open(path) as f:
        inv = yaml.safe_load(f)
    inv["hosts"]["compute-3"] = dict(inv["hosts"]["compute-2"])
    with open(path, "w") as f:
        yaml.safe_dump(inv, f)
    victims = _servers_of(c, "compute-3")
    c.start_engine()
    c.sim.kill("compute-3")
    state, reason = c.wait_state("compute-3", "failed", timeout=30)
    assert "refusing to power off" in reason and "compute-2" in reason
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-2"]["power"] == "on"
    assert snap["hosts"]["compute-2"]["compute_alive"]
    assert snap["hosts"]["compute-3"]["power"] == "on"
    assert not snap["migrations"]
    assert _servers_of(c, "compute-3") == victims
    assert not snap["services"]["compute-3"]["forced_down"]
    assert "refusing to power off" in c.cli("status").stdout


# -- 8. suspend stops a running evacuation at the next server -------------------

def test_suspend_stops_a_running_evacuation_at_the_next_server(make_cloud):
    c = make_cloud({"evacuation": {"concurrency": 1}}, servers_per_host=6,
                   evacuation_time=1.5)
    victims = _servers_of(c, "compute-1")
    c.start_engine()
    c.sim.kill("compute-1")
    c.engine.wait(lambda: c.sim.snapshot()["migrations"], 30,
                  "the first evacuation to start")
    out = c.cli("suspend", "compute-1", "--forever", "--reason", "stop")
    assert out.returncode == 0, out.stderr
    assert "evacuate: " in out.stdout and "servers sent" in out.stdout, \
        out.stdout
    c.wait_state("compute-1", "suspended")
    time.sleep(4)        # what was sent finishes; nothing more is sent
    snap = c.sim.snapshot()
    sent = {m["instance_uuid"] for m in snap["migrations"]}
    assert 1 <= len(sent) < len(victims), sent
    assert all(m["status"] in ("done", "completed")
               for m in snap["migrations"])
    left = _servers_of(c, "compute-1")
    assert left == victims - sent and left
    assert c.states()["compute-1"] == ("suspended",
                                       "suspended by operator: stop")
    evac = [a for a in c.journal().actions() if a["kind"] == "evacuate"]
    assert "operator's suspend" in evac[-1]["detail"], evac
