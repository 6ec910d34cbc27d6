#!/usr/bin/env python3
"""bmh fencing latency: from the decision to the confirmed Off.

The bmh driver against our Kubernetes API emulator
(``functional/peers/kubeapi.py``) run as a process of its own on loopback:
HTTPS with a certificate made for the run, a bearer token, and a fake
Metal3 controller that moves ``status.poweredOn`` ``--controller-delay``
seconds after the power-off is asked for (the time the baremetal-operator
and Ironic take to act; 0.5 s by default, a fast BMC). ``--runs`` times
(the host powered on again between runs through the driver, then waited
for, untimed): the clock starts when ``driver.power_off(bmc)`` is called
(the engine's fence action decided) and stops when it returns, i.e. once
the BareMetalHost reports ``poweredOn: false``. After each run the emulator
itself is asked (not through the driver) and must say off. Prints the
median and the max (and min, p90), in milliseconds.

    .venv/bin/python benchmarks/fencing_bmh.py [--runs 20]
        [--controller-delay 0.5] [--poll-interval 1.0]

``fencing_target(workdir, conf)`` is the hook ``benchmarks/fencing.py``
looks for (a context manager yielding driver, bmc, power_on, peer_state).
"""

import argparse
import contextlib
import logging
import pathlib
import sys
import tempfile
import types

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from functional.peers import kubeapi  # noqa: E402
from functional.peers import procs  # noqa: E402
from benchmarks.fencing import measure, summary  # noqa: E402
from instanceha import conf as iha_conf  # noqa: E402
from instanceha.drivers import fencing  # noqa: E402
from instanceha.drivers.fencing import inventory, load_driver  # noqa: E402

HOST = "bench-bmh-0"
DEFAULT_CONTROLLER_DELAY = 0.5


@contextlib.contextmanager
def bmh_target(workdir, conf, controller_delay=DEFAULT_CONTROLLER_DELAY):
    peer = kubeapi.KubeAPIPeer("bench", workdir, delay=controller_delay)
    peer.start()
    driver = load_driver("bmh", conf)
    try:
        peer.add_host(HOST)
        bmc = inventory.parse({"hosts": {HOST: peer.inventory_entry(HOST)}},
                              fencing.FIELDS)[HOST]

        def power_on():
            if peer.power_state(HOST) != "on":
                driver.power_on(bmc)
            procs.wait_until(lambda: peer.power_state(HOST) == "on", 30,
                             "on", "kubeapi-bench", peer.log, interval=0.02)

        yield types.SimpleNamespace(driver=driver, bmc=bmc,
                                    power_on=power_on,
                                    peer_state=lambda: peer.power_state(HOST))
    finally:
        driver.close()
        peer.stop()


def fencing_target(workdir, conf):
    """The hook benchmarks/fencing.py uses."""
    return bmh_target(workdir, conf)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--controller-delay", type=float,
                        default=DEFAULT_CONTROLLER_DELAY,
                        help="seconds the fake Metal3 controller takes to "
                             "power the host off (default %(default)s)")
    parser.add_argument("--poll-interval", type=float, nargs="+",
                        default=[None],
                        help="[fencing] poll_interval values to measure "
                             "(default: the service's default)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        logging.WARNING))
    confs = []
    for interval in args.poll_interval:
        opts = {"timeout": 60}
        if interval is not None:
            opts["poll_interval"] = interval
        try:
            confs.append(iha_conf.make({"fencing": opts}))
        except ValueError as e:
            parser.error("--poll-interval %s: %s" % (interval, e))
    rows = []
    with tempfile.TemporaryDirectory(prefix="instanceha-bench-bmh-") as d:
        workdir = pathlib.Path(d)
        for conf in confs:
            interval = conf.fencing.poll_interval
            with bmh_target(workdir / ("poll-%s" % interval), conf,
                            args.controller_delay) as target:
                rows.append((interval, summary(measure(target, args.runs))))
    print("bmh fencing latency, decision -> BareMetalHost reports poweredOn "
          "false; %d runs each; controller delay %g s; emulator over HTTPS "
          "with a bearer token" % (args.runs, args.controller_delay))
    print("%-16s %5s %10s %10s %10s %10s" % ("poll_interval s", "runs",
                                             "median ms", "p90 ms", "min ms",
                                             "max ms"))
    for interval, s in rows:
        print("%-16g %5d %10.1f %10.1f %10.1f %10.1f" % (
            interval, s["runs"], s["median"], s["p90"], s["min"], s["max"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
