"""[recovery] max_inflight on the simulator with the real engine: two
hosts die together and their evacuations share the cap across hosts."""

HOSTS = ("compute-3", "compute-7")


def _max_overlap(intervals):
    edges = sorted([(start, 1) for start, _ in intervals]
                   + [(end, -1) for _, end in intervals])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def test_the_cap_across_hosts_bounds_evacuations_in_flight(make_cloud):
    c = make_cloud({"recovery": {"max_inflight": 2},
                    "evacuation": {"concurrency": 10}},
                   hosts=20, servers_per_host=4, evacuation_time=0.6)
    c.start_engine()
    for host in HOSTS:
        c.sim.kill(host)
    for host in HOSTS:
        state, reason = c.wait_state(host, "evacuated", timeout=90)
        assert "4/4 servers evacuated" in reason, reason
    snap = c.sim.snapshot()
    moved = [m for m in snap["migrations"] if m["source_compute"] in HOSTS]
    assert len(moved) == 8 and all(m["status"] == "done" for m in moved)
    intervals = [(m["created_at"], m["updated_at"]) for m in moved]
    # Never more than the cap in flight at once, across both hosts ...
    assert _max_overlap(intervals) <= 2, sorted(intervals)
    # ... and the cap was used (both slots), not one at a time.
    assert _max_overlap(intervals) == 2, sorted(intervals)
    for sid, s in snap["servers"].items():
        if any(s["name"].startswith(h + "-") for h in HOSTS):
            assert s["host"] not in HOSTS and s["status"] == "ACTIVE", s
