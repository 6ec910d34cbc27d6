"""Event-driven detection through real RabbitMQ: latency and throughput.

Each phase freezes the start-up heap once its listener runs, as
``instanceha run`` does (see :mod:`instanceha.runtime`).

1. Latency: publish ``--events`` Nova-shaped ``service.update`` notifications
   (forced_down by another actor, one per fake host) with an oslo.messaging
   Notifier at ``--rate`` per second; measure from just before each publish
   to the moment the NotificationSource hands the FORCED_DOWN event to its
   sink (the engine's entry point: its first fencing call follows from
   there). Prints p50/p90/p99/max.
2. Throughput: with the listener stopped, queue ``--backlog`` notifications
   on its pool queue (the publisher process has exited before the clock
   starts, so it takes no CPU from the listener), start it and time how
   fast one process drains them: from ``start()`` (connect included) and
   from the first delivery (the steady rate).
3. Ceiling (``--ceiling``): the same drain with an endpoint that only
   counts, none of instanceha's handling: what oslo.messaging's rabbit
   listener alone sustains in this process on this machine.

Targets (issue 4): p99 < 50 ms, >= 5,000 notifications/s.

Uses a vhost of its own on the broker (created and deleted with
rabbitmqctl), so it can run on a shared RabbitMQ::

    .venv/bin/python benchmarks/event_latency.py [--events 1000]
"""

import argparse
import copy
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from functional import events_fixtures as fx  # noqa: E402
from instanceha import runtime  # noqa: E402
from instanceha.sources.notifications import NotificationSource  # noqa: E402

TARGET_P99_MS = 50.0
TARGET_RATE = 5000.0
SAMPLE = json.loads((REPO / "tests" / "data" / "notifications"
                     / "nova-34.0.0-evacuation.json").read_text())


