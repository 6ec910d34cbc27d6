#!/usr/bin/env python3
"""A storm on the simulator, with the real engine: hosts dying in waves.

100 hosts x 20 servers (default). Waves of hosts lose their nova-compute
(their guests would still run: only fencing makes them safe to rebuild),
one wave every --wave-interval seconds, until more hosts are lost than
[policy] threshold allows. Phase 1, the storm as instanceha meets it:
hosts fenced against what the threshold allows, hosts held by the storm
hold. Phase 2, an operator accepts the storm (``resume --storm``): every
lost host is recovered; servers rebuilt (ACTIVE or SHUTOFF on a live host),
servers sent again because their destination died in the storm, time from
the first death to the last server ACTIVE, servers stranded (on a fenced
host, or in ERROR): the target is zero.

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

        def states():
            return {r.name: (r.state.value, r.reason)
                    for r in svc.engine.records().values()}

        def held_or_past_fencing():
            st = states()
            return all(st[n][0] in ("evacuating", "evacuated", "failed")
                       or (st[n][0] == "suspect" and "storm hold" in st[n][1])
                       for n in dead)
        # Phase 1: the storm as instanceha meets it.
        t_held = _wait(held_or_past_fencing, args.timeout)
        snap = cloud.snapshot()
        fenced_in_storm = [n for n in dead
                           if snap["hosts"][n]["power"] == "off"]
        held = [n for n, (st, why) in states().items()
                if n in dead and "storm hold" in why]
        # Phase 2: the operator looks, accepts (resume --storm): every
        # lost host is recovered.
        svc.engine.acknowledge_storm("benchmark: a rack lost power")

        def settled():
            st = states()
            return all(st[n][0] in ("evacuated", "failed") for n in dead)
        t_settled = _wait(settled, args.timeout)
        snap = cloud.snapshot()
        failed = [n for n, (st, _) in states().items()
                  if n in dead and st == "failed"]
        fenced = [n for n in dead if snap["hosts"][n]["power"] == "off"]
        live = {n for n, h in snap["hosts"].items()
                if h["compute_alive"] and h["power"] == "on"}
        victims = [s for s in snap["servers"].values() if s["host"] in fenced]
        moved = snap["migrations"]
        rebuilt = {m["instance_uuid"] for m in moved}
        recovered = [s for s in snap["servers"].values()
                     if s["host"] in live and s["id"] in rebuilt
                     and s["status"] in ("ACTIVE", "SHUTOFF")]
        stranded = victims + [s for s in snap["servers"].values()
                              if s["status"] == "ERROR"]
        last = max((m["updated_at"] for m in moved
                    if m["status"] in ("done", "completed")), default=None)
        first_death = snap["now"] - (time.monotonic() - t0)
        return dict(
            dead=len(dead), fenced_in_storm=len(fenced_in_storm),
            held=len(held), fenced=len(fenced), failed=len(failed),
            allowed=args.hosts * args.threshold // 100,
            servers_to_move=len(rebuilt), recovered=len(recovered),
            stranded=len(stranded),
            to_last_active=(last - first_death) if last else None,
            held_after=(t_held - t0) if t_held else None,
            settled=(t_settled - t0) if t_settled else None,
            retries=sum(1 for e in svc.journal.evacuations()
                        if e["status"] == "retry"))
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
    print("hosts lost:                    %d" % r["dead"])
    print("fenced during the storm:       %d (threshold allows %d: %.2fx)" % (
        r["fenced_in_storm"], r["allowed"],
        r["fenced_in_storm"] / max(r["allowed"], 1)))
    print("held by the storm hold:        %d (after %s s)" % (
        r["held"], "%.1f" % r["held_after"] if r["held_after"] else "-"))
    print("after 'resume --storm': fenced %d, failed %d" % (
        r["fenced"], r["failed"]))
    print("servers rebuilt elsewhere:     %d ACTIVE/SHUTOFF on live hosts "
          "of %d evacuated (%d sent again: destination died)" % (
              r["recovered"], r["servers_to_move"], r["retries"]))
    print("servers stranded:              %d (target 0)" % r["stranded"])
    if r["to_last_active"] is not None:
        print("first death -> last ACTIVE:    %.1f s" % r["to_last_active"])
    if r["settled"] is None:
        print("did not settle within %.0f s" % args.timeout)
    print("logs: %s" % logdir)
    ok = (r["stranded"] == 0 and r["settled"] and not r["failed"]
          and r["fenced_in_storm"] <= r["allowed"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
