#!/usr/bin/env python3
"""What the capacity preflight adds before a lost host's first evacuation.

Against the simulator over HTTP (Keystone, Nova, Placement on loopback),
for each cloud size: the time of the Nova driver's ``host_capacities()``
read in one Placement request (allocation candidates' provider summaries)
and, for comparison, provider by provider (inventories and usages of each:
what the driver falls back to on a Placement without allocation
candidates); then the pure decision (``policy.capacity.check``) for a lost
host of 50 servers. Median of ``--runs`` runs each.

    .venv/bin/python benchmarks/capacity.py [--hosts 100 1000] [--runs 5]
"""

import argparse
import logging
import statistics
import tempfile
import time

from instanceha import conf as conf_pkg
from instanceha.drivers.compute.base import ComputeError
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.policy import capacity
from instanceha.sim import SimCloud, SimServer


def _median(fn, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _per_provider(nova):
    real = nova._capacity._placement_get

    def without_candidates(path, *a, **k):
        if path == "/allocation_candidates":
            raise ComputeError("HTTP 404", 404)
        return real(path, *a, **k)

    nova._capacity._placement_get = without_candidates
    try:
        return nova.host_capacities()
    finally:
        nova._capacity._placement_get = real


def measure(hosts, runs):
    cloud = SimCloud(hosts=hosts, servers_per_host=50 if hosts <= 200
                     else 5, host_vcpus=256, server_vcpus=2)
    srv = SimServer(cloud).start()
    try:
        clouds, _ = srv.write_client_files(tempfile.mkdtemp())
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        one = _median(nova.host_capacities, runs)
        each = _median(lambda: _per_provider(nova), max(1, runs // 5))
        caps = nova.host_capacities()
        services = nova.list_services()
        servers = [s.raw for s in nova.list_servers("compute-0")][:50]
        ordered = [(s["id"], capacity.need_of(s)[0]) for s in servers]
        decide = _median(lambda: capacity.check(
            "compute-0", ordered, services, caps, (), capacity.Settings()),
            runs)
        return one, each, decide, len(ordered)
    finally:
        srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    logging.disable(logging.WARNING)
    print("%6s  %16s  %16s  %7s  %16s" % ("hosts", "one request", "per provider",
                                          "ratio", "decision"))
    for n in args.hosts:
        one, each, decide, k = measure(n, args.runs)
        print("%6d  %14.0f ms  %14.0f ms  %6.0fx  %11.2f ms (%d servers)"
              % (n, one * 1000, each * 1000, each / one, decide * 1000, k))


if __name__ == "__main__":
    main()
