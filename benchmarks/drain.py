#!/usr/bin/env python3
"""Drain time of one host, on the simulator, with the real engine.

One host (compute-1) holds N servers, three empty hosts take them. The
real ``instanceha run`` (a process of its own, over HTTP, as in the
functional tests) is asked to drain compute-1 through its operator API;
the drain is timed from that request to the engine's state
``maintenance`` (its status file), and printed next to its floor, set by
the migration time and [drain] concurrency:

    floor = ceil(N / concurrency) x migration time

(a live migration takes the migration time from its request to its
completion in the simulator: its 3 x schedule_time = 0.15 s of
scheduling, accepted -> queued -> preparing -> running, is counted in it).
Target (issue 24): within 1.1x the floor.

Then the same with K servers whose live migrations stall (the simulator's
stall knob): each is aborted after [drain] stuck_timeout without progress,
retried, and given up after [drain] stuck_retries; printed: the time each
stuck server held a migration slot (its first live-migrate request to its
last abort taking effect, from the simulator's migration records) next to
stuck_timeout x (retries + 1), and the drain's total.

A profile of each drain says where the time above the floor went: the
mean copy time of a migration as the simulator ran it, and the mean time
a slot stayed idle between one migration ending and the next one's
request (the drain sees a migration end only at its next pass, every
[drain] poll_interval seconds, unless a migration notification wakes it:
``--notifications``, below).

``--notifications``: Nova's migration notifications, as a real cloud
sends them, on a vhost of the machine's RabbitMQ (127.0.0.1:5672, guest,
rabbitmqctl; see doc/functional-testing.md): the engine listens
([notifications] enabled) and this script publishes
``instance.live_migration_post.end`` (or ``_abort``/``_rollback``,
``resize_finish``, ``resize_confirm``) within ~20 ms of each migration
ending in the simulator, which has no notifications of its own.

The machine's load average is printed with each row: on a shared machine
the times depend on it.

    .venv/bin/python benchmarks/drain.py [--servers 100 --migration-time 2
        --concurrency 2] [--poll-interval 5] [--stuck 3 --stuck-timeout 10
        --stuck-retries 2] [--runs 1] [--notifications]

Measured (2-core machine; 100 servers, 2 s from request to completion,
concurrency 2, floor 100 s; stuck: 3 servers, stuck_timeout 10 s,
retries 2, bound 30 s each):

    notifications, poll_interval 5 (engine at 83989c0, load 2.8 / 0.8):
        103.3 s = 1.03x (target 1.1x); idle 0.05 s a slot
        stuck: 168.0 s; each stuck server held a slot 31.3-31.5 s for its
        3 tries (bound 30 s: 10 s without progress + ~0.5 s of Nova's
        scheduling and abort a try); the last one in the drain's order
        holds one slot alone at the end
    polling only (engine at 5a2560e, before the passes came at a stuck
    clock's deadline and 1 s after a request):
        poll_interval 5: 2.53x (idle 2.9 s a slot), a stuck server 56 s
        poll_interval 1: 1.47x (idle 0.64 s), a stuck server 38 s

Where the time goes: polling alone, a slot waits for the drain's next
pass after its migration ends (idle ~ poll_interval - migration time), so
the ratio is ~poll_interval / migration time with poll 5 and ~1.4-1.5x
with poll 1 (the smallest [drain] poll_interval takes): no poll reaches
1.1x with 2 s migrations (with real ones, minutes long, the poll is a
small part). Nova's migration notifications wake the pass at once: the
end of one migration (live_migration_post.end) sends the next, and the
start of a copy (live_migration_pre.end) starts its stuck clock. A stuck
try is judged at its clock's deadline (a pass is scheduled for it), and
its retry is sent at the pass the abort's notification wakes (or 1 s
after the abort without notifications).
"""

import argparse
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.engine_run import (  # noqa: E402
    engine_process, read_status, wait_or_exit)
from instanceha import conf as conf_pkg  # noqa: E402
from instanceha import simrun  # noqa: E402
from instanceha.api import client  # noqa: E402
from instanceha.sim import SimCloud, SimServer  # noqa: E402

