#!/usr/bin/env python3
"""A storm on the simulator, with the real engine: hosts dying in waves.

100 hosts x 20 servers (default). Waves of hosts lose their nova-compute
(their guests would still run: only fencing makes them safe to rebuild),
one wave every --wave-interval seconds, until more hosts are lost than
[policy] threshold allows. Measured once every lost host is evacuated,
failed or held by the storm hold (before the storm window ends and the
hold lifts by itself). Reports: hosts fenced against what the threshold
allows, hosts held by the storm hold, servers recovered (ACTIVE or SHUTOFF
on a live host), time from the first death to the last server ACTIVE, and
servers stranded (on a fenced host, or in ERROR): the target is zero.

    .venv/bin/python benchmarks/storm.py [--hosts 100] [--servers 20]
        [--waves 6] [--wave-size 10] [--wave-interval 15] [--threshold 50]
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instanceha import conf as conf_pkg  # noqa: E402
from instanceha import log, service, simrun  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402


def _wait(pred, timeout, step=0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return time.monotonic()
        time.sleep(step)
    return None


def run(args, workdir):
    cloud = SimCloud(hosts=args.hosts, servers_per_host=args.servers,
                     host_vcpus=100000, evacuation_time=args.evacuation_time)
    srv = SimServer(cloud).start()
    path = simrun.write_config(workdir, srv, {
        "policy": {"threshold": args.threshold},
        "DEFAULT": {"workers": args.workers},
        "evacuation": {"concurrency": args.concurrency}})
    conf = conf_pkg.load(["--config-file", path])
    svc = service.Service(conf)
    svc.start()
    try:
        if _wait(lambda: len(svc.engine.records()) == args.hosts, 60) is None:
            raise SystemExit("the engine did not see every host")
        names = sorted(cloud.hosts, key=lambda n: int(n.rsplit("-", 1)[1]))
        dead = []
        t0 = time.monotonic()
        for w in range(args.waves):
            wave = names[w * args.wave_size:(w + 1) * args.wave_size]
            for name in wave:
                cloud.kill(name)
            dead += wave
            if w + 1 < args.waves:
                time.sleep(args.wave_interval)

        def settled():
            states = {r.name: (r.state.value, r.reason)
                      for r in svc.engine.records().values()}
            return all(states[n][0] in ("evacuated", "failed")
                       or (states[n][0] == "suspect"
                           and "storm hold" in states[n][1])
                       for n in dead)
        t_settled = _wait(settled, args.timeout)
        snap = cloud.snapshot()
        states = {r.name: r.state.value
                  for r in svc.engine.records().values()}
        failed = [n for n in dead if states[n] == "failed"]
        fenced = [n for n in dead if snap["hosts"][n]["power"] == "off"]
        held = [n for n in dead if n not in fenced]
        live = {n for n, h in snap["hosts"].items()
                if h["compute_alive"] and h["power"] == "on"}
        victims = [s for s in snap["servers"].values() if s["host"] in fenced]
        moved = [m for m in snap["migrations"]]
        recovered = [s for s in snap["servers"].values()
                     if s["host"] in live
                     and s["status"] in ("ACTIVE", "SHUTOFF")
                     and any(m["instance_uuid"] == s["id"] for m in moved)]
        stranded = victims + [s for s in snap["servers"].values()
                              if s["status"] == "ERROR"]
        last = max((m["updated_at"] for m in moved
                    if m["status"] in ("done", "completed")), default=None)
        first_death = snap["now"] - (time.monotonic() - t0)
        return dict(
            dead=len(dead), fenced=len(fenced), held=len(held),
            failed=len(failed),
            allowed=args.hosts * args.threshold // 100,
            servers_on_fenced=len(fenced) * args.servers,
            recovered=len(recovered), stranded=len(stranded),
            to_last_active=(last - first_death) if last else None,
            settled=(t_settled - t0) if t_settled else None,
            cluster=svc.engine.snapshot()["cluster"]["reason"])
    finally:
        svc.stop()
        srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--servers", type=int, default=20)
    p.add_argument("--waves", type=int, default=6)
    p.add_argument("--wave-size", type=int, default=10)
    p.add_argument("--wave-interval", type=float, default=15.0)
    p.add_argument("--threshold", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--evacuation-time", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    logdir = tempfile.mkdtemp(prefix="instanceha-storm-")
    log.setup("console", False, stream=open(os.path.join(logdir, "log"), "w"))
    print("storm on the simulator: %d hosts x %d servers, %d waves of %d "
          "hosts every %.0fs, threshold %d%%" % (
              args.hosts, args.servers, args.waves, args.wave_size,
              args.wave_interval, args.threshold))
    r = run(args, os.path.join(logdir, "run"))
    print("hosts lost:               %d" % r["dead"])
    print("hosts fenced:             %d (threshold allows %d: %.2fx)" % (
        r["fenced"], r["allowed"], r["fenced"] / max(r["allowed"], 1)))
    print("hosts held (storm hold):  %d" % r["held"])
    print("hosts failed (operator):  %d" % r["failed"])
    print("servers on fenced hosts:  %d" % r["servers_on_fenced"])
    print("servers recovered:        %d" % r["recovered"])
    print("servers stranded:         %d (target 0)" % r["stranded"])
    if r["to_last_active"] is not None:
        print("first death -> last ACTIVE: %.1f s" % r["to_last_active"])
    if r["settled"] is not None:
        print("first death -> settled:     %.1f s" % r["settled"])
    else:
        print("did not settle within %.0f s" % args.timeout)
    print("status: %s" % (r["cluster"] or "ok")[:200])
    print("logs: %s" % logdir)
    ok = (r["stranded"] == 0 and r["settled"] and not r["failed"]
          and r["fenced"] <= r["allowed"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
