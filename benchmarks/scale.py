#!/usr/bin/env python3
"""Scale: the real ``instanceha run`` against a simulated cloud of N hosts
x 20 servers, for several N (default 500, 1000, 2000, 5000: 100,000
servers at the top).

For each size it reports:
- CPU of one reconcile pass in the engine process (the os-services call,
  parsing, judging every host, handing the events over; median of the
  passes seen, from the reconciler's own last_pass_cpu) — target < 200 ms;
- the engine process's RSS once every host is known — target < 400 MB
  at 20,000 hosts;
- time from 20 simultaneous host deaths (nova-compute killed) to their
  power-off by the engine, next to the detection floor
  (delta + grace_period, minus Nova's report interval: the last heartbeat
  may be that old at the death) — target: the 20th within twice the floor;
- the CPU the engine and the simulator spent from the deaths to the 20th
  power-off, and the hosts powered off that were never killed (any is a
  false fencing: a live host's BMC turned off).

The simulator serves from this process; the engine is a separate process,
so its CPU and memory are its own. The machine's load average is printed
with each row: on a shared machine the times depend on it.

    .venv/bin/python benchmarks/scale.py [--hosts 500 1000 2000 5000]
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.engine_run import engine_process, read_status  # noqa: E402
from instanceha import simrun  # noqa: E402
from instanceha.util import waiting  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402

DEATHS = 20


@contextlib.contextmanager
def busy(cores):
    """``cores`` processes spinning on the CPU while the block runs."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(cores)]
    try:
        yield
    finally:
        for proc in spin:
            proc.kill()
            proc.wait()


def _rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def _cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def _wait(pred, timeout, step=0.1):
    return waiting.wait_until(pred, timeout, step)