HOST = "compute-1"
#: migration records in a final state, and the notification Nova sends
#: when one gets there
ENDED = {("live-migration", "completed"): "instance.live_migration_post.end",
         ("live-migration", "cancelled"):
             "instance.live_migration_abort.end",
         ("live-migration", "error"): "instance.live_migration_rollback.end",
         ("migration", "finished"): "instance.resize_finish.end",
         ("migration", "confirmed"): "instance.resize_confirm.end",
         # the destination's pre_live_migration ended: the copy starts
         ("live-migration", "running"): "instance.live_migration_pre.end"}


def _state(path, host):
    for h in read_status(path).get("hosts", []):
        if h.get("name") == host:
            return h.get("state"), h.get("reason") or ""
    return None, ""


_wait = wait_or_exit


class MoveNotifier(threading.Thread):
    """Publishes Nova's notification for each live or cold migration that
    reaches a final state in the simulator (which sends none itself)."""

    def __init__(self, cloud, url, interval=0.02):
        super().__init__(daemon=True, name="move-notifier")
        from functional import events_fixtures as fx
        sample = json.load(open(os.path.join(
            REPO, "tests", "data", "notifications",
            "nova-34.0.0-evacuation.json")))["instance.rebuild.end"]
        self.template = sample["payload"]
        self.notifier = fx.NovaNotifier(url,
                                        publisher_id="nova-compute:sim")
        self.cloud = cloud
        self.interval = interval
        self.stop = threading.Event()
        self.sent = 0

    def payload(self, server_id, host):
        p = copy.deepcopy(self.template)
        p["nova_object.data"].update(uuid=server_id, host=host, node=host)
        return p

    def run(self):
        seen = set()
        while not self.stop.is_set():
            self.cloud.now()            # the model runs what is due
            with self.cloud.lock:
                ended = [(m.id, m.instance_uuid, m.dest_compute,
                          ENDED[(m.migration_type, m.status)])
                         for m in self.cloud.migrations
                         if (m.migration_type, m.status) in ENDED
                         and (m.id, m.status) not in seen]
                seen.update((m.id, m.status) for m in self.cloud.migrations
                            if (m.migration_type, m.status) in ENDED)
            for _, sid, dest, event_type in ended:
                self.notifier.info(event_type, self.payload(sid, dest))
                self.sent += 1
            self.stop.wait(self.interval)
        self.notifier.close()


#: the simulator's scheduling steps before a live migration copies
#: (accepted -> queued -> preparing -> running), each its schedule_time
LIVE_STEPS = 3


def copy_time(migration_time, schedule_time):
    """The simulator's copy time for a live migration that takes
    ``migration_time`` from its request to ``completed``."""
    return max(0.05, migration_time - LIVE_STEPS * schedule_time)


def make_cloud(n, migration_time):
    # Four hosts; every server but compute-1's removed (the model rebuilds
    # its index when the number of servers changes). Sized so that the
    # three others take compute-1's N servers with room to spare for the
    # preflight's HA admission (the largest of them may fail after).
    # A migration takes migration_time from its request to completion in
    # the simulator: its scheduling steps are counted in it.
    room = max(2 * n, 64)
    cloud = SimCloud(hosts=4, servers_per_host=n, host_vcpus=4 * room,
                     server_vcpus=1, host_ram_mb=room * 2048,
                     server_ram_mb=2048, host_disk_gb=room * 20,
                     server_disk_gb=20, cold_migration_time=migration_time)
    cloud.live_migration_time = copy_time(migration_time,
                                          cloud.schedule_time)
    with cloud.lock:
        for sid in [s.id for s in cloud.servers.values() if s.host != HOST]:
            del cloud.servers[sid]
    return cloud


def drain_order(cloud):
    """compute-1's servers in the drain's order (same priority: by
    name)."""
    return [s.id for s in sorted(cloud.list_servers(HOST),
                                 key=lambda s: (s.name, s.id))]


