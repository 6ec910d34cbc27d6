#!/usr/bin/env python3
"""A host loses power together with its BMC, so nothing of it answers:
kill to last server ACTIVE through the watchdog fencing level, on the
simulator, with the real engine and the real agents (issue 37).

Each run is a fresh simulated cloud (5 hosts x --servers servers) with
Nova's defaults (report_interval 10 s, service_down_time 60 s), a fresh
``instanceha run`` process on the engine's production defaults (as
benchmarks/detection.py sets them: simrun's shortened timings put back
to the options' defaults, [fencing] watchdog_margin and watchdog_wait_max
as shipped), every host's inventory entry with two levels (its Redfish
BMC, then ``watchdog``), and the real agent code of every simulated host
beating each second, with the agents' watchdog defaults ([agent]
watchdog_timeout, isolation_timeout, watchdog_check_interval) on a test
device each (a FIFO under the run's temp dir, whose reader plays the
chip and resets its host when unfed: instanceha/sim/watchdog_hw.py) and
three peers each.

One host loses power with its BMC (``SimCloud.lose_power``: host,
agent and watchdog stop; its Redfish requests are dropped unanswered).
Kill moments are stepped over the host's Nova heartbeat phase, as in
benchmarks/detection.py. From the kill, each run measures:

- detection: the host leaves 'active' (the journal's transition);
- decide wait: to the decision to fence (grace period, corroboration);
- watchdog wait: the decision to 'fenced': the condemnation (at the
  decision, while the Redfish level is tried and fails), the peers
  acknowledging the pill, and the wait for
  the watchdog deadline (max(last beat, pill published) + isolation
  timeout + watchdog timeout + the engine's margin);
- evacuation: 'fenced' to the last of its servers ACTIVE elsewhere;
- total: kill to the last server ACTIVE.

Also: 'pill held', when a majority of the victim's peers held its pill
(the simulator's view), from the kill. Live hosts reset: other hosts
reset by their watchdog, or powered off, during the run (the target is
none). The last line is exactly::

    bmc_down: median total X s (bound Y s), live hosts reset N

where the bound is the isolation timeout + the watchdog timeout + 15 s;
the target is median <= bound and N = 0. The machine's load average is
printed: on a shared machine the times depend on it.

    .venv/bin/python benchmarks/bmc_down.py [--runs 5] [--servers 2]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import detection  # noqa: E402
from functional.engine_process import EngineProcess  # noqa: E402
from instanceha import conf as conf_pkg  # noqa: E402
from instanceha import log, simrun  # noqa: E402
from instanceha.agent import selffence  # noqa: E402
from instanceha.conf import agent as agent_conf  # noqa: E402
from instanceha.util import waiting  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402
from instanceha.sim.agents import SimAgents  # noqa: E402

HOSTS = 5
PEERS = 3
VICTIM = "compute-1"
REPORT_INTERVAL = detection.REPORT_INTERVAL
SERVICE_DOWN_TIME = detection.SERVICE_DOWN_TIME
SLACK = 15.0


def agent_defaults():
    """The agents' watchdog options as shipped."""
    conf = agent_conf.new_conf()
    conf(args=[], default_config_files=[])
    g = conf.agent
    return dict(watchdog_timeout=g.watchdog_timeout,
                isolation_timeout=g.isolation_timeout,
                watchdog_check_interval=g.watchdog_check_interval,
                interval=g.interval)


def engine_defaults():
    """detection.production_defaults() plus the watchdog method's
    options as shipped."""
    groups = detection.production_defaults()
    registered = {}
    for module in conf_pkg.MODULES:
        for group, opts in module.list_opts().items():
            for opt in opts:
                registered[(group, opt.name)] = opt.default
    fencing = groups.setdefault("fencing", {})
    for name in ("watchdog_margin", "watchdog_wait_max"):
        fencing[name] = registered[("fencing", name)]
    return groups


def two_levels(workdir):
    """Every host's entry: its Redfish BMC, then the watchdog."""
    path = os.path.join(workdir, "bmc.yaml")
    with open(path) as f:
        inv = yaml.safe_load(f)
    for name, entry in list(inv["hosts"].items()):
        inv["hosts"][name] = {"levels": [dict(entry),
                                         {"driver": "watchdog"}]}
    with open(path, "w") as f:
        yaml.safe_dump(inv, f)
    os.chmod(path, 0o600)


