#!/usr/bin/env python3
"""Recovery time of one dead host, on the simulator, with the real engine.

For a host with N servers: time from the host's death (its nova-compute
stops) to every one of its servers ACTIVE on another host, split into
detection+fencing (death -> evacuating) and evacuation (evacuating -> all
ACTIVE). The evacuation part is printed next to its floor, set by the
simulator's time per server (the scheduler's schedule_time, then the
rebuild's evacuation_time) and the configured concurrency:
ceil(N / concurrency) * (schedule_time + evacuation_time); detection next
to its floor,
delta + grace_period - report_interval (Nova gives no signal that a
compute died; its last heartbeat may be one report_interval old).

    .venv/bin/python benchmarks/recovery.py [--servers 10 100] [--concurrency 10]
"""

import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instanceha import conf as conf_pkg  # noqa: E402
from instanceha import log, service, simrun  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402


SERVER_RAM_MB, SERVER_DISK_GB = 2048, 20


def _wait(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return time.monotonic()
        time.sleep(0.02)
    raise SystemExit("timed out")


def run(n, concurrency, evac_time, workdir):
    # Every host holds its own n servers and a third of the victim's: size
    # them for twice n, so the capacity preflight (rightly) holds nothing
    # back. The simulator's default host (256 GB RAM, 4000 GB disk, 2 GB /
    # 20 GB servers) holds 128: too few for 100 + 34.
    room = max(2 * n, 64)
    cloud = SimCloud(hosts=4, servers_per_host=n, host_vcpus=10000,
                     server_ram_mb=SERVER_RAM_MB,
                     server_disk_gb=SERVER_DISK_GB,
                     host_ram_mb=room * SERVER_RAM_MB,
                     host_disk_gb=room * SERVER_DISK_GB,
                     evacuation_time=evac_time)
    srv = SimServer(cloud).start()
    path = simrun.write_config(workdir, srv, {
        "evacuation": {"concurrency": concurrency}})
    conf = conf_pkg.load(["--config-file", path])
    svc = service.Service(conf)
    svc.start()
    try:
        _wait(lambda: len(svc.engine.records()) == 4 and all(
            r.state.value == "active" for r in svc.engine.records().values()),
            30)
        victim = "compute-1"
        ids = [sid for sid, s in cloud.snapshot()["servers"].items()
               if s["host"] == victim]

        def state():
            return [r.state.value for r in svc.engine.records().values()
                    if r.name == victim][0]

        cloud.kill(victim)
        t0 = time.monotonic()
        t_evac = _wait(lambda: state() == "evacuating", 60)

        def all_active():
            # Not cloud.snapshot(): it sums every host's usage over every
            # server and migration, under the cloud's lock and the GIL this
            # process shares with the engine, 50 times a second.
            servers = {s.id: s for s in cloud.list_servers()}
            return all(servers[i].host != victim
                       and servers[i].status == "ACTIVE" for i in ids)
        t_done = _wait(all_active, 600)
        return dict(detect=t_evac - t0, evacuate=t_done - t_evac,
                    total=t_done - t0,
                    # The last heartbeat may be up to report_interval old
                    # at the death: Nova's updated_at is that much older.
                    detect_floor=conf.detection.delta
                    + conf.detection.grace_period - cloud.report_interval,
                    evac_floor=math.ceil(n / concurrency)
                    * (cloud.schedule_time + cloud.evacuation_time))
    finally:
        svc.stop()
        srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, nargs="+", default=[10, 100])
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--evacuation-time", type=float, default=0.5)
    args = p.parse_args()
    logdir = tempfile.mkdtemp(prefix="instanceha-bench-")
    log.setup("console", False, stream=open(os.path.join(logdir, "log"), "w"))
    print("recovery of one dead host on the simulator (evacuation %.2fs per "
          "server, concurrency %d)" % (args.evacuation_time, args.concurrency))
    print("%8s %10s %10s %12s %12s %10s %10s %6s" % (
        "servers", "total s", "detect s", "floor det s", "evacuate s",
        "floor ev s", "ev ratio", "load"))
    for n in args.servers:
        # The machine's load average: on a shared machine the times
        # depend on it.
        load = os.getloadavg()[0]
        r = run(n, args.concurrency, args.evacuation_time,
                os.path.join(logdir, "n%d" % n))
        print("%8d %10.2f %10.2f %12.2f %12.2f %10.2f %9.2fx %6.1f" % (
            n, r["total"], r["detect"], r["detect_floor"], r["evacuate"],
            r["evac_floor"], r["evacuate"] / r["evac_floor"], load),
            flush=True)
    print("logs: %s" % logdir)


if __name__ == "__main__":
    main()
