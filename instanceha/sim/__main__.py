"""``instanceha-sim``: run the simulated cloud until SIGINT/SIGTERM.

    python -m instanceha.sim --hosts 6 --servers-per-host 5 --port 8787 \\
        --write-config /tmp/sim

With ``--agents``, every host runs a heartbeat agent (sim/agents.py)
beating to ``--agent-engines``, signed with ``--agent-key-file``; with
``--write-config DIR`` and neither given, a key file and free ports are
made in DIR and the engine's ``[agent]`` options printed. The
``--agent-*`` fault flags apply to every host's agent.
"""

import argparse
import signal
import sys
import threading

from instanceha import simrun
from instanceha.heartbeat import keys
from instanceha.sim.agents import SimAgents
from instanceha.sim.model import SimCloud
from instanceha.sim.server import SimServer

FLOAT_PARAMS = ("report_interval", "service_down_time", "evacuation_time",
                "schedule_time", "boot_time", "power_delay", "api_latency",
                "live_migration_time", "cold_migration_time",
                "migration_monitor_interval", "server_boot_time")
INT_PARAMS = ("hosts", "servers_per_host", "host_vcpus", "server_vcpus",
              "host_ram_mb", "host_disk_gb", "server_ram_mb", "server_disk_gb",
              "api_max_limit",
              "seed")


def build_parser():
    p = argparse.ArgumentParser(
        prog="instanceha-sim",
        description="Simulated Keystone + Nova + Redfish BMCs on loopback.")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8787,
                   help="port to listen on; 0 picks a free one")
    p.add_argument("--write-config", metavar="DIR",
                   help="write clouds.yaml and bmc.yaml into DIR")
    p.add_argument("--host-prefix", default="compute-")
    p.add_argument("--no-disabled-prefilter", dest="disabled_prefilter",
                   action="store_false",
                   help="a server forced onto a disabled compute boots "
                        "there (Nova before Train); by default it fails "
                        "with NoValidHost, as Placement's pre-filter of "
                        "disabled computes makes it since Train")
    for name in INT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    for name in FLOAT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), type=float,
                       default=None, metavar="SECONDS")
    _agent_args(p)
    return p


def _agent_args(p):
    g = p.add_argument_group("heartbeat agents")
    g.add_argument("--agents", action="store_true",
                   help="run a heartbeat agent on every host")
    g.add_argument("--agent-engines", metavar="ADDR:PORT[,...]",
                   help="the engines' heartbeat listeners")
    g.add_argument("--agent-key-file", metavar="PATH",
                   help="the shared key file (mode 0600)")
    g.add_argument("--agent-request-port", type=int, default=7412,
                   help="where the agents take the engines' requests "
                        "(default 7412)")
    g.add_argument("--agent-interval", type=float, default=1.0,
                   metavar="SECONDS", help="seconds between beats")
    g.add_argument("--agent-two-paths", action="store_true",
                   help="beat over mgmt (127.0.0.1) and storage "
                        "(127.0.0.2), not mgmt alone")
    g.add_argument("--agent-loss", type=float, metavar="P",
                   help="drop each beat with this probability")
    g.add_argument("--agent-delay", type=float, metavar="SECONDS",
                   help="deliver each beat this much later")
    g.add_argument("--agent-path-down", metavar="PATH",
                   help="this path's network is down on every host")
    g.add_argument("--agent-clock-offset", type=float, metavar="SECONDS",
                   help="every host's clock is this far off")


AGENTS_USAGE = ("--agents needs --agent-engines and --agent-key-file, or "
                "--write-config alone")


def check_agent_args(args, parser):
    """Refuse a combination of agent flags that cannot work, before
    anything starts."""
    if not args.agents:
        return
    explicit = bool(args.agent_engines and args.agent_key_file)
    generated = bool(args.write_config and not args.agent_engines
                     and not args.agent_key_file)
    if not (explicit or generated):
        parser.error(AGENTS_USAGE)


def start_agents(args, cloud, parser):
    """The agents the flags ask for, started, or None."""
    if not args.agents:
        return None
    if args.agent_engines and args.agent_key_file:
        paths = dict(simrun.TWO_PATHS if args.agent_two_paths
                     else simrun.MGMT)
        agents = SimAgents(
            cloud, [e.strip() for e in args.agent_engines.split(",")],
            keys.load_keyring(args.agent_key_file),
            interval=args.agent_interval, paths=paths,
            request_port=args.agent_request_port)
    elif args.write_config and not (args.agent_engines
                                    or args.agent_key_file):
        setup = simrun.agent_setup(args.write_config, args.agent_two_paths,
                                   args.agent_interval)
        agents = SimAgents(cloud, **setup.sim_args())
        print("instanceha-sim: engine's [agent]: %s" % ", ".join(
            "%s = %s" % (k, ",".join(v) if isinstance(v, list) else v)
            for k, v in setup.engine_options().items()), flush=True)
    else:
        parser.error(AGENTS_USAGE)
    try:
        agents.set_fault(loss=args.agent_loss, delay=args.agent_delay)
        if args.agent_path_down:
            agents.set_fault(path=args.agent_path_down, down=True)
    except ValueError as e:
        parser.error(str(e))
    if args.agent_clock_offset:
        agents.set_clock_offset(args.agent_clock_offset)
    return agents.start()


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    check_agent_args(args, parser)
    params = {k: getattr(args, k) for k in INT_PARAMS + FLOAT_PARAMS
              if getattr(args, k) is not None}
    cloud = SimCloud(host_prefix=args.host_prefix,
                     disabled_prefilter=args.disabled_prefilter, **params)
    srv = SimServer(cloud, host=args.bind, port=args.port)
    stop = threading.Event()

    def _stop(signum, frame):
        stop.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    srv.start()
    print("instanceha-sim: %d hosts, %d servers at %s"
          % (len(cloud.hosts), len(cloud.servers), srv.url), flush=True)
    if args.write_config:
        for path in srv.write_client_files(args.write_config):
            print("instanceha-sim: wrote %s" % path, flush=True)
    try:
        agents = start_agents(args, cloud, parser)
    except BaseException:
        srv.stop()
        raise
    try:
        while not stop.wait(0.5):
            pass
    finally:
        if agents is not None:
            agents.stop()
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
