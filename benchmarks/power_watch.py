#!/usr/bin/env python3
"""Power state as evidence, measured: time from a host losing power to the
first evacuation request for its servers, on the simulator with the real
engine (in this process), under three settings:

* ``grace``: [fencing] power_evidence off: the heartbeat must be older than
  [detection] delta, then the grace period runs;
* ``probe``: power_evidence on (the default): when the heartbeat is lost
  the BMC is read; Off skips the grace period;
* ``watch``: plus [audit] power_watch_interval: the BMC read On then Off
  shortens the heartbeat wait to [audit] power_off_delta.

Timings are scaled down from the defaults so a run takes minutes (Nova's
report interval 2 s instead of 10; delta 10 s, grace 5 s, power_off_delta
5 s, reconciler poll 1 s, watch 1 s). With the defaults (report 10 s,
delta 30 s, grace 10 s, power_off_delta 20 s, poll 10 s) the same
structure gives roughly 45 s, 35 s and 25 s.

    .venv/bin/python benchmarks/power_watch.py [--runs 5]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instanceha import conf as conf_pkg  # noqa: E402
from instanceha import log, service, simrun  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402
from benchmarks.storm import _wait  # noqa: E402

VARIANTS = {
    "grace": {"fencing": {"power_evidence": False}},
    "probe": {},
    "watch": {"audit": {"power_watch_interval": 1.0,
                        "power_off_delta": 5.0}},
}


def measure(name, runs, hosts, workdir):
    cloud = SimCloud(hosts=hosts, servers_per_host=2, report_interval=2.0,
                     service_down_time=60.0, evacuation_time=0.2)
    srv = SimServer(cloud).start()
    overrides = {"detection": {"poll_interval": 1.0, "delta": 10.0,
                               "grace_period": 5.0},
                 "policy": {"threshold": 100},
                 "audit": {"interval": 3600}}
    for group, opts in VARIANTS[name].items():
        overrides.setdefault(group, {}).update(opts)
    path = simrun.write_config(os.path.join(workdir, name), srv, overrides)
    svc = service.Service(conf_pkg.load(["--config-file", path]))
    svc.start()
    times = []
    try:
        _wait(lambda: len(svc.engine.records()) == hosts, 60)
        time.sleep(3)                     # a watch read of every host: On
        for i in range(runs):
            host = "compute-%d" % i
            t0 = time.monotonic()
            cloud.power(host, False)      # PSU failure: the host is Off
            t1 = _wait(lambda: any(m["source_compute"] == host for m in
                                   cloud.snapshot()["migrations"]), 120,
                       step=0.05)
            if t1 is None:
                raise SystemExit("%s: %s never evacuated" % (name, host))
            times.append(t1 - t0)
    finally:
        svc.stop()
        srv.stop()
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hosts", type=int, default=20)
    args = p.parse_args()
    log.setup("console", False, stream=open(os.devnull, "w"))
    with tempfile.TemporaryDirectory() as workdir:
        results = {name: measure(name, args.runs, args.hosts, workdir)
                   for name in VARIANTS}
    base = statistics.median(results["grace"])
    print("power lost -> first evacuation request (%d hosts, %d runs each)"
          % (args.hosts, args.runs))
    for name, times in results.items():
        med = statistics.median(times)
        print("  %-6s median %5.1f s  min %5.1f s  max %5.1f s  (%.2fx of "
              "grace)" % (name, med, min(times), max(times), med / base))


if __name__ == "__main__":
    main()