def payload(host_uuid, name):
    p = copy.deepcopy(SAMPLE["service.update"]["payload"])
    p["nova_object.data"].update(
        uuid=host_uuid, host=name,
        last_seen_up=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return p


class TimingSink:
    def __init__(self):
        self.seen = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.expect = 0

    def __call__(self, event):
        t = time.time()     # compared with the publisher process's clock
        with self.lock:
            self.seen[event.host] = t
            if len(self.seen) >= self.expect:
                self.done.set()

    def reset(self, expect):
        with self.lock:
            self.seen = {}
            self.expect = expect
            self.done.clear()


def percentile(values, q):
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


BATCH = {}


class CountingSource(NotificationSource):
    """The listener with instanceha's handling replaced by a count: each
    notification reaches the sink as None, nothing parsed."""

    def handle(self, priority, publisher_id, event_type, payload, metadata):
        self._sink(None)


class CountingSink(TimingSink):
    def __call__(self, event):
        t = time.time()
        with self.lock:
            self.seen[len(self.seen)] = t
            if len(self.seen) >= self.expect:
                self.done.set()


def make_source(url, pool, sink, cls=NotificationSource, workers=1):
    conf = fx.make_conf("notifications", transport_url=url, pool=pool,
                        workers=workers, **BATCH)
    return cls(conf, sink, time.time, None)


def _cpu_seconds(pids):
    """User + system CPU of other processes, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def publish(url, count, rate, prefix):
    """Run in a separate process (as Nova is): publish ``count``
    service.update notifications at ``rate``/s (0: as fast as possible) and
    print [[host uuid, wall-clock time just before publishing], ...]."""
    notifier = fx.NovaNotifier(url)
    sent = []
    interval = 1.0 / rate if rate > 0 else 0.0
    start = time.time()
    try:
        for i in range(count):
            host = str(uuid.uuid4())
            body = payload(host, "%s%d" % (prefix, i))
            pause = start + i * interval - time.time()
            if pause > 0:
                time.sleep(pause)
            sent.append((host, time.time()))
            notifier.info("service.update", body)
    finally:
        notifier.close()
    json.dump(sent, sys.stdout)


def run_publisher(url, count, rate, prefix):
    out = subprocess.run(
        [sys.executable, __file__, "--publish", url, "--events", str(count),
         "--rate", str(rate), "--prefix", prefix],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("publisher failed: %s" % out.stderr[-2000:])
    return dict(json.loads(out.stdout))


def latency(url, pool, count, rate):
    sink = TimingSink()
    source = make_source(url, pool, sink)
    source.start()
    runtime.freeze_startup_heap()   # as `instanceha run` does once started
    try:
        # Warm up: the first message waits for the consumer to attach.
        notifier = fx.NovaNotifier(url)
        sink.reset(1)
        deadline = time.monotonic() + 30
        while not sink.done.is_set() and time.monotonic() < deadline:
            notifier.info("service.update", payload(str(uuid.uuid4()), "w"))
            sink.done.wait(0.5)
        notifier.close()
        sink.reset(count)
        sent = run_publisher(url, count, rate, "compute")
        sink.done.wait(60)
        latencies = [(sink.seen[h] - t) * 1000.0 for h, t in sent.items()
                     if h in sink.seen]
        return latencies, count - len(latencies), source.health()
    finally:
        source.stop()


class _StubCompute:
    """Nova for the fence-latency phase: every write succeeds, no servers."""

    def list_services(self):
        return []

    def force_down(self, service_id, reason):
        return None

    def restore(self, service_id, enable):
        pass

    def list_servers(self, host):
        return []

    def get_server(self, server_id):
        raise KeyError(server_id)

    def evacuate(self, server_id):
        pass

    def list_evacuations(self, host):
        return []


class _RecordingFencer:
    """The fencing driver the engine calls: notes when, powers nothing."""

    def __init__(self, engine_ref):
        self.engine_ref = engine_ref
        self.called = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.expect = 0

    def power_off(self, bmc):
        t = time.time()
        host_id = self.engine_ref[0].find(bmc.host).id
        with self.lock:
            self.called.setdefault(host_id, t)
            if len(self.called) >= self.expect:
                self.done.set()

    def power_state(self, bmc):
        return "off"


def to_fence(url, pool, count, rate):
    """Publish -> the engine's first fencing call, through the real
    NotificationSource, state machine, journal (SQLite) and worker pool;
    grace_period 0, so the measured time is instanceha's own reaction."""
    import tempfile
    from instanceha import conf as conf_pkg
    from instanceha.engine.engine import Context, Engine
    from instanceha.engine.progress import ProgressBoard
    from instanceha.journal import Journal

    conf = conf_pkg.make({
        "detection": {"grace_period": 0.0},
        "policy": {"threshold": 100},
        "fencing": {"default_driver": "bench"},
        "notifications": dict(transport_url=url, pool=pool, **BATCH)})
    workdir = tempfile.mkdtemp(prefix="instanceha-bench-")
    journal = Journal("sqlite:///%s/journal.sqlite" % workdir)
    engine_ref = []
    fencer = _RecordingFencer(engine_ref)
    ctx = Context(conf, _StubCompute(), journal, {}, lambda name: fencer,
                  time.time, ProgressBoard())
    engine = Engine(conf, ctx, journal, time.time)
    engine_ref.append(engine)
    engine.start()
    source = NotificationSource(conf, engine.submit, time.time, ctx.board)
    source.start()
    runtime.freeze_startup_heap()
    try:
        notifier = fx.NovaNotifier(url)
        fencer.expect = 1
        deadline = time.monotonic() + 30
        while not fencer.done.is_set() and time.monotonic() < deadline:
            notifier.info("service.update", payload(str(uuid.uuid4()), "w"))
            fencer.done.wait(0.5)
        notifier.close()
        with fencer.lock:
            fencer.called.clear()
            fencer.expect = count
            fencer.done.clear()
        sent = run_publisher(url, count, rate, "bench")
        fencer.done.wait(120)
        with fencer.lock:
            called = dict(fencer.called)
        return [(called[h] - t) * 1000.0 for h, t in sent.items()
                if h in called], count - len(called)
    finally:
        source.stop()
        engine.stop()
        journal.close()


def _broker_pids():
    """RabbitMQ's Erlang VM on this machine, if it runs here."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/comm" % entry) as f:
                    if f.read().strip() == "beam.smp":
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def throughput(url, pool, count, ceiling=False, workers=1):
    """Drain a backlog of ``count``: (drained, seconds from start(),
    seconds from the first delivery, then CPU seconds from the first
    delivery of this process, of the worker processes and of the broker)."""
    sink = CountingSink() if ceiling else TimingSink()
    cls = CountingSource if ceiling else NotificationSource
    source = make_source(url, pool, sink, cls)
    source.start()          # declares the pool queue
    source.stop()
    run_publisher(url, count, 0, "backlog")   # returns once it has exited
    sink.reset(count)
    source = make_source(url, pool, sink, cls, workers)
    t0 = time.time()
    source.start()
    runtime.freeze_startup_heap()
    try:
        # Worker processes take a second or two to start: CPU is counted
        # from the first delivery, the steady state.
        deadline = time.time() + 120
        while not sink.seen and time.time() < deadline:
            time.sleep(0.001)
        pids = source._workers.pids() if source._workers else []
        broker = _broker_pids()
        cpu0, wcpu0 = time.process_time(), _cpu_seconds(pids)
        bcpu0 = _cpu_seconds(broker)
        sink.done.wait(120)
        cpu = time.process_time() - cpu0
        wcpu = _cpu_seconds(pids) - wcpu0
        bcpu = _cpu_seconds(broker) - bcpu0
        times = sink.seen.values()
        t1 = max(times) if times else time.time()
        first = min(times) if times else t1
        return len(sink.seen), t1 - t0, t1 - first, cpu, wcpu, bcpu
    finally:
        source.stop()


def _rate(count, seconds):
    return count / seconds if seconds > 0 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=500.0,
                        help="publish rate of the latency phase, per second")
    parser.add_argument("--fence-rate", type=float, default=100.0,
                        help="publish rate of the publish -> fencing phase: "
                             "each event is a new host failure that the "
                             "engine recovers in full (journal included)")
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ceiling", action="store_true",
                        help="also drain the backlog with a counting "
                             "endpoint: oslo.messaging alone")
    parser.add_argument("--workers", type=int, nargs="*", default=[2],
                        help="also drain with [notifications] workers = N "
                             "listener processes (the in-process listener, "
                             "1, is always measured)")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--batch-timeout", type=float, default=None)
    parser.add_argument("--publish", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="compute", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        return publish(args.publish, args.events, args.rate, args.prefix)
    if args.batch_size is not None:
        BATCH["batch_size"] = args.batch_size
    if args.batch_timeout is not None:
        BATCH["batch_timeout"] = args.batch_timeout
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        40))   # errors only: one log line per event would be measured too

    if not fx.port_open(fx.RABBIT_HOST, fx.RABBIT_PORT):
        sys.exit("RabbitMQ is not reachable on %s:%d"
                 % (fx.RABBIT_HOST, fx.RABBIT_PORT))
    vhost = fx.RabbitVhost()
    try:
        vhost.__enter__()
    except BaseException as exc:   # pytest.skip outside pytest
        sys.exit("cannot make a RabbitMQ vhost: %s" % exc)
    try:
        pool = "instanceha-bench-%d" % os.getpid()
        lat, lost, health = latency(vhost.url, pool, args.events, args.rate)
        fence_lat, fence_lost = to_fence(vhost.url, pool + "-fence",
                                         args.events, args.fence_rate)
        drains = [(n, throughput(vhost.url, pool + "-tp%d" % n, args.backlog,
                                 workers=n))
                  for n in sorted({1, *args.workers})]
        ceiling = (throughput(vhost.url, pool + "-ceil", args.backlog,
                              ceiling=True) if args.ceiling else None)
    finally:
        vhost.__exit__(None, None, None)

    result = {
        "events": args.events, "publish_rate": args.rate, "lost": lost,
        "p50_ms": statistics.median(lat) if lat else None,
        "p90_ms": percentile(lat, 90) if lat else None,
        "p99_ms": percentile(lat, 99) if lat else None,
        "max_ms": max(lat) if lat else None,
        "to_fence": {
            "lost": fence_lost, "publish_rate": args.fence_rate,
            "p50_ms": statistics.median(fence_lat) if fence_lat else None,
            "p99_ms": percentile(fence_lat, 99) if fence_lat else None,
            "max_ms": max(fence_lat) if fence_lat else None},
        "backlog": args.backlog,
        "throughput": [_drain_result(n, d) for n, d in drains],
        "target_p99_ms": TARGET_P99_MS, "target_per_s": TARGET_RATE,
        "listener_health": health,
    }
    if ceiling is not None:
        result["ceiling"] = _drain_result(1, ceiling)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return
    print("event latency, publish -> sink (real RabbitMQ, one process)")
    print("  events %d at %.0f/s, lost %d" % (args.events, args.rate, lost))
    if lat:
        print("  p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms"
              % (result["p50_ms"], result["p90_ms"], result["p99_ms"],
                 result["max_ms"]))
        print("  p99 target < %.0f ms: %s (p99 is %.2fx the target)"
              % (TARGET_P99_MS,
                 "met" if result["p99_ms"] < TARGET_P99_MS else "MISSED",
                 result["p99_ms"] / TARGET_P99_MS))
    f = result["to_fence"]
    print("event latency, publish -> the engine's first fencing call "
          "(grace_period 0; journal on SQLite)")
    print("  events %d at %.0f/s (each a new host failure), lost %d"
          % (args.events, args.fence_rate, f["lost"]))
    if fence_lat:
        print("  p50 %.2f ms  p99 %.2f ms  max %.2f ms" % (
            f["p50_ms"], f["p99_ms"], f["max_ms"]))
        print("  p99 target < %.0f ms: %s (p99 is %.2fx the target)"
              % (TARGET_P99_MS,
                 "met" if f["p99_ms"] < TARGET_P99_MS else "MISSED",
                 f["p99_ms"] / TARGET_P99_MS))
    print("throughput: a backlog of %d service.update notifications drained "
          "to the engine's entry point, from the first delivery; %d CPU "
          "cores" % (args.backlog, os.cpu_count() or 0))
    for t in result["throughput"]:
        where = ("one process (listener inside instanceha)"
                 if t["workers"] == 1 else
                 "one instanceha service, %d listener worker processes"
                 % t["workers"])
        print("  %s:" % where)
        print("    drained %d: %.0f notifications/s (%.0f/s counting the "
              "start)" % (t["drained"], t["steady_per_s"],
                          t["notifications_per_s"]))
        print("    CPU per notification: instanceha process %.0f us%s, "
              "RabbitMQ %.0f us" % (
                  t["cpu_us_per_notification"],
                  "" if t["workers"] == 1 else
                  ", workers %.0f us" % t["worker_cpu_us_per_notification"],
                  t["broker_cpu_us_per_notification"]))
        print("    target >= %.0f/s: %s (%.2fx the target)" % (
            TARGET_RATE,
            "met" if t["steady_per_s"] >= TARGET_RATE else "MISSED",
            t["steady_per_s"] / TARGET_RATE))
    if ceiling is not None:
        c = result["ceiling"]
        print("ceiling, the same drain with a counting endpoint "
              "(oslo.messaging alone, one process)")
        print("  drained %d: %.0f notifications/s (%.0f us CPU each, "
              "RabbitMQ %.0f us)" % (
                  c["drained"], c["steady_per_s"],
                  c["cpu_us_per_notification"],
                  c["broker_cpu_us_per_notification"]))


def _drain_result(workers, drain):
    drained, elapsed, steady, cpu, wcpu, bcpu = drain
    return {"workers": workers, "drained": drained,
            "drain_seconds": elapsed,
            "notifications_per_s": _rate(drained, elapsed),
            "steady_per_s": _rate(drained - 1, steady),
            "cpu_us_per_notification": cpu / drained * 1e6 if drained else 0,
            "worker_cpu_us_per_notification":
                wcpu / drained * 1e6 if drained else 0,
            "broker_cpu_us_per_notification":
                bcpu / drained * 1e6 if drained else 0}


if __name__ == "__main__":
    main()
