"""``instanceha repair SERVER [--level L] [--reason R]`` (a one-off
instance repair, up the ladder to level L), ``instanceha repair --clear
SERVER`` (clear a server's failure), and the server half of ``instanceha
status SERVER`` and ``instanceha history SERVER`` (issue 25). The
commands go to the running service's API like the host commands."""

import argparse
import sys
import time
import urllib.parse

from instanceha.api import client
from instanceha.cmd.common import load_conf, split_config_args

LEVELS = client.REPAIR_LEVELS


def parser():
    p = argparse.ArgumentParser(prog="instanceha repair")
    p.add_argument("server", help="the server's id")
    p.add_argument("--level", choices=LEVELS, default=None,
                   help="the highest repair level this repair may use "
                        "(default: the server's own)")
    p.add_argument("--clear", action="store_true",
                   help="clear the server's failure: its ladder starts "
                        "again at the next breakage")
    p.add_argument("--reason", default="")
    return p


def main(argv):
    p = parser()
    argv, rest = split_config_args(argv)
    args, more = p.parse_known_args(argv)
    rest += more
    if args.clear and args.level:
        p.error("give --level or --clear, not both")
    conf = load_conf(rest)
    body = {"reason": args.reason or ("by repair --clear" if args.clear
                                      else "by repair")}
    if args.clear:
        body["clear"] = True
    elif args.level:
        body["level"] = args.level
    answer = _ask(conf, "POST", args.server, 202, "repair refused", body)
    if answer is None:
        return 1
    if args.clear:
        print("%s: failure cleared; its repair ladder starts again"
              % answer["server"])
    else:
        print("%s: repair requested%s" % (
            answer["server"], " up to level %s" % args.level
            if args.level else ""))
    return 0


def _ask(conf, method, server, expect, refused, body=None):
    """The API's answer about ``server``'s repair when its code is
    ``expect``; otherwise None, once the failure (``refused``: what a
    refusal is called) is said on stderr."""
    path = "/servers/%s/repair" % urllib.parse.quote(server, safe="")
    try:
        code, answer = client.call(conf, method, path, body)
    except client.ClientError as e:
        print("instanceha: %s" % e, file=sys.stderr)
        return None
    if code != expect:
        print("instanceha: %s (%d): %s" % (
            refused, code, client.error_text(answer)), file=sys.stderr)
        return None
    return answer


def _when(at):
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def format_row(r):
    """One instance_repairs journal row, for the operator."""
    text = "%s  repair   %-13s %-13s" % (_when(r.get("started_at")),
                                         r.get("action"),
                                         r.get("outcome") or "")
    if r.get("step"):
        text += " step %s" % r["step"]
    if r.get("host_name"):
        text += " on %s" % r["host_name"]
    if r.get("detail"):
        text += ": %s" % r["detail"]
    return text


def format_server(view):
    """GET /servers/<id>/repair's answer, for ``instanceha status
    SERVER``."""
    lines = ["server %s (%s): %s on %s; instance repair %s" % (
        view.get("name") or "?", view["server"], view.get("status"),
        view.get("host"), "on" if view.get("enabled") else "off")]
    case = view.get("case")
    if case:
        lines.append("  repair: %s%s (%s, from %s)" % (
            case["state"], ", %s running" % case["action"]
            if case.get("action") else "", case.get("why") or
            case.get("reason"), case.get("source")))
    else:
        lines.append("  repair: nothing open")
    for name, value in sorted((view.get("markers") or {}).items()):
        lines.append("  marker %s: %s" % (name, value))
    rows = view.get("rows") or []
    if rows:
        lines.append("  journal (%d rows):" % len(rows))
        lines.extend("    " + format_row(r) for r in rows)
    return "\n".join(lines)


def status_server(conf, server):
    """``instanceha status SERVER``: asked of the service's API."""
    answer = _ask(conf, "GET", server, 200,
                  "no host or server %r" % server)
    if answer is None:
        return 1
    print(format_server(answer))
    return 0


def history_server(journal, server, as_json=False):
    """``instanceha history SERVER``: its instance repair rows. Returns
    the number of rows printed."""
    import json
    rows = journal.repairs(server)
    for r in rows:
        print(json.dumps(r) if as_json else format_row(r))
    return len(rows)