def profile(cloud, stuck):
    """From the simulator's migration records: the mean copy time of a
    completed live migration (request to completion), the mean idle time
    of a slot (a migration's end to the next request), the last
    completion, and per stuck server its first request to its last
    abort."""
    with cloud.lock:
        migs = [(m.instance_uuid, m.created_at, m.updated_at, m.status)
                for m in cloud.migrations
                if m.migration_type == "live-migration"]
    done = [(c, u) for _, c, u, st in migs if st == "completed"]
    copy_s = statistics.mean(u - c for c, u in done) if done else 0.0
    ends = sorted(u for _, _, u, st in migs if u is not None
                  and st in ("completed", "cancelled", "error"))
    starts = sorted(c for _, c, _, _ in migs)
    idle = []
    for end in ends:
        later = [s for s in starts if s >= end]
        if later:
            idle.append(later[0] - end)
    held = {}
    for sid in stuck:
        mine = [(c, u) for s, c, u, _ in migs if s == sid]
        if mine:
            held[sid] = (max(u or c for c, u in mine)
                         - min(c for c, _ in mine), len(mine))
    return dict(copy=copy_s, idle=statistics.mean(idle) if idle else 0.0,
                last_done=max((u for _, u in done), default=None),
                first_sent=min(starts, default=None), held=held)


