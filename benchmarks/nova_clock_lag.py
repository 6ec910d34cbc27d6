#!/usr/bin/env python3
"""How far the engine's estimate of Nova's now lags Nova's true clock, when
every compute reports in step, on the simulator with the real engine (in
this process).

The simulator's computes report every second from the cloud's start, all at
the same fraction of a second; Nova shows updated_at in whole seconds, so
that fraction is hidden from any estimator and is subtracted. This node's
clock is the simulator's (Nova's), so the reconciler's ``clock_skew``
(local now minus the estimated Nova now, unrounded, one reading per pass)
is the lag. Each poll interval gets a fresh cloud and engine; the first
--warmup passes are left out. The estimate tightens in steps, each time a
read happens to end just after a heartbeat (passes start at varied times):
the 90th percentile and the max are mostly the passes before that.

Beside it, the old estimator (before issue 21: the newest updated_at of the
up services, carried forward by the time elapsed since it changed) is
computed from the same reads of os-services, and the ratio old / new shown.
The reconciler's passes start at 0.8 to 1 x poll_interval; the
control-plane monitor, which feeds the same estimate, polls at the same
interval (as with the defaults, both 10 s).

    .venv/bin/python benchmarks/nova_clock_lag.py [--polls 0.5,2]
        [--samples 40] [--warmup 5] [--hosts 6]
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
from benchmarks.storm import _wait  # noqa: E402


class OldClock:
    """The estimator before issue 21 (instanceha/sources/reconciler.py at
    1e65183^): the newest updated_at of a service Nova calls up, carried
    forward by the monotonic time elapsed since that value first showed."""

    def __init__(self):
        self._newest = self._seen_at = None

    def observe(self, services, mono_now):
        newest = max((s.updated_at for s in services
                      if s.updated_at is not None and s.state == "up"
                      and not s.forced_down), default=None)
        if newest is not None and newest != self._newest:
            self._newest, self._seen_at = newest, mono_now
        if self._newest is None:
            return None
        return self._newest + max(0.0, mono_now - self._seen_at)


class Recorder:
    """Stands in for the reconciler's NovaClock (the shared one stays fed
    and used): keeps each read's services and end, and the estimate the
    pass took from it."""

    def __init__(self, clock):
        self._clock = clock
        self.read = self.offset = None
        self.trips = []             # each read's duration, s

    def observe(self, services, started, ended):
        self._clock.observe(services, started, ended)
        self.read = (services, ended)
        self.trips.append(ended - started)

    def estimate(self):
        est = self._clock.estimate()
        self.offset = None if est is None else est.offset
        return est

    def __getattr__(self, name):
        return getattr(self._clock, name)


def measure(poll, args, workdir):
    """The hidden fraction, [(new lag, old lag)] beyond it (one per
    pass), and the median duration of the reconciler's reads."""
    cloud = SimCloud(hosts=args.hosts, servers_per_host=1)
    hidden = cloud.hosts["compute-0"].started_at % 1.0
    srv = SimServer(cloud).start()
    path = simrun.write_config(workdir, srv, {
        "detection": {"poll_interval": poll, "delta": 10.0},
        "control_plane": {"poll_interval": poll},
        "audit": {"interval": 3600}})
    svc = service.Service(conf_pkg.load(["--config-file", path]))
    rec = svc.reconciler
    recorder = rec._nova_clock = Recorder(rec._nova_clock)
    old = OldClock()
    lags = []
    run_once = rec.run_once

    def measured_pass():
        n = run_once()
        services, ended = recorder.read
        old_now = old.observe(services, ended)
        if rec.clock_skew is not None and recorder.offset is not None:
            # The same reading, with the old estimate in place of the new.
            new_now = ended + recorder.offset
            lags.append((rec.clock_skew - hidden,
                         rec.clock_skew + new_now - old_now - hidden))
        return n

    rec.run_once = measured_pass
    svc.start()
    try:
        total = args.warmup + args.samples
        if _wait(lambda: len(lags) >= total, total * poll * 2 + 60) is None:
            raise SystemExit("poll %.1f s: only %d of %d passes"
                             % (poll, len(lags), total))
    finally:
        svc.stop()
        srv.stop()
    return hidden, lags[args.warmup:total], _quantiles(recorder.trips)[0]


def _quantiles(values):
    values = sorted(values)
    return (values[(len(values) - 1) // 2],
            values[min(len(values) - 1, int(len(values) * 0.9))],
            values[-1], values[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--polls", default="0.5,2",
                   help="[detection] poll_interval values, s, comma-separated")
    p.add_argument("--samples", type=int, default=40,
                   help="reconciler passes measured per poll interval")
    p.add_argument("--warmup", type=int, default=5,
                   help="first passes left out per poll interval")
    p.add_argument("--hosts", type=int, default=6)
    args = p.parse_args()
    polls = [float(x) for x in args.polls.split(",")]
    if args.samples < 1 or args.warmup < 0 or any(x <= 0 for x in polls):
        p.error("--samples must be >= 1, --warmup >= 0, every poll > 0")
    log.setup("console", False, stream=open(os.devnull, "w"))
    print("lag of the estimate of Nova's now beyond the fraction of a second "
          "its whole-second updated_at hides (computes in step, report 1 s; "
          "%d hosts, %d passes per poll after %d warm-up)"
          % (args.hosts, args.samples, args.warmup))
    ok = True
    with tempfile.TemporaryDirectory() as workdir:
        for poll in polls:
            t0 = time.monotonic()
            hidden, lags, trip = measure(poll, args,
                                   os.path.join(workdir, "poll-%s" % poll))
            new = _quantiles([n for n, _ in lags])
            old = _quantiles([o for _, o in lags])
            print("poll %.1f s (hidden %.3f s, %d samples, reads take "
                  "%.3f s (median), %.0f s):" % (
                      poll, hidden, len(lags), trip, time.monotonic() - t0))
            for name, q in (("new", new), ("old", old)):
                print("  %-3s median %6.3f s (%4.0f%% of poll)  90%% %6.3f s "
                      "(%4.0f%%)  max %6.3f s (%4.0f%%)  min %6.3f s"
                      % (name, q[0], 100 * q[0] / poll, q[1],
                         100 * q[1] / poll, q[2], 100 * q[2] / poll, q[3]))
            print("  old / new: median %.1fx, 90%% %.1fx"
                  % (old[0] / max(new[0], 1e-3), old[1] / max(new[1], 1e-3)))
            ok = ok and new[0] <= 0.1 * poll and new[3] >= -0.05
    print("target: new median at most 10%% of the poll, never more than "
          "0.05 s ahead: %s" % ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
