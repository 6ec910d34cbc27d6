#!/usr/bin/env python3
"""Time of the start-up check for BMCs shared by several inventory entries
(``inventory.shared``, run by ``warn_shared`` at start and on every reload,
and with name resolution by ``instanceha-check``), against inventory size.

Each inventory has one Redfish entry per host, by IP address, plus a few
entries sharing a BMC: one by the same address spelt differently, one by a
DNS name of that address (a stand-in resolver answers it, no DNS is asked),
three on one chassis with systems, one by a second (IPMI) method. Timed:

``indexed``    ``shared()`` as it is (entries filed by BMC identity)
``pairwise``   the former ``shared()`` (every pair of entries), kept in
               tests/unit/test_inventory_shared.py as the reference; run
               only up to --pairwise-max hosts (about 17 minutes at 20,000)

each without resolver (start-up, reload) and with one (the check command),
and the two answers compared where both ran. Last, the case an index cannot
shorten much: a chassis (one address) with --chassis systems, each entry
naming its own.

    .venv/bin/python benchmarks/inventory_shared.py [--sizes 2500,5000,20000]
        [--pairwise-max 5000] [--chassis 20000]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instanceha.drivers.fencing.inventory import BMC, shared  # noqa: E402
from tests.unit.test_inventory_shared import (  # noqa: E402
    Resolver, pairwise_shared)


def _redfish(host, address, system=None, fallbacks=()):
    options = {"system_id": system} if system else {}
    return BMC(host=host, driver="redfish", address=address, options=options,
               fallbacks=tuple(fallbacks))


def build(size):
    inv = {}
    for n in range(size):
        host = "c%05d" % n
        inv[host] = _redfish(host, "https://10.%d.%d.%d" % (
            n // 65536, n // 256 % 256, n % 256))
    last = ["c%05d" % n for n in range(size - 6, size)]
    inv[last[0]] = _redfish(last[0], "HTTPS://10.0.0.10:443/")
    inv[last[1]] = _redfish(last[1], "https://bmc-20.example")
    inv[last[2]] = _redfish(last[2], "https://chassis", "/Systems/1")
    inv[last[3]] = _redfish(last[3], "https://chassis", "/Systems/2")
    inv[last[4]] = _redfish(last[4], "https://chassis")
    inv[last[5]] = _redfish(last[5], "https://10.200.0.1", fallbacks=[
        BMC(host=last[5], driver="ipmi", address="10.0.0.30")])
    inv["c00031"] = BMC(host="c00031", driver="ipmi", address="10.0.0.30")
    return inv


def _timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2500,5000,20000")
    ap.add_argument("--pairwise-max", type=int, default=5000,
                    help="largest size the pairwise reference runs at")
    ap.add_argument("--chassis", type=int, default=20000,
                    help="systems on one chassis for the last case (0: skip)")
    args = ap.parse_args(argv)
    print("%7s  %-8s  %12s  %12s  %s" % (
        "hosts", "resolver", "pairwise s", "indexed s", "groups"))
    for size in [int(s) for s in args.sizes.split(",")]:
        inv = build(size)
        for with_resolver in (False, True):
            resolver = (Resolver({"bmc-20.example": ["10.0.0.20"]})
                        if with_resolver else None)
            new_s, new = _timed(shared, inv, resolver)
            old_text = "skipped"
            if size <= args.pairwise_max:
                old_s, old = _timed(pairwise_shared, inv, resolver)
                old_text = "%.3f" % old_s
                if old != new:
                    raise SystemExit("answers differ at %d hosts" % size)
            print("%7d  %-8s  %12s  %12.3f  %d" % (
                size, "yes" if with_resolver else "no", old_text, new_s,
                len(new)))
    if args.chassis:
        inv = {"s%05d" % n: _redfish("s%05d" % n, "https://chassis",
                                     "/Systems/%d" % n)
               for n in range(args.chassis)}
        new_s, new = _timed(shared, inv)
        print("chassis of %d systems, one entry each: indexed %.3f s, %d "
              "groups" % (args.chassis, new_s, len(new)))


if __name__ == "__main__":
    main()