def _pill_held(agents, host, majority=True):
    """When a majority of ``host``'s peers (``majority`` false: the first
    of them) first held a pill for it (the simulator's time), or None."""
    with agents._lock:
        held = dict(agents._pills_held.get(host, {}))
    need = (selffence.majority(len(agents.agent(host).peer_names))
            if majority else 1)
    times = sorted(at for _, at in held.values())
    return times[need - 1] if len(times) >= need else None


def run(phase, start_phase, servers, workdir, boot_time, wd):
    cloud = SimCloud(hosts=HOSTS, servers_per_host=servers,
                     boot_time=boot_time, report_interval=REPORT_INTERVAL,
                     service_down_time=SERVICE_DOWN_TIME)
    srv = SimServer(cloud).start()
    start_at = (detection._last_heartbeat(cloud, VICTIM, time.time())
                + start_phase * REPORT_INTERVAL)
    setup = simrun.agent_setup(workdir, interval=wd["interval"])
    conf_path = simrun.write_config(workdir, srv, engine_defaults(),
                                    agents=setup)
    two_levels(workdir)
    agents = SimAgents(cloud, **setup.sim_args(),
                       watchdog_dir=os.path.join(workdir, "wdt"),
                       watchdog_timeout=wd["watchdog_timeout"],
                       isolation_timeout=wd["isolation_timeout"],
                       watchdog_check_interval=wd["watchdog_check_interval"],
                       peer_count=PEERS).start()
    engine = EngineProcess(workdir, conf_path,
                           os.path.join(workdir, "status.json"),
                           "sqlite:///" + os.path.join(workdir,
                                                       "journal.sqlite"))
    try:
        time.sleep(max(0.0, start_at - time.time()))
        engine.start(HOSTS, timeout=90)
        engine.wait(lambda: all(s == "active" for s, _ in
                                engine.states().values()), 60,
                    "every host active")
        engine.wait(lambda: all(
            h.get("agent") for h in engine.status().get("hosts", [])),
            60, "every host's agent to be heard")
        engine.wait(lambda: all(a.hardware.armed
                                for a in agents.agents.values()), 60,
                    "every host's watchdog armed")
        ids = [s.id for s in cloud.list_servers() if s.host == VICTIM]
        now = time.time()
        at = (detection._last_heartbeat(cloud, VICTIM, now)
              + phase * REPORT_INTERVAL)
        if at < now + 0.05:
            at += REPORT_INTERVAL
        time.sleep(at - time.time())
        cloud.lose_power(VICTIM)
        t0 = time.time()
        marks = {}

        def done():
            by_id = {s.id: s for s in cloud.list_servers()}
            if all(by_id[i].host != VICTIM and by_id[i].status == "ACTIVE"
                   for i in ids):
                marks["done"] = time.time() - t0
                return True
            return False
        limit = wd["isolation_timeout"] + wd["watchdog_timeout"] + 240
        if not waiting.wait_until(done, limit, 0.05):
            raise SystemExit("no recovery within %.0f s (states %s, log %s)"
                             % (limit, engine.states(), engine.log_path))
        trans = detection._transitions(engine, VICTIM, t0 - 1.0)
        left = next(t for t in trans if t["src"] == "active")
        decided = next(t for t in trans if t["dst"] == "fencing")
        fenced = next(t for t in trans if t["dst"] == "fenced")
        held = _pill_held(agents, VICTIM)
        first = _pill_held(agents, VICTIM, majority=False)
        others = [n for n in cloud.hosts if n != VICTIM]
        live_reset = sorted(
            {n for _, n in agents.resets if n != VICTIM}
            | {n for _, n, _ in cloud.watchdog_resets if n != VICTIM}
            | {n for n in others if not cloud.hosts[n].power_on})
        unsafe = [r.describe() for r in cloud.unsafe_evacuate_requests()]
        return dict(detect=left["at"] - t0,
                    wait=decided["at"] - left["at"],
                    watchdog=fenced["at"] - decided["at"],
                    evacuate=marks["done"] - (fenced["at"] - t0),
                    total=marks["done"],
                    held=None if held is None else held - t0,
                    condemned=None if first is None else first - t0,
                    decided=decided["at"] - t0,
                    live_reset=live_reset, unsafe=unsafe,
                    why=fenced["reason"])
    finally:
        engine.stop()
        agents.stop()
        srv.stop()


