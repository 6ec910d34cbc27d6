"""Issue 37 end to end on the simulator: a host loses power together with
its BMC, so nothing of it answers. The real engine (``instanceha run``)
hears the real agent code of every simulated host, each arming a
watchdog on a test device (a FIFO under the test's temp dir, played by
instanceha/sim/watchdog_hw.py) and probing three peers. The victim's
inventory entry has two fencing levels, Redfish then the watchdog: the
Redfish level fails (its BMC answers nothing), the watchdog level
condemns the host, its peers acknowledge the pill, and once its
watchdog deadline has passed its servers are evacuated. No live host is
ever reset or powered off.

The invariant fixture (functional/conftest.py) fails the test for any
evacuate request that reached Nova while the victim could still have
been running as far as anyone could know: its BMC answers nothing, so
its power reads Off only once the simulator's own watchdog deadline
(its last armed beat or its peers holding the pill, whichever is later,
plus the isolation and watchdog timeouts) has passed.

Timings: agents beat every 0.2 s, check every 0.5 s; isolation 3 s,
watchdog 3 s, the engine's margin 2 s. Nova's view is slow on purpose
(a host is down after 60 s; the engine's own delta 30 s): the recovery
comes from the agents. Budgets (90 s for a recovery that takes ~12 s on
an idle machine) hold on a loaded 2-core machine.
"""

import os
import time

import pytest
import yaml

from functional import waiting
from functional.engine_process import EngineProcess
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

VICTIM = "compute-1"
ISO, WDT, CHECK, MARGIN = 3.0, 3, 0.5, 2.0


def _levels(workdir, hosts):
    """Give ``hosts`` two fencing levels: their Redfish BMC, then the
    watchdog."""
    path = os.path.join(workdir, "bmc.yaml")
    with open(path) as f:
        inv = yaml.safe_load(f)
    for name in hosts:
        inv["hosts"][name] = {"levels": [dict(inv["hosts"][name]),
                                         {"driver": "watchdog"}]}
    with open(path, "w") as f:
        yaml.safe_dump(inv, f)
    os.chmod(path, 0o600)


@pytest.fixture
def bed(tmp_path):
    cloud = SimCloud(hosts=5, servers_per_host=2, boot_time=1.0,
                     service_down_time=60.0, evacuation_time=0.2)
    srv = SimServer(cloud).start()
    work = str(tmp_path)
    setup = simrun.agent_setup(work, interval=0.2)
    conf_path = simrun.write_config(work, srv, {
        "detection": {"delta": 30.0},
        "agent": {"silence_timeout": 1.5, "nova_report_interval": 1.0,
                  "challenge_interval": 0.5},
        "fencing": {"watchdog_margin": MARGIN, "watchdog_wait_max": 60.0}},
        agents=setup)
    _levels(work, cloud.hosts)
    agents = SimAgents(cloud, **setup.sim_args(),
                       watchdog_dir=os.path.join(work, "wdt"),
                       watchdog_timeout=WDT, isolation_timeout=ISO,
                       watchdog_check_interval=CHECK, peer_count=3).start()
    engine = EngineProcess(work, conf_path, os.path.join(work,
                                                         "status.json"),
                           "sqlite:///" + os.path.join(work,
                                                       "journal.sqlite"))
    try:
        engine.start(len(cloud.hosts), timeout=60)
        engine.wait(lambda: all(
            h.get("agent") for h in engine.status().get("hosts", [])),
            60, "every host's agent to be heard")
        # Every host's watchdog armed (its agent heard the engine).
        waiting.wait_for(lambda: all(
            a.hardware.armed for a in agents.agents.values()), 60,
            "every host's watchdog armed")
        yield cloud, engine, agents
    finally:
        engine.stop()
        agents.stop()
        srv.stop()


def test_a_host_that_loses_power_with_its_bmc_is_fenced_by_its_watchdog(
        bed):
    cloud, engine, agents = bed
    ids = sorted(s.id for s in cloud.servers.values() if s.host == VICTIM)
    assert ids
    t0 = time.time()
    cloud.lose_power(VICTIM)
    state, reason = engine.wait_state(VICTIM, "evacuated", timeout=90)
    took = time.time() - t0
    # Its servers run elsewhere.
    for sid in ids:
        s = cloud.servers[sid]
        assert s.host != VICTIM and s.status == "ACTIVE", (sid, s.host,
                                                          s.status)
    # The watchdog level fenced it, after the Redfish level failed.
    fenced = [t for t in engine.journal().transitions()
              if t["host_name"] == VICTIM and t["dst"] == "fenced"]
    assert fenced, engine.log_path
    why = fenced[0]["reason"]
    assert "fenced by level 2 (watchdog)" in why, why
    assert "after level 1 (redfish" in why, why
    host = next(h for h in engine.status()["hosts"] if h["name"] == VICTIM)
    assert host["fenced_by"]["level"] == 2, host
    assert host["fenced_by"]["how"].startswith(
        "self-fenced by watchdog, assumed at"), host
    assert "self-fenced by watchdog, assumed at" in why, why
    # The condemnation was journalled before the pill left.
    with engine.reading_journal() as j:
        steps = [a for a in j.actions() if a["host_name"] == VICTIM
                 and a["kind"] == "condemn"]
    assert steps, engine.log_path
    log = engine.log_text()
    assert "watchdog_condemned" in log
    # No evacuate request before its watchdog deadline: each reached Nova
    # with the host proven off (the invariant fixture checks it too).
    requests = [r for r in cloud.evacuate_requests if r.host == VICTIM]
    assert sorted({r.server for r in requests}) == ids
    assert all(r.power == "Off" for r in requests), [
        r.describe() for r in requests]
    assert min(r.time for r in requests) >= t0 + ISO + WDT
    # Its peers held its pill (the engine's relays), and nobody else was
    # touched: no live host reset by its watchdog or powered off.
    holders = [n for n in agents.agent(VICTIM).peer_names
               if agents.agent(n).peers is not None
               and agents.agent(n).peers.relaying()]
    assert len(holders) >= 2, holders
    assert agents.resets == [] and cloud.watchdog_resets == []
    assert all(h.power_on for n, h in cloud.hosts.items() if n != VICTIM)
    assert took < 90
