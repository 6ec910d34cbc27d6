"""``instanceha demo``: the real engine recovering a simulated cloud.

Starts the simulator (Keystone, Nova API, one Redfish BMC per host) on a
loopback port, runs instanceha against it over HTTP with its real drivers
(openstacksdk, sushy), kills one host's nova-compute, and prints the
recovery as it happens. Exits 0 only if every server of the dead host ended
ACTIVE on another host and the host was put back in service.

``--scenario NAME`` runs one drill instead (``--list`` names them; see
doc/drills.md): a behaviour an operator must trust, on the same simulator,
ending with a PASS/FAIL verdict.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from instanceha import conf as conf_pkg
from instanceha import log
from instanceha.drills import registry
from instanceha.drills import workdir as workdir_mod
from instanceha.drills.timeline import Timeline
from instanceha.util import waiting


def _parse(argv):
    p = argparse.ArgumentParser(prog="instanceha demo", description=__doc__)
    p.add_argument("--hosts", type=int, default=6)
    p.add_argument("--servers-per-host", type=int, default=5)
    p.add_argument("--kill", default=None,
                   help="host to kill (default: the second one)")
    p.add_argument("--evacuation-time", type=float, default=0.5,
                   help="simulated seconds per server evacuation")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="give up after this many seconds")
    p.add_argument("--workdir", default=None,
                   help="keep config, journal and log here (default: a "
                        "temporary directory, removed afterwards)")
    drills = p.add_argument_group("drills")
    drills.add_argument("--scenario", metavar="NAME", default=None,
                        help="run this drill instead (see --list); only "
                             "--workdir applies to it")
    drills.add_argument("--list", action="store_true",
                        help="name the drills, one line each, and exit")
    args = p.parse_args(argv)
    if args.scenario is not None or args.list:
        own = [a for a in ("hosts", "servers_per_host", "kill",
                           "evacuation_time", "timeout")
               if getattr(args, a) != p.get_default(a)]
        if own:
            p.error("--%s: not for a drill (a drill sets its own cloud)"
                    % own[0].replace("_", "-"))
        if args.list and args.scenario is not None:
            p.error("give --list or --scenario NAME, not both")
        return args
    if args.hosts < 2:
        p.error("--hosts must be at least 2: servers need somewhere to go")
    return args


def _wait(pred, timeout, step=0.05):
    return waiting.wait_until(pred, timeout, step)


MARKS = {"suspect": "detected", "fenced": "fenced", "evacuating": "disabled",
         "evacuated": "evacuated", "recovering": "host back",
         "active": "re-enabled"}


def drill(args, out, run=os.execv):
    """``--list`` or ``--scenario NAME``: the listing, or the drill run as
    its own process (``python -m instanceha.drills``: some drills run the
    simulated hosts' agents, whose code this console script must not
    import). Returns the exit status where this process goes on."""
    if args.list:
        out.write(registry.listing() + "\n")
        return 0
    if registry.lookup(args.scenario) is None:
        print("instanceha demo: %s" % registry.unknown_text(args.scenario),
              file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "instanceha.drills", args.scenario]
    if args.workdir:
        argv += ["--workdir", args.workdir]
    out.flush()
    sys.stderr.flush()
    return run(sys.executable, argv)


def main(argv=None):
    args = _parse(argv or [])
    if args.list or args.scenario is not None:
        return drill(args, sys.stdout)
    # Local: the service and the simulator cost ~0.4 s at import, and the
    # console script imports this module for every command.
    from instanceha import service, simrun
    from instanceha.sim import SimCloud, SimServer

    out = sys.stdout
    workdir = args.workdir or tempfile.mkdtemp(prefix="instanceha-demo-")
    os.makedirs(workdir, exist_ok=True)
    logfile = open(os.path.join(workdir, "instanceha.log"), "w")
    log.setup("console", False, stream=logfile)

    cloud = SimCloud(hosts=args.hosts, servers_per_host=args.servers_per_host,
                     evacuation_time=args.evacuation_time)
    victim = args.kill or sorted(cloud.hosts)[1]
    if victim not in cloud.hosts:
        print("instanceha demo: no host %r (hosts: %s)"
              % (victim, ", ".join(sorted(cloud.hosts))), file=sys.stderr)
        return 2
    srv = SimServer(cloud).start()
    path = simrun.write_config(workdir, srv)
    conf = conf_pkg.load(["--config-file", path])
    out.write("instanceha demo: simulated cloud, %d hosts x %d servers; Nova, "
              "Keystone and Redfish BMCs at %s\n"
              % (args.hosts, args.servers_per_host, srv.url))
    out.write("engine: os-services polled every %gs, suspect after %gs "
              "without heartbeat, %gs grace, fencing through Redfish (sushy), "
              "%d evacuations at once\n"
              % (conf.detection.poll_interval, conf.detection.delta,
                 conf.detection.grace_period, conf.evacuation.concurrency))
    out.write(workdir_mod.log_line(logfile.name, not args.workdir) + "\n")

    tl = Timeline(out)
    victim_servers = {s["id"]: s["name"] for s in
                      cloud.snapshot()["servers"].values()
                      if s["host"] == victim}

    def on_change(old, new, event):
        if new.name != victim:
            if new.state is not old.state:
                tl.say("%-10s %s -> %s  %s" % (new.name, old.state.value,
                                              new.state.value, new.reason))
            return
        if new.state is old.state:
            tl.say("%-10s %s: %s" % (new.name, new.state.value, new.reason))
            return
        tl.say("%-10s %s -> %s  %s" % (new.name, old.state.value,
                                       new.state.value, new.reason),
               mark=MARKS.get(new.state.value) if tl.marks.get("killed")
               is not None else None)

    def on_progress(record, done, total):
        tl.say("%-10s evacuated %d/%d" % (record.name, done, total))

    svc = service.Service(conf, on_progress=on_progress)
    svc.engine.add_listener(on_change)
    ok = False
    try:
        svc.start()
        names = set(cloud.hosts)

        def states():
            return {r.name: r.state.value
                    for r in svc.engine.records().values()}

        if not _wait(lambda: set(states()) == names
                     and set(states().values()) == {"active"}, 20):
            out.write("instanceha demo: hosts never all active: %s\n"
                      % states())
            return 1
        tl.say("all %d compute hosts active; %d servers on %s"
               % (len(names), len(victim_servers), victim))
        cloud.kill(victim)
        tl.say("killing %s: its nova-compute crashes, the host stays "
               "powered on" % victim, mark="killed")
        # Wait on the timeline's marks (set by the listener after the
        # transition is journalled), not on the record, so the summary and
        # the printed lines agree.
        if not _wait(lambda: "evacuated" in tl.marks
                     or states().get(victim) == "failed", args.timeout):
            out.write("instanceha demo: %s not evacuated in %ss\n"
                      % (victim, args.timeout))
            return 1
        if states()[victim] == "failed":
            return _summary(out, tl, cloud, svc, victim, victim_servers)
        tl.say("repairing %s: powering it on through its BMC (Nova cleans "
               "up the evacuated servers when its compute starts)" % victim)
        cloud.power(victim, True)
        _wait(lambda: "re-enabled" in tl.marks, args.timeout)
        ok = _summary(out, tl, cloud, svc, victim, victim_servers) == 0
        return 0 if ok else 1
    finally:
        svc.stop()
        srv.stop()
        logfile.close()
        if not args.workdir and ok:
            shutil.rmtree(workdir, ignore_errors=True)
        out.write(workdir_mod.end_line(workdir, not args.workdir, ok))


def _summary(out, tl, cloud, svc, victim, victim_servers):
    snap = cloud.snapshot()
    service_ = snap["services"][victim]
    out.write("\nsummary\n")
    for mark in ("detected", "fenced", "disabled", "evacuated", "host back",
                 "re-enabled"):
        t = tl.marks.get(mark)
        since_kill = (t - tl.marks["killed"]) if t is not None else None
        out.write("  %-11s %s\n" % (mark, "-" if since_kill is None
                                    else "%5.1fs after the kill" % since_kill))
    rows = []
    failures = []
    for sid, name in sorted(victim_servers.items(), key=lambda kv: kv[1]):
        s = snap["servers"][sid]
        rows.append("  %-22s %-10s %s" % (name, s["host"], s["status"]))
        if s["host"] == victim or s["status"] != "ACTIVE":
            failures.append("%s is %s on %s" % (name, s["status"], s["host"]))
    out.write("  servers of %s now:\n" % victim)
    out.write("\n".join(rows) + "\n")
    out.write("  %s: power %s, service %s, forced_down=%s\n" % (
        victim, snap["hosts"][victim]["power"], service_["status"],
        service_["forced_down"]))
    if service_["status"] != "enabled" or service_["forced_down"]:
        failures.append("%s is not back in service" % victim)
    rec = [r for r in svc.engine.records().values() if r.name == victim][0]
    out.write("  instanceha: %s since %.1fs: %s\n"
              % (rec.state.value, time.time() - rec.since, rec.reason))
    if failures:
        out.write("RESULT: FAILED: %s\n" % "; ".join(failures))
        return 1
    if "re-enabled" not in tl.marks:
        out.write("RESULT: FAILED: %s never re-enabled\n" % victim)
        return 1
    out.write("RESULT: OK: %d/%d servers ACTIVE on other hosts, %s re-enabled"
              " %.1fs after it died\n"
              % (len(victim_servers), len(victim_servers), victim,
                 tl.marks["re-enabled"] - tl.marks["killed"]))
    return 0