def run(args, stuck_count, workdir, broker_url=None):
    cloud = make_cloud(args.servers, args.migration_time)
    order = drain_order(cloud)
    # Stuck servers spread over the drain's order: first, middle, last...
    stuck = [order[round(i * (len(order) - 1) / max(1, stuck_count - 1))]
             for i in range(stuck_count)] if stuck_count else []
    for sid in stuck:
        cloud.stall_migrations(server_id=sid)
    srv = SimServer(cloud).start()
    overrides = {"drain": {
        "concurrency": args.concurrency,
        "max_concurrent": max(4, args.concurrency),
        "poll_interval": args.poll_interval,
        "stuck_timeout": args.stuck_timeout,
        "stuck_retries": args.stuck_retries}}
    if broker_url:
        overrides["notifications"] = {"enabled": True,
                                      "transport_url": broker_url}
    path = simrun.write_config(workdir, srv, overrides)
    conf = conf_pkg.load(["--config-file", path])
    with engine_process(path, workdir) as (proc, status_path, log_name):
        notifier = None
        try:
            started = time.time()
            _wait(lambda: read_status(status_path).get("generated_at", 0) > started
                  and len(read_status(status_path).get("hosts", [])) == 4
                  and all(h["state"] == "active"
                          for h in read_status(status_path)["hosts"]), 120,
                  "the engine to see every host active (log %s)" % log_name)
            if broker_url:
                notifier = MoveNotifier(cloud, broker_url)
                notifier.start()
            load = os.getloadavg()[0]
            t0 = time.time()
            code, answer = client.call(conf, "POST", "/hosts/%s/drain" % HOST,
                                       {"reason": "benchmark"}, timeout=60)
            if code != 202:
                raise SystemExit("drain refused (%d): %s" % (code, answer))
            _wait(lambda: _state(status_path, HOST)[0] != "draining"
                  and _state(status_path, HOST)[0] != "active", 3600,
                  "the drain to end (log %s)" % log_name, step=0.1)
            t_end = time.time()
            state, reason = _state(status_path, HOST)
            left = {s.id for s in cloud.list_servers(HOST)}
            moved = len(order) - len(left)
            if state != "maintenance" or left != set(stuck):
                raise SystemExit("the drain ended %s (%s) with %d servers left "
                                 "(expected the %d stuck): log %s"
                                 % (state, reason, len(left), len(stuck),
                                    log_name))
            p = profile(cloud, stuck)
            return dict(total=t_end - t0, moved=moved, load=load,
                        load_end=os.getloadavg()[0],
                        last_move=(p["last_done"] - t0) if p["last_done"]
                        else float("nan"),
                        copy=p["copy"], idle=p["idle"], held=p["held"],
                        notified=notifier.sent if notifier else None)
        finally:
            if notifier is not None:
                notifier.stop.set()
                notifier.join(10)
            srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", type=int, default=100)
    p.add_argument("--migration-time", type=float, default=2.0,
                   help="seconds a live (or cold) migration copies, in the "
                        "simulator")
    p.add_argument("--concurrency", type=int, default=2,
                   help="[drain] concurrency")
    p.add_argument("--poll-interval", type=int, default=5,
                   help="[drain] poll_interval (its default: 5)")
    p.add_argument("--stuck", type=int, default=3,
                   help="servers whose live migrations stall, in the "
                        "second drain (0: no second drain)")
    p.add_argument("--stuck-timeout", type=int, default=10,
                   help="[drain] stuck_timeout")
    p.add_argument("--stuck-retries", type=int, default=2,
                   help="[drain] stuck_retries (its default: 2)")
    p.add_argument("--runs", type=int, default=1,
                   help="drains of each kind")
    p.add_argument("--notifications", action="store_true",
                   help="migration notifications through the machine's "
                        "RabbitMQ wake the drain's passes")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="instanceha-drain-")
    floor = math.ceil(args.servers / args.concurrency) * args.migration_time
    vhost = None
    if args.notifications:
        from functional import events_fixtures as fx
        if not fx.port_open(fx.RABBIT_HOST, fx.RABBIT_PORT):
            raise SystemExit("--notifications: no RabbitMQ on %s:%d"
                             % (fx.RABBIT_HOST, fx.RABBIT_PORT))
        vhost = fx.RabbitVhost().__enter__()
    print("drain of one host with %d servers on the simulator: migration "
          "%.1fs, [drain] concurrency %d, poll_interval %ds, %s"
          % (args.servers, args.migration_time, args.concurrency,
             args.poll_interval, "migration notifications on RabbitMQ"
             if vhost else "no notifications (polling only)"))
    print("%5s %6s %9s %9s %8s %7s %10s %8s %8s %6s" % (
        "stuck", "moved", "total s", "floor s", "ratio", "(target",
        "last move", "copy s", "idle s", "load"))
    try:
        for i in range(args.runs):
            kinds = [0] + ([args.stuck] if args.stuck else [])
            plain = None
            for k in kinds:
                r = run(args, k, os.path.join(base, "r%d-stuck%d" % (i, k)),
                        vhost.url if vhost else None)
                # With stuck servers the floor counts the others; their
                # slot time is reported apart.
                f = math.ceil((args.servers - k) / args.concurrency) \
                    * args.migration_time
                print("%5d %6d %9.1f %9.1f %7.2fx %7s %10.1f %8.2f %8.2f "
                      "%6.1f" % (k, r["moved"], r["total"], f,
                                 r["total"] / f, "1.1x)", r["last_move"],
                                 r["copy"], r["idle"], r["load"]),
                      flush=True)
                if not k:
                    plain = r["total"]
                if k:
                    bound = args.stuck_timeout * (args.stuck_retries + 1)
                    held = sorted(r["held"].values(), reverse=True)
                    print("      %d stuck servers held a slot %s s "
                          "(%s tries each); bound stuck_timeout x "
                          "(retries+1) = %d s; their slot time over the "
                          "concurrency: %.1f s" % (
                              k, "/".join("%.1f" % h for h, _ in held),
                              "/".join(str(n) for _, n in held), bound,
                              sum(h for h, _ in held) / args.concurrency),
                          flush=True)
                    print("      the drain took %.1f s more than the one "
                          "without stuck servers" % (r["total"] - plain),
                          flush=True)
                if r["notified"] is not None:
                    print("      %d notifications published"
                          % r["notified"], flush=True)
    finally:
        if vhost is not None:
            vhost.__exit__(None, None, None)
    print("floor = ceil(servers / concurrency) x migration time = %.1f s; "
          "copy: a live migration's request to completion in the "
          "simulator (its scheduling included); idle: a slot's "
          "mean wait from one migration's end to the next request"
          % floor)
    print("load: 1-minute load average at the drain's start (%d CPUs)"
          % os.cpu_count())
    print("logs: %s" % base)


if __name__ == "__main__":
    main()
