#!/usr/bin/env python3
"""fence_agent fencing latency: from the decision to the confirmed Off.

The fence_agent driver running Debian's real ClusterLabs agents against the
real BMC peers on loopback, ``--runs`` times each (the host powered on
again between runs through the peer, untimed):

``fence_ipmilan``         OpenIPMI's ipmi_sim (lanplus=1, cipher=3; the
                          agent's own defaults otherwise, which include
                          power_wait=2: it sleeps 2 s after sending off)
``fence_ipmilan-pw0``     the same with power_wait=0
``fence_redfish``         sushy-tools' emulator over TLS (ssl_insecure=1,
                          systems_uri given, as a site should: without it
                          the agent walks the Systems collection each run)

The clock starts when ``driver.power_off(bmc)`` is called (the engine's
fence action decided) and stops when it returns, i.e. once the agent has
reported Off (exit 2, ``Status: OFF``). After each run the peer itself is
asked and must say off. Prints, per target, the median and the max (and
min, p90), in milliseconds.

    .venv/bin/python benchmarks/fencing_fence_agent.py [--runs 20]
        [--targets fence_ipmilan fence_ipmilan-pw0 fence_redfish]

``fencing_target(workdir, conf)`` is the hook ``benchmarks/fencing.py``
looks for (a context manager yielding driver, bmc, power_on, peer_state);
it gives the fence_ipmilan target.
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

from functional.peers import ipmi as ipmi_peer  # noqa: E402
from functional.peers import procs  # noqa: E402
from functional.peers import redfish as redfish_peer  # noqa: E402
from benchmarks.fencing import measure, summary  # noqa: E402
from instanceha import conf as iha_conf  # noqa: E402
from instanceha.drivers import fencing  # noqa: E402
from instanceha.drivers.fencing import fence_agent  # noqa: E402
from instanceha.drivers.fencing import inventory, load_driver  # noqa: E402

TARGETS = ("fence_ipmilan", "fence_ipmilan-pw0", "fence_redfish")


def _entry(host, agent, address, username, password, params):
    data = {"hosts": {host: {"driver": "fence_agent", "agent": agent,
                             "address": address, "username": username,
                             "password": password, "params": params}}}
    return inventory.parse(data, fencing.FIELDS)[host]


def _need(agent):
    if fence_agent.find_agent(agent, fence_agent.DEFAULT_SEARCH_PATH) is None:
        raise procs.PeerError(agent, "fence agent %s is not installed "
                              "(tools/realpeers/install.sh installs "
                              "fence-agents)" % agent)


@contextlib.contextmanager
def ipmilan_target(workdir, conf, power_wait=None):
    _need("fence_ipmilan")
    name = "bench-fa-ipmi" + ("" if power_wait is None else "-pw%s" % power_wait)
    bmc = ipmi_peer.IPMIBMC(name, workdir).start()
    params = {"lanplus": 1, "cipher": 3, "ipport": bmc.port}
    if power_wait is not None:
        params["power_wait"] = power_wait
    try:
        yield types.SimpleNamespace(
            driver=load_driver("fence_agent", conf),
            bmc=_entry(name, "fence_ipmilan", "127.0.0.1", bmc.username,
                       bmc.password, params),
            power_on=bmc.power_on, peer_state=bmc.power_state)
    finally:
        bmc.stop()


@contextlib.contextmanager
def redfish_target(workdir, conf):
    _need("fence_redfish")
    bmc = redfish_peer.RedfishBMC("bench-fa-redfish", workdir).start()

    def power_on():
        if bmc.power_state() != "on":
            bmc.power_on()
        procs.wait_until(lambda: bmc.power_state() == "on", 30, "on",
                         bmc.host, bmc.log, interval=0.05)
    try:
        yield types.SimpleNamespace(
            driver=load_driver("fence_agent", conf),
            bmc=_entry(bmc.host, "fence_redfish", "127.0.0.1", bmc.username,
                       bmc.password, {"ipport": bmc.port,
                                      "ssl_insecure": True,
                                      "systems_uri": bmc.system_path}),
            power_on=power_on, peer_state=bmc.power_state)
    finally:
        bmc.stop()


def fencing_target(workdir, conf):
    """The hook benchmarks/fencing.py uses: fence_ipmilan vs ipmi_sim."""
    return ipmilan_target(workdir, conf)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--targets", nargs="+", default=list(TARGETS),
                        choices=TARGETS)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(
        logging.WARNING))
    conf = iha_conf.make({"fencing": {"timeout": 60}})
    print("fence_agent latency, decision -> agent reports Off; %d runs per "
          "target; [fencing] poll_interval=%g s" % (args.runs,
                                                   conf.fencing.poll_interval))
    rows = []
    with tempfile.TemporaryDirectory(prefix="instanceha-bench-fa-") as d:
        workdir = pathlib.Path(d)
        makers = {
            "fence_ipmilan": lambda: ipmilan_target(workdir, conf),
            "fence_ipmilan-pw0": lambda: ipmilan_target(workdir, conf, 0),
            "fence_redfish": lambda: redfish_target(workdir, conf),
        }
        for name in args.targets:
            try:
                with makers[name]() as target:
                    rows.append((name, summary(measure(target, args.runs)),
                                 None))
            except procs.PeerError as e:
                rows.append((name, None, str(e).splitlines()[0]))
    print("%-18s %5s %10s %10s %10s %10s" % ("target", "runs", "median ms",
                                             "p90 ms", "min ms", "max ms"))
    for name, s, why in rows:
        if s is None:
            print("%-18s skipped: %s" % (name, why))
        else:
            print("%-18s %5d %10.1f %10.1f %10.1f %10.1f" % (
                name, s["runs"], s["median"], s["p90"], s["min"], s["max"]))
    return 0 if all(s is not None for _, s, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
