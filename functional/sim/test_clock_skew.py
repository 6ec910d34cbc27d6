"""Clock skew between instanceha's node and Nova: the real engine process
against a simulator whose clock (Nova's clock: updated_at, service state)
runs 120 s behind this machine's.

Staleness must be judged on Nova's clock: live hosts stay active, nothing is
fenced or forced down, the skew is reported, and a real death is still
detected and recovered.
"""

import re
import time
import urllib.request

from functional.sim.conftest import wait_for

SKEW = 120.0


def _skew(c):
    return (c.status().get("sources", {}).get("reconciler") or {}).get(
        "clock_skew")


def test_nova_clock_behind_does_not_make_live_hosts_look_dead(make_cloud):
    c = make_cloud(clock=lambda: time.time() - SKEW)
    c.start_engine()
    # delta is 3 s and the poll 0.5 s (simrun.FAST): several passes and
    # more than delta + grace_period.
    time.sleep(5)
    states = c.states()
    assert {s for s, _ in states.values()} == {"active"}, states
    snap = c.sim.snapshot()
    assert all(h["power"] == "on" for h in snap["hosts"].values()), snap
    assert not any(s["forced_down"] for s in snap["services"].values())
    assert not snap["migrations"]
    # Local minus Nova, plus at most a report interval of lag.
    skew = _skew(c)
    assert skew is not None and SKEW - 1 <= skew <= SKEW + 3, skew
    with urllib.request.urlopen(c.status()["api"] + "/metrics",
                                timeout=10) as resp:
        metrics = resp.read().decode()
    gauge = re.search(r"^instanceha_source_reconciler_clock_skew (\S+)$",
                      metrics, re.M)
    assert gauge and SKEW - 1 <= float(gauge.group(1)) <= SKEW + 3, metrics
    warned = [line for line in open(c.log_path).read().splitlines()
              if "event='clock_skew'" in line]
    assert len(warned) == 1 and "reason=" in warned[0], warned

    # A real death is still seen on Nova's clock and recovered.
    victims = {sid for sid, s in snap["servers"].items()
               if s["host"] == "compute-2"}
    c.sim.kill("compute-2")
    c.wait_state("compute-2", "evacuated", timeout=60)
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-2"]["power"] == "off"
    assert snap["services"]["compute-2"]["forced_down"]
    for sid in victims:
        s = snap["servers"][sid]
        assert s["host"] != "compute-2" and s["status"] == "ACTIVE", s
    for name in ("compute-0", "compute-1", "compute-3"):
        assert snap["hosts"][name]["power"] == "on"
        assert not snap["services"][name]["forced_down"]
    wait_for(lambda: c.states()["compute-0"][0] == "active", 5,
             "the other hosts to stay active")
    assert {c.states()[h][0] for h in ("compute-0", "compute-1",
                                       "compute-3")} == {"active"}
