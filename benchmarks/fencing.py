#!/usr/bin/env python3
"""Fencing latency per driver: from the decision to the confirmed Off.

For each driver, against a real peer started on loopback, ``--runs`` times
(the host powered on again between runs, untimed): the clock starts when
``driver.power_off(bmc)`` is called (the engine's fence action decided) and
stops when it returns, i.e. once the BMC has reported power Off. After each
run the peer itself is asked (not through the driver) and must say off.
Prints, per driver, the median and the max (and min, p90).

Drivers measured here:

``redfish``          sushy-tools' emulator over TLS with basic auth
``redfish-session``  the same with ``auth: session`` (a Redfish session,
                     opened on the first run and reused)
``ipmi``             OpenIPMI's ipmi_sim through ipmitool (lanplus, -C 3)

Other drivers plug in without changing this file: if
``benchmarks/fencing_<name>.py`` exists (``fencing_fence_agent.py``,
``fencing_bmh.py``), it is imported and its ``fencing_target(workdir,
conf)`` is used. That function returns a context manager yielding an
object with:

    driver       a FencingDriver (e.g. load_driver(name, conf))
    bmc          the inventory.BMC entry to fence
    power_on()   power the host on and return once the peer says on
    peer_state() "on" or "off", as the peer itself reports it

(:class:`Target` is one such object.) A module that is missing, fails to
import, or has no ``fencing_target`` is reported as skipped.

    .venv/bin/python benchmarks/fencing.py [--runs 20] [--drivers ...]
        [--poll-interval 1.0] [--power-delay 0]
"""

import argparse
import contextlib
import dataclasses
import importlib.util
import logging
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from functional.peers import ipmi as ipmi_peer  # noqa: E402
from functional.peers import procs  # noqa: E402
from functional.peers import redfish as redfish_peer  # noqa: E402
from instanceha import conf as iha_conf  # noqa: E402
from instanceha.drivers import fencing  # noqa: E402
from instanceha.drivers.fencing import inventory, load_driver  # noqa: E402

BUILTIN = ("redfish", "redfish-session", "ipmi")
#: name -> module file of a driver benchmarked elsewhere (optional)
OPTIONAL = {
    "fence_agent": REPO / "benchmarks" / "fencing_fence_agent.py",
    "bmh": REPO / "benchmarks" / "fencing_bmh.py",
}


@dataclasses.dataclass
class Target:
    driver: Any
    bmc: Any
    power_on: Callable[[], None]
    peer_state: Callable[[], str]


def _entry(host, fields):
    return inventory.parse({"hosts": {host: fields}}, fencing.FIELDS)[host]


@contextlib.contextmanager
def redfish_target(workdir, conf, auth="basic", power_delay=0):
    bmc = redfish_peer.RedfishBMC("bench-%s" % auth, workdir,
                                  power_delay=power_delay,
                                  sessions=(auth == "session"))
    bmc.start()
    driver = load_driver("redfish", conf)
    try:
        def power_on():
            if bmc.power_state() != "on":
                bmc.power_on()
            procs.wait_until(lambda: bmc.power_state() == "on", 30,
                             "on", bmc.host, bmc.log, interval=0.05)
        yield Target(driver, _entry(bmc.host, dict(bmc.inventory_entry(),
                                                    auth=auth)),
                     power_on, bmc.power_state)
    finally:
        driver.close()
        bmc.stop()


@contextlib.contextmanager
def ipmi_target(workdir, conf):
    bmc = ipmi_peer.IPMIBMC("bench-ipmi", workdir)
    bmc.start()
    try:
        yield Target(load_driver("ipmi", conf),
                     _entry(bmc.host, bmc.inventory_entry()),
                     bmc.power_on, bmc.power_state)
    finally:
        bmc.stop()


def _optional(name):
    """(fencing_target function, None) or (None, why it is skipped)."""
    path = OPTIONAL[name]
    if not path.exists():
        return None, "%s not written yet" % path.relative_to(REPO)
    spec = importlib.util.spec_from_file_location("bench_fencing_" + name,
                                                  path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - report and go on
        return None, "cannot import %s: %s: %s" % (path.name,
                                                   type(e).__name__, e)
    func = getattr(module, "fencing_target", None)
    if func is None:
        return None, "%s has no fencing_target(workdir, conf)" % path.name
    return func, None


def measure(target, runs):
    """Seconds from power_off() called to Off confirmed, one per run."""
    times = []
    for i in range(runs):
        target.power_on()
        t0 = time.perf_counter()
        target.driver.power_off(target.bmc)
        times.append(time.perf_counter() - t0)
        state = target.peer_state()
        if state != "off":
            raise SystemExit("run %d: the driver returned but the peer says "
                             "%r" % (i + 1, state))
    return times


def summary(times):
    ms = sorted(t * 1000 for t in times)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return {"runs": len(ms), "median": statistics.median(ms), "p90": p90,
            "min": ms[0], "max": ms[-1]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--drivers", nargs="+",
                        default=list(BUILTIN) + list(OPTIONAL),
                        choices=list(BUILTIN) + list(OPTIONAL))
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="[fencing] poll_interval (default: the "
                             "service's default)")
    parser.add_argument("--power-delay", type=int, default=0,
                        help="seconds the Redfish emulator takes to apply "
                             "a power change (whole seconds; default 0)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        logging.WARNING))
    fencing_opts = {"timeout": 60}
    if args.poll_interval is not None:
        fencing_opts["poll_interval"] = args.poll_interval
    conf = iha_conf.make({"fencing": fencing_opts})
    print("fencing latency, decision -> BMC confirms Off; %d runs per driver; "
          "[fencing] poll_interval=%g s, retries=%d; redfish power delay %d s"
          % (args.runs, conf.fencing.poll_interval, conf.fencing.retries,
             args.power_delay))
    rows = []
    with tempfile.TemporaryDirectory(prefix="instanceha-bench-fencing-") as d:
        workdir = pathlib.Path(d)
        for name in args.drivers:
            if name == "redfish":
                make = lambda: redfish_target(  # noqa: E731
                    workdir, conf, "basic", args.power_delay)
            elif name == "redfish-session":
                make = lambda: redfish_target(  # noqa: E731
                    workdir, conf, "session", args.power_delay)
            elif name == "ipmi":
                make = lambda: ipmi_target(workdir, conf)  # noqa: E731
            else:
                func, why = _optional(name)
                if func is None:
                    rows.append((name, None, why))
                    continue
                make = lambda func=func: func(workdir, conf)  # noqa: E731
            try:
                with make() as target:
                    rows.append((name, summary(measure(target, args.runs)),
                                 None))
            except procs.PeerError as e:
                rows.append((name, None, str(e).splitlines()[0]))
    print("%-16s %5s %10s %10s %10s %10s" % ("driver", "runs", "median ms",
                                             "p90 ms", "min ms", "max ms"))
    for name, s, why in rows:
        if s is None:
            print("%-16s skipped: %s" % (name, why))
        else:
            print("%-16s %5d %10.1f %10.1f %10.1f %10.1f" % (
                name, s["runs"], s["median"], s["p90"], s["min"], s["max"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
