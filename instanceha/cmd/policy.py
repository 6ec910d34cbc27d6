"""``instanceha policy explain SERVER``: what the recovery policies decide
for SERVER (its id or its name) if its host is lost, and why. Reads Nova,
changes nothing."""

import argparse
import re
import sys
import time

from instanceha.cmd.common import config_arguments, load_conf
from instanceha.cmd.common import split_config_args
from instanceha.drivers.compute import base as compute_base

USAGE = "usage: instanceha policy explain SERVER [--config-file F]"
#: A Nova server id.
UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?"
                  r"[0-9a-f]{12}$", re.I)


class Ambiguous(Exception):
    """More than one server has the name given."""


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha policy explain",
        description="What the recovery policies decide for SERVER if its "
                    "host is lost (evacuated or not, its repair, its "
                    "priority), and which setting decides it. Reads Nova "
                    "([DEFAULT] cloud); changes nothing.")
    p.add_argument("server", metavar="SERVER",
                   help="the server's id, or its name (across all "
                        "projects; a name several servers have is "
                        "refused, with their ids)")
    config_arguments(p)
    return p


def resolve(compute, ref):
    """The id of the server ``ref`` names: an id as it is; a name through
    the compute driver (a name nobody has is left for get_server to
    refuse, as an id of a driver whose ids are not UUIDs). Raises
    Ambiguous for a name more than one server has."""
    if UUID.match(ref):
        return ref
    found = compute.find_servers(ref)
    if len(found) > 1:
        raise Ambiguous("%d servers are named %r: %s; give its id" % (
            len(found), ref, ", ".join(
                "%s (on %s)" % (s.id, s.host or "no host")
                for s in sorted(found, key=lambda s: s.id))))
    return found[0].id if found else ref


def main(argv, driver=None):
    """``driver``: the compute driver's class (NovaDriver)."""
    if argv and argv[0] in ("-h", "--help"):
        parser().print_help()
        return 0
    if not argv or argv[0] != "explain":
        print(USAGE, file=sys.stderr)
        return 2
    mine, oslo = split_config_args(argv[1:])
    args, more = parser().parse_known_args(mine)
    conf = load_conf(oslo + more)
    if driver is None:
        # Local: openstacksdk costs ~0.3 s at import; only this command
        # reads Nova.
        from instanceha.drivers.compute.nova import NovaDriver as driver
    from instanceha.engine import selection
    try:
        compute = driver(conf)
        server_id = resolve(compute, args.server)
        lines = selection.explain(conf, compute, server_id, time.time())
    except Ambiguous as e:
        print("instanceha: %s" % e, file=sys.stderr)
        return 1
    except compute_base.NotFound:
        print("instanceha: no server %s" % args.server, file=sys.stderr)
        return 1
    except compute_base.ComputeError as e:
        print("instanceha: cannot read Nova: %s" % e, file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
