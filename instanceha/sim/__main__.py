"""``instanceha-sim``: run the simulated cloud until SIGINT/SIGTERM.

    python -m instanceha.sim --hosts 6 --servers-per-host 5 --port 8787 \\
        --write-config /tmp/sim
"""

import argparse
import signal
import sys
import threading

from instanceha.sim.model import SimCloud
from instanceha.sim.server import SimServer

FLOAT_PARAMS = ("report_interval", "service_down_time", "evacuation_time",
                "schedule_time", "boot_time", "power_delay", "api_latency")
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
    for name in INT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    for name in FLOAT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), type=float,
                       default=None, metavar="SECONDS")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    params = {k: getattr(args, k) for k in INT_PARAMS + FLOAT_PARAMS
              if getattr(args, k) is not None}
    cloud = SimCloud(host_prefix=args.host_prefix, **params)
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
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
