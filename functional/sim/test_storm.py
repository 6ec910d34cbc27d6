"""Storms on the simulator with 20 hosts and real timing: the real
``instanceha run`` over HTTP; assertions read the simulated world."""

import time

from functional.sim.conftest import wait_for
from instanceha.drills import world

HOSTS = 20


def _off(cloud):
    return world.powered_off(cloud.sim)


def test_hosts_dying_one_after_another_are_fenced_only_up_to_the_threshold(
        make_cloud):
    c = make_cloud({"policy": {"threshold": 50}}, hosts=HOSTS,
                   servers_per_host=2)
    c.start_engine()
    dead = ["compute-%d" % i for i in range(14)]
    for name in dead:                  # a rack losing power host by host
        c.sim.kill(name)
        time.sleep(1.5)
    c.engine.wait(lambda: sum("storm hold" in r for _, r in
                              c.states().values()) >= 4, 30,
                  "the storm hold on the hosts beyond the threshold")
    time.sleep(3)                      # grace passed several times over
    fenced = _off(c)
    assert 1 <= len(fenced) <= HOSTS // 2, fenced
    status = c.cli("status").stdout
    assert "HOLD: storm hold:" in status and "of 20 compute hosts" in status
    held = [n for n, (s, r) in c.states().items() if "storm hold" in r]
    assert all(c.sim.snapshot()["hosts"][n]["power"] == "on" for n in held)
    # The operator checked: a rack lost power. Lift the hold.
    out = c.cli("resume", "--storm", "--reason", "rack PDU failed")
    assert out.returncode == 0, out.stderr
    assert "storm hold lifted" in out.stdout
    for name in dead:
        c.wait_state(name, "evacuated", timeout=60)
    snap = c.sim.snapshot()
    assert _off(c) == sorted(dead)
    assert all(s["status"] == "ACTIVE" and s["host"] not in dead
               for s in snap["servers"].values())


def test_fencing_rate_limit_lets_hosts_wait_their_turn(make_cloud):
    c = make_cloud({"policy": {"threshold": 100, "fence_rate_hosts": 3,
                               "fence_rate_interval": 15}},
                   hosts=HOSTS, servers_per_host=1)
    c.start_engine()
    dead = ["compute-%d" % i for i in range(6)]
    for name in dead:
        c.sim.kill(name)
    c.engine.wait(lambda: sum("rate limit" in r for _, r in
                              c.states().values()) == 3, 30,
                  "three hosts waiting for the rate limit")
    assert len(_off(c)) == 3
    status = c.engine.status()
    assert len(status["rate_limit"]["waiting"]) == 3
    assert "fencing rate limit: waiting" in c.cli("status").stdout
    # One slot every 5 s: all six are fenced within the next interval.
    wait_for(lambda: _off(c) == sorted(dead), 30, "all six fenced")
    for name in dead:
        c.wait_state(name, "evacuated", timeout=30)


def test_a_flapping_host_is_held_not_fenced_again_and_again(make_cloud):
    c = make_cloud({"policy": {"flap_count": 2, "flap_window": 300},
                    "detection": {"grace_period": 8.0}},
                   hosts=HOSTS, servers_per_host=1)
    c.start_engine()
    for _ in range(2):                 # the host drops out and comes back
        c.sim.kill("compute-4")
        c.wait_state("compute-4", "suspect", timeout=20)
        c.sim.power_cycle("compute-4")     # back within the grace period
        c.wait_state("compute-4", "active", timeout=20)
    c.sim.kill("compute-4")
    c.engine.wait(lambda: "flapping" in c.states()["compute-4"][1], 30,
                  "compute-4 held as flapping")
    time.sleep(3)
    assert c.sim.snapshot()["hosts"]["compute-4"]["power"] == "on"
    assert not c.sim.snapshot()["migrations"]
    # The operator looked at it: resume recovers it as usual.
    assert c.cli("resume", "compute-4").returncode == 0
    c.wait_state("compute-4", "evacuated", timeout=30)
    assert c.sim.snapshot()["hosts"]["compute-4"]["power"] == "off"


def test_long_evacuations_do_not_delay_the_fencing_of_other_hosts(make_cloud):
    """Two workers, four hosts dying at once, evacuations of ~10 s each:
    before, hosts three and four waited for a free worker."""
    c = make_cloud({"DEFAULT": {"workers": 2},
                    "evacuation": {"concurrency": 1}},
                   hosts=HOSTS, servers_per_host=5, evacuation_time=2.0)
    c.start_engine()
    dead = ["compute-%d" % i for i in range(4)]
    t0 = time.time()
    for name in dead:
        c.sim.kill(name)
    wait_for(lambda: _off(c) == dead, 60, "all four powered off")
    all_off = time.time()          # at or after the fourth power-off
    for name in dead:
        c.wait_state(name, "evacuated", timeout=90)
    evacs = [a for a in c.journal().actions() if a["kind"] == "evacuate"]
    assert len(evacs) == 4 and min(
        a["finished_at"] - a["started_at"] for a in evacs) >= 8.0, evacs
    # The order, not a latency: every host was powered off before the
    # first (>= 8 s) evacuation ended, so no fencing waited for one.
    assert all_off < min(a["finished_at"] for a in evacs), (
        all_off - t0, [a["finished_at"] - t0 for a in evacs])


def test_zone_and_aggregate_storms_hold_only_their_own_hosts(make_cloud):
    """24 hosts in two availability zones (aggregates with a zone), and a
    rack modelled as an aggregate inside the second. A zone losing most of
    its hosts, and a rack losing most of its hosts, hold fencing there;
    the cloud as a whole is below the threshold, and a host dying
    elsewhere is recovered as usual."""
    names = ["compute-%d" % i for i in range(24)]
    aggregates = {"az1-hosts": {"hosts": names[:12], "availability_zone":
                                "az1"},
                  "az2-hosts": {"hosts": names[12:], "availability_zone":
                                "az2"},
                  "rack-a": {"hosts": names[12:16]}}
    c = make_cloud({"policy": {"threshold": 50, "threshold_per_zone": True,
                               "threshold_per_aggregate": True}},
                   hosts=24, servers_per_host=1, aggregates=aggregates)
    c.start_engine()
    zone_dead = names[:7]                # 7 of az1's 12: 58 %
    rack_dead = names[12:15]             # 3 of rack-a's 4: 75 %
    for name in zone_dead + rack_dead:   # 10 of 24 in all: 42 %
        c.sim.kill(name)

    def held(where):
        return sorted(n for n, (_, r) in c.states().items()
                      if "storm hold" in r and where in r)
    c.engine.wait(lambda: held("in zone az1") == sorted(zone_dead)
                  and held("in aggregate rack-a") == sorted(rack_dead), 40,
                  "zone az1 and rack-a held")
    # A host of az2 outside the rack dies: its scopes are calm.
    c.sim.kill(names[20])
    c.wait_state(names[20], "evacuated", timeout=40)
    assert _off(c) == [names[20]]
    status = c.cli("status").stdout
    assert "in zone az1" in status and "in aggregate rack-a" in status
    # The operator checked both: lift the holds; every host is recovered.
    out = c.cli("resume", "--storm", "--reason", "az1 power, rack-a ToR")
    assert out.returncode == 0, out.stderr
    for name in zone_dead + rack_dead:
        c.wait_state(name, "evacuated", timeout=60)
    dead = set(zone_dead + rack_dead + [names[20]])
    assert _off(c) == sorted(dead)
    snap = c.sim.snapshot()
    assert all(s["status"] == "ACTIVE" and s["host"] not in dead
               for s in snap["servers"].values())
