"""Recovery policies on the simulator with the real engine, 20 hosts:
priority order in the evacuation start times, servers left on the host by
tagging or a repair level, each with its reason in the journal."""

VICTIM = "compute-3"


def _victims(c):
    return sorted(sid for sid, s in c.sim.snapshot()["servers"].items()
                  if s["host"] == VICTIM)


def test_priority_tagging_and_repair_level_on_a_failed_host(make_cloud):
    c = make_cloud({"recovery": {"evacuable_tagging": True},
                    "evacuation": {"concurrency": 1}},
                   hosts=20, servers_per_host=5)
    c.sim.flavor_extra_specs = {"evacuable": "true"}   # the flavor opts in
    ids = _victims(c)
    low, high, top, opted_out, no_repair = ids
    c.sim.set_metadata(high, {"instanceha:priority": "50"})
    c.sim.set_metadata(top, {"instanceha:priority": "100"})
    c.sim.set_metadata(opted_out, {"evacuable": "false"})   # server wins
    c.sim.set_metadata(no_repair, {"instanceha:repair": "none"})
    c.start_engine()
    c.sim.kill(VICTIM)
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=60)
    assert "3/3 servers evacuated, 2 not evacuable" in reason, reason
    snap = c.sim.snapshot()
    started = sorted((m["created_at"], m["instance_uuid"])
                     for m in snap["migrations"]
                     if m["source_compute"] == VICTIM)
    assert [sid for _, sid in started] == [top, high, low]
    for sid in (opted_out, no_repair):
        assert snap["servers"][sid]["host"] == VICTIM
    skipped = {r["server_id"]: r["detail"] for r in c.journal().evacuations()
               if r["status"] == "skipped"}
    assert "says evacuable=false" in skipped[opted_out], skipped
    assert "none" in skipped[no_repair], skipped


def test_policy_explain_prints_each_decision_and_its_source(make_cloud):
    c = make_cloud({"recovery": {"evacuable_tagging": True}}, hosts=4,
                   servers_per_host=2)
    a, b = _victims(c)
    c.sim.set_metadata(a, {"evacuable": "true", "instanceha:priority": "7"})
    c.sim.set_metadata(b, {"instanceha:repair": "none"})
    out = c.cli("policy", "explain", a)
    assert out.returncode == 0, out.stderr
    assert "evacuable tagging: yes: server" in out.stdout
    assert "priority: 7 (server" in out.stdout
    assert "decision: evacuated if its host is lost" in out.stdout
    out = c.cli("policy", "explain", b)
    assert out.returncode == 0, out.stderr
    assert "decision: left on its host:" in out.stdout, out.stdout
    # By its name (issue 35, part 6), through the simulated Nova's
    # name filter.
    name = c.sim.snapshot()["servers"][a]["name"]
    out = c.cli("policy", "explain", name)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("server %s (%s)" % (name, a)), out.stdout
    missing = c.cli("policy", "explain", "no-such-server")
    assert missing.returncode == 1 and "no server" in missing.stderr