def run(hosts, servers, poll, workdir, audit_interval=300.0, window=None):
    cloud = SimCloud(hosts=hosts, servers_per_host=servers,
                     host_vcpus=100000, evacuation_time=0.2)
    srv = SimServer(cloud).start()
    path = simrun.write_config(workdir, srv, {
        "detection": {"poll_interval": poll},
        # The fencing audit reads every BMC once per interval: simrun's
        # 10 s would be 500 reads a second at 5,000 hosts (2,000 at
        # 20,000), more than the engine can do, so it would run without
        # pause and take the CPU the storm needs. Production's default.
        "audit": {"interval": audit_interval},
        "DEFAULT": {"workers": 16}})
    with engine_process(path, workdir) as (proc, status_path, log_name):
        try:
            started = time.time()

            def known():
                st = read_status(status_path)
                return (st.get("generated_at", 0) > started
                        and len(st.get("hosts", [])) >= hosts
                        and all(h["state"] == "active" for h in st["hosts"]))
            if not _wait(known, 300, 0.5):
                raise SystemExit("%d hosts: the engine did not see every host "
                                 "active (log %s)" % (hosts, log_name))
            # Passes after the first (which creates every record).
            cpus = []
            last = None
            end = time.monotonic() + (window or max(6 * poll, 8))
            while time.monotonic() < end:
                rec = read_status(status_path).get("sources", {}).get("reconciler", {})
                if rec.get("passes") != last and rec.get("last_pass_cpu"):
                    last = rec["passes"]
                    cpus.append(rec["last_pass_cpu"])
                time.sleep(poll / 3)
            rss = _rss_mb(proc.pid)
            cpu_before = _cpu_s(proc.pid)
            victims = ["compute-%d" % i for i in range(0, hosts, hosts // DEATHS)]
            victims = victims[:DEATHS]
            load = os.getloadavg()[0]
            t0 = time.time()
            killed = {}
            for name in victims:
                cloud.kill(name)
                # The simulator's lock is shared with its API: under load a
                # kill may land late; each death is timed from its own kill.
                killed[name] = time.time() - t0
            off = {}

            def all_off():
                snap_hosts = cloud.hosts
                for name in victims:
                    if name not in off and not snap_hosts[name].power_on:
                        off[name] = time.time() - t0
                return len(off) == len(victims)
            sim_before = sum(os.times()[:2])
            _wait(all_off, 120, 0.05)
            cpu_storm = _cpu_s(proc.pid) - cpu_before
            rss_storm = _rss_mb(proc.pid)
            sim_storm = sum(os.times()[:2]) - sim_before
            others_off = sorted(name for name, h in cloud.hosts.items()
                                if name not in victims and not h.power_on)
            # Live hosts the engine has started to fence (or further) but not
            # powered off yet: false fencings in the making.
            time.sleep(0.5)      # the status file follows changes within 0.2 s
            others_fencing = sorted(
                h["name"] for h in read_status(status_path).get("hosts", [])
                if h.get("name") not in victims
                and h.get("name") not in others_off
                and h.get("state") not in ("active", "suspect"))
            conf_floor = (simrun.FAST["detection"]["delta"]
                          + simrun.FAST["detection"]["grace_period"]
                          - cloud.report_interval)
            return dict(hosts=hosts, servers=hosts * servers,
                        pass_cpu_ms=1000 * statistics.median(cpus) if cpus
                        else float("nan"), passes=len(cpus), rss_mb=rss,
                        rss_storm=rss_storm,
                        pass_cpu_max=1000 * max(cpus) if cpus
                        else float("nan"),
                        first_off=min(off.values()) if off else None,
                        last_off=max(off.values()) if off else None,
                        kills_took=max(killed.values()),
                        worst_own=max((off[n] - killed[n] for n in off),
                                      default=None),
                        fenced=len(off), floor=conf_floor,
                        cpu_storm=cpu_storm, sim_storm=sim_storm,
                        others_off=others_off, others_fencing=others_fencing,
                        load=load)
        finally:
            srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, nargs="+",
                   default=[500, 1000, 2000, 5000])
    p.add_argument("--servers", type=int, default=20)
    p.add_argument("--poll", type=float, default=2.0,
                   help="[detection] poll_interval of the engine")
    p.add_argument("--audit-interval", type=float, default=300.0,
                   help="[audit] interval of the engine (its default)")
    p.add_argument("--window", type=float, default=None,
                   help="seconds over which passes are sampled once every "
                        "host is known (default: 6 polls, at least 8 s; at "
                        "20,000 hosts that sees 2-3 passes: the status "
                        "file, which reports them, is written every few "
                        "seconds)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="keep N cores busy with another process (a spinning "
                        "Python) for the whole run, as Nova, RabbitMQ and "
                        "MariaDB beside instanceha on a control node would")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="instanceha-scale-")
    print("scale on the simulator: %d servers per host, poll every %.1fs, "
          "audit every %.0fs, %d simultaneous deaths%s"
          % (args.servers, args.poll, args.audit_interval, DEATHS,
             ", %d core(s) kept busy by another process" % args.busy
             if args.busy else ""))
    with busy(args.busy):
        _rows(args, base)


def _rows(args, base):
    print("%7s %8s %12s %8s %8s %10s %10s %10s %8s %8s %9s %9s %7s %6s" % (
        "hosts", "servers", "pass CPU ms", "(target", "RSS MB", "(target",
        "1st off s", "last off s", "off", "floor s", "x floor", "eng CPU",
        "sim CPU", "load"))
    rows = []
    for n in args.hosts:
        r = run(n, args.servers, args.poll, os.path.join(base, "n%d" % n),
                args.audit_interval, args.window)
        rows.append(r)
        print("%7d %8d %12.1f %8s %8.1f %10s %10s %10s %8s %8.1f %9s %8.1fs "
              "%6.1fs %6.1f" % (
                  r["hosts"], r["servers"], r["pass_cpu_ms"], "200)",
                  r["rss_mb"], "400)",
                  "%.2f" % r["first_off"] if r["first_off"] is not None
                  else "-",
                  "%.2f" % r["last_off"] if r["last_off"] is not None
                  else "-",
                  "%d/%d" % (r["fenced"], DEATHS), r["floor"],
                  "%.1fx" % (r["last_off"] / r["floor"])
                  if r["last_off"] is not None else "-",
                  r["cpu_storm"], r["sim_storm"], r["load"]), flush=True)
        print("        the 20 kills took %.2fs in the simulator; slowest "
              "death to power-off timed from its own kill: %s" % (
                  r["kills_took"], "%.2fs (%.1fx floor)" % (
                      r["worst_own"], r["worst_own"] / r["floor"])
                  if r["worst_own"] is not None else "-"), flush=True)
        print("        %d passes, slowest %.1f ms CPU; RSS %.1f MB after the "
              "20th power-off (evacuations under way)" % (
                  r["passes"], r["pass_cpu_max"], r["rss_storm"]),
              flush=True)
        if r["others_off"]:
            print("        FALSE FENCING: %d host(s) powered off that were "
                  "never killed: %s" % (len(r["others_off"]),
                                        " ".join(r["others_off"][:10])),
                  flush=True)
        if r["others_fencing"]:
            print("        FALSE FENCING in progress: %d host(s) never "
                  "killed that the engine is fencing or recovering: %s"
                  % (len(r["others_fencing"]),
                     " ".join(r["others_fencing"][:10])), flush=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        f = b["hosts"] / a["hosts"]
        print("from %d to %d hosts (x%.0f): pass CPU x%.1f, RSS x%.2f" % (
            a["hosts"], b["hosts"], f, b["pass_cpu_ms"] / a["pass_cpu_ms"],
            b["rss_mb"] / a["rss_mb"]))
    print("logs: %s" % base)


if __name__ == "__main__":
    main()