def _opt(value):
    return "-" if value is None else "%.2f" % value


COLUMNS = [("detect", "detection"), ("wait", "decide wait"),
           ("watchdog", "watchdog wait"), ("evacuate", "evacuation"),
           ("total", "total")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5,
                   help="power losses, each on a fresh cloud")
    p.add_argument("--servers", type=int, default=2,
                   help="servers per host (the victim's are evacuated)")
    p.add_argument("--boot-time", type=float, default=1.0,
                   help="the simulated hosts' boot time, seconds")
    args = p.parse_args()
    logdir = tempfile.mkdtemp(prefix="instanceha-bench-bmc-down-")
    log.setup("console", False, stream=open(os.path.join(logdir, "log"), "w"))
    wd = agent_defaults()
    eng = engine_defaults()
    bound = wd["isolation_timeout"] + wd["watchdog_timeout"] + SLACK
    print("host + BMC power loss -> last server ACTIVE through the watchdog "
          "level; simulator: %d hosts x %d servers, Nova report_interval "
          "%.0f s, service_down_time %.0f s; agents: interval %.0f s, "
          "isolation_timeout %.0f s, watchdog_timeout %d s, check interval "
          "%.0f s, %d peers each; engine: grace_period %.0f s, silence_"
          "timeout %.0f s, watchdog_margin %.0f s" % (
              HOSTS, args.servers, REPORT_INTERVAL, SERVICE_DOWN_TIME,
              wd["interval"], wd["isolation_timeout"],
              wd["watchdog_timeout"], wd["watchdog_check_interval"], PEERS,
              eng["detection"]["grace_period"],
              eng["agent"]["silence_timeout"],
              eng["fencing"]["watchdog_margin"]))
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    rows = []
    for i in range(args.runs):
        load = os.getloadavg()[0]
        r = run((i + 0.5) / args.runs, (0.5 + i * detection.GOLDEN) % 1.0,
                args.servers, os.path.join(logdir, "run-%d" % i),
                args.boot_time, wd)
        r["load"] = load
        rows.append(r)
        print("  run %d: total %.2f s (load %.1f)" % (i + 1, r["total"],
                                                      load), flush=True)
    print("\n%d power losses, seconds from the kill" % len(rows))
    print("  %-8s" % "run" + "".join("%14s" % label for _, label in COLUMNS)
          + "  decided condemned pill held  load")
    for i, r in enumerate(rows, 1):
        print("  %-8d" % i + "".join("%14.2f" % r[k] for k, _ in COLUMNS)
              + "  %7.2f %9s %9s %5.1f" % (
                  r["decided"], _opt(r["condemned"]), _opt(r["held"]),
                  r["load"]))
    for name, fn in (("median", statistics.median), ("min", min),
                     ("max", max)):
        print("  %-8s" % name + "".join(
            "%14.2f" % fn(r[k] for r in rows) for k, _ in COLUMNS))
    print("  (detection + decide wait + watchdog wait + evacuation = "
          "total. From the kill: decided, the decision to fence; "
          "condemned, the first peer held the victim's pill (the engine "
          "condemned it as it decided to fence, before the Redfish "
          "level's attempts: doc/safety.md rule 25); pill held, a "
          "majority of its peers held it: the watchdog deadline counts "
          "from then)")
    print("  fenced as: %s" % rows[0]["why"])
    unsafe = [u for r in rows for u in r["unsafe"]]
    print("  evacuate requests before the watchdog deadline: %s"
          % (len(unsafe) if unsafe else "none"))
    for line in unsafe:
        print("    " + line)
    live = sorted({n for r in rows for n in r["live_reset"]})
    resets = sum(len(r["live_reset"]) for r in rows)
    print("  live hosts reset or powered off: %s"
          % (", ".join(live) or "none"))
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    print("logs: %s" % logdir)
    median = statistics.median(r["total"] for r in rows)
    print("bmc_down: median total %.1f s (bound %.0f s), live hosts reset %d"
          % (median, bound, resets))


if __name__ == "__main__":
    main()
