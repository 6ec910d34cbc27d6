"""Recovery scenarios: the real engine process against the simulator."""

import time

from functional.sim.conftest import wait_for


def _servers_of(cloud, host):
    return {sid for sid, s in cloud.sim.snapshot()["servers"].items()
            if s["host"] == host}


def test_dead_host_is_fenced_isolated_and_evacuated(make_cloud):
    c = make_cloud()
    c.start_engine()
    victims = _servers_of(c, "compute-1")
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated")
    snap = c.sim.snapshot()
    for sid in victims:
        s = snap["servers"][sid]
        assert s["host"] != "compute-1" and s["status"] == "ACTIVE", s
    svc = snap["services"]["compute-1"]
    assert svc["forced_down"] and svc["status"] == "disabled"
    assert svc["disabled_reason"].startswith("instanceha: evacuating ")
    assert snap["hosts"]["compute-1"]["power"] == "off"
    # Nothing else was touched.
    for name in ("compute-0", "compute-2", "compute-3"):
        assert snap["hosts"][name]["power"] == "on"
        assert not snap["services"][name]["forced_down"]
    j = c.journal()
    steps = [t["dst"] for t in j.transitions() if t["host_name"] == "compute-1"]
    assert steps == ["suspect", "fencing", "fenced", "evacuating", "evacuated"]
    assert {e["server_id"] for e in j.evacuations()} == victims
    assert {e["status"] for e in j.evacuations()} == {"done"}
    outcomes = [(a["kind"], a["outcome"]) for a in j.actions()]
    assert outcomes == [("fence", "fence_ok"), ("isolate", "isolate_ok"),
                        ("evacuate", "evacuate_ok")]


def test_returning_host_reenabled_only_after_migrations_completed(make_cloud):
    c = make_cloud()
    c.start_engine()
    c.sim.kill("compute-2")
    c.wait_state("compute-2", "evacuated")
    # The host boots but its compute has not cleaned up yet: the
    # migrations stay 'done'.
    c.sim.hold_cleanup("compute-2", True)
    c.sim.power("compute-2", True)
    c.wait_state("compute-2", "recovering")
    time.sleep(3)       # several cleanup checks happen in this window
    state, reason = c.states()["compute-2"]
    assert state == "recovering" and "not completed" in reason
    svc = c.sim.snapshot()["services"]["compute-2"]
    assert svc["forced_down"] and svc["status"] == "disabled"
    # Now Nova's cleanup runs (what nova-compute does at start).
    c.sim.hold_cleanup("compute-2", False)
    c.wait_state("compute-2", "active")
    svc = c.sim.snapshot()["services"]["compute-2"]
    assert not svc["forced_down"] and svc["status"] == "enabled"
    assert all(m["status"] == "completed"
               for m in c.sim.snapshot()["migrations"])


def test_leave_disabled(make_cloud):
    c = make_cloud({"evacuation": {"leave_disabled": True}})
    c.start_engine()
    c.sim.kill("compute-0")
    c.wait_state("compute-0", "evacuated")
    c.sim.power("compute-0", True)
    state, reason = c.wait_state("compute-0", "active")
    svc = c.sim.snapshot()["services"]["compute-0"]
    assert not svc["forced_down"] and svc["status"] == "disabled"
    assert "left disabled" in reason


def test_more_hosts_down_than_threshold_fences_nothing(make_cloud):
    c = make_cloud(hosts=4)
    c.start_engine()
    for h in ("compute-0", "compute-1", "compute-2"):
        c.sim.kill(h)
    wait_for(lambda: all(c.states()[h][0] == "suspect"
                         and "threshold" in c.states()[h][1]
                         for h in ("compute-0", "compute-1", "compute-2")),
             30, "three hosts held by the threshold")
    time.sleep(3)       # grace period passed several times over
    snap = c.sim.snapshot()
    assert all(h["power"] == "on" for h in snap["hosts"].values())
    assert not any(s["forced_down"] for s in snap["services"].values())
    assert not snap["migrations"]
    assert "above the 50% threshold" in c.states()["compute-0"][1]


def test_unreachable_bmc_means_no_evacuation_and_failed(make_cloud):
    """A BMC that never answers: the fence action is retried with back-off
    ([DEFAULT] action_retries bounds it), nothing is evacuated, and the
    host ends failed for an operator."""
    c = make_cloud({"DEFAULT": {"action_retries": 3}})
    c.start_engine()
    c.sim.set_bmc("compute-3", reachable=False)
    victims = _servers_of(c, "compute-3")
    c.sim.kill("compute-3")
    state, reason = c.wait_state("compute-3", "failed", timeout=60)
    assert "compute-3" in reason
    snap = c.sim.snapshot()
    assert not snap["migrations"]
    assert _servers_of(c, "compute-3") == victims
    assert not snap["services"]["compute-3"]["forced_down"]
    assert "secret" not in open(c.log_path).read()


def test_engine_restart_resumes_from_journal(make_cloud):
    c = make_cloud(evacuation_time=1.0)
    c.start_engine()
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuating")
    c.stop_engine()
    c.start_engine()
    c.wait_state("compute-1", "evacuated")
    snap = c.sim.snapshot()
    assert all(s["host"] != "compute-1" and s["status"] == "ACTIVE"
               for s in snap["servers"].values())
    # Each server was evacuated once: resume waited for in-flight ones.
    per_server = {}
    for m in snap["migrations"]:
        per_server[m["instance_uuid"]] = per_server.get(m["instance_uuid"], 0) + 1
    assert set(per_server.values()) == {1}


def test_operator_suspend_and_resume_through_the_cli(make_cloud):
    import subprocess
    import sys
    c = make_cloud()
    c.start_engine()

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "instanceha.cmd.main", *args,
             "--config-file", c.conf_path],
            capture_output=True, text=True, timeout=30)

    out = cli("suspend", "compute-1", "--forever", "--reason", "disk swap")
    assert out.returncode == 0, out.stderr
    c.wait_state("compute-1", "suspended")
    c.sim.kill("compute-1")
    time.sleep(6)       # detection + grace several times over
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "on"
    assert not snap["migrations"]
    status = cli("status")
    assert "suspended by operator: disk swap" in status.stdout
    assert cli("resume", "compute-1").returncode == 0
    c.wait_state("compute-1", "evacuated")
    assert cli("suspend", "compute-9", "--forever").returncode == 1
