"""``instanceha capacity [--json]``: how many of the largest hosts of each
zone, aggregate and reserved pool (and of the cloud) can fail at once with
every server the recovery policy would evacuate still placed, as the
running service last measured it (``[failover_capacity]``), from its
status file like ``instanceha status``."""

import argparse
import json
import sys
import time

from instanceha.cmd.common import age, iso, load_conf
from instanceha.cmd.common import config_arguments, split_config_args
from instanceha.cmd.status import staleness


def format_capacity(view, now, stale=None):
    """The measure ``view`` (the status file's ``failover_capacity``) as a
    table, the measure's age and what it counted first."""
    lines = []
    if stale:
        lines.append("STALE: %s" % stale)
    at = view.get("at")
    head = "measured %s (%s ago), %.1f s of CPU" % (
        iso(at), age(max(0.0, now - at)), view.get("cpu_seconds") or 0.0) \
        if at is not None else "not measured yet"
    lines.append(head)
    if view.get("error"):
        lines.append("last measure failed (%s): the figures are the "
                     "measure before" % view["error"])
    floor = view.get("min_priority")
    lines.append("%d server(s) counted%s; %d of unknown size not counted"
                 % (view.get("counted") or 0,
                    " (priority %d and above)" % floor
                    if floor is not None else "",
                    view.get("unknown") or 0))
    scopes = view.get("scopes") or []
    if not scopes:
        lines.append("no compute host")
        return "\n".join(lines)
    width = max(len("SCOPE"), max(len(s["scope"]) for s in scopes))
    lines.append("%-*s  %9s  %7s  %12s  %s" % (
        width, "SCOPE", "CAN FAIL", "HOSTS", "DESTINATIONS", "WHY"))
    for s in scopes:
        can = ("%d+" % s["hosts"]) if s["capped"] else str(s["hosts"])
        mark = "  !" if s["hosts"] < 1 and s["members"] else ""
        lines.append("%-*s  %9s  %7d  %12d  %s%s" % (
            width, s["scope"], can, s["members"], s["destinations"],
            s["text"].split(": ", 1)[-1], mark))
    return "\n".join(lines)


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha capacity",
        description="Failover capacity: for each availability zone, host "
                    "aggregate, reserved pool and the cloud, how many of "
                    "its largest hosts can fail at once with every server "
                    "the recovery policy would evacuate still placed on "
                    "its other hosts (Placement's counts). Read from the "
                    "status file the service rewrites; the service "
                    "measures every [failover_capacity] interval. A scope "
                    "below 1 is marked '!'. Exit status 1 when the status "
                    "is stale or nothing was measured yet.")
    p.add_argument("--json", action="store_true",
                   help="the measure as JSON (the status file's "
                        "failover_capacity, with 'stale')")
    config_arguments(p)
    return p


def main(argv, now=None):
    mine, oslo = split_config_args(argv)
    args, more = parser().parse_known_args(mine)
    conf = load_conf(oslo + more)
    try:
        with open(conf.status_file) as f:
            data = json.load(f)
    except OSError as e:
        print("instanceha: no status at %s (%s); is the service running?"
              % (conf.status_file, e.strerror), file=sys.stderr)
        return 1
    except ValueError:
        print("instanceha: %s is not a status file" % conf.status_file,
              file=sys.stderr)
        return 1
    now = time.time() if now is None else now
    stale = staleness(data, now)
    view = data.get("failover_capacity")
    if args.json:
        print(json.dumps(dict(view or {}, stale=stale), indent=2,
                         sort_keys=True))
        return 1 if stale or not view else 0
    if not view:
        print("instanceha: no failover capacity measured yet (%s)" % (
            "[failover_capacity] enabled is false"
            if not conf.failover_capacity.enabled
            else "the service measures it every %.0f s, the first soon "
                 "after it starts" % conf.failover_capacity.interval),
            file=sys.stderr)
        return 1
    print(format_capacity(view, now, stale))
    return 1 if stale else 0
