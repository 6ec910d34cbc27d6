"""``instanceha policy explain SERVER``: what the recovery policies decide
for SERVER if its host is lost, and why. Reads Nova, changes nothing."""

import sys
import time

from instanceha.cmd.common import load_conf
from instanceha.drivers.compute import base as compute_base


def main(argv):
    """``instanceha policy explain SERVER``: reads Nova, changes nothing."""
    if len(argv) < 2 or argv[0] != "explain" or argv[1].startswith("-"):
        print("usage: instanceha policy explain SERVER [--config-file F]",
              file=sys.stderr)
        return 2
    server_id, conf = argv[1], load_conf(argv[2:])
    # Local: openstacksdk and the engine cost ~0.3 s at import; only this
    # command reads Nova.
    from instanceha.drivers.compute.nova import NovaDriver
    from instanceha.engine import selection
    try:
        lines = selection.explain(conf, NovaDriver(conf), server_id,
                                  time.time())
    except compute_base.NotFound:
        print("instanceha: no server %s" % server_id, file=sys.stderr)
        return 1
    except compute_base.ComputeError as e:
        print("instanceha: cannot read Nova: %s" % e, file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
