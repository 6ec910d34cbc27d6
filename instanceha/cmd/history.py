"""``instanceha history HOST``: the host's journal in time order.

Reads the journal ([journal] connection) directly, like ``instanceha
status HOST``: it works while the service is stopped (after a crash, on
another control node with the same database). The same entries as GET
/hosts/<host>/history, one line each, or JSON lines with --json.
"""

import argparse
import json
import sys
import time

from instanceha.api import history as history_mod
from instanceha.cmd.common import load_conf, reading_journal
from instanceha.cmd.common import split_config_args

PAGE = 500


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha history",
        description="Every transition, action and evacuation of HOST, "
                    "in time order.")
    p.add_argument("host", help="compute host name (or its service id)")
    p.add_argument("--since", help="from this time: ISO 8601 UTC "
                   "(2026-11-25T07:00:00Z), epoch seconds, or a duration "
                   "ago (30m, 2h, 7d)")
    p.add_argument("--until", help="before this time (same forms)")
    p.add_argument("--limit", type=int, default=None,
                   help="print at most this many entries (the oldest)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line instead of text")
    return p


def main(argv, now=None):
    mine, oslo = split_config_args(argv)
    p = parser()
    args, more = p.parse_known_args(mine)
    oslo += more
    now = time.time() if now is None else now
    try:
        since = history_mod.parse_time(args.since, now, "--since") \
            if args.since else None
        until = history_mod.parse_time(args.until, now, "--until") \
            if args.until else None
    except history_mod.BadRequest as e:
        p.error(str(e))
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be at least 1")
    conf = load_conf(oslo)
    result, rc = reading_journal(
        conf, lambda journal: _print(journal, args, since, until))
    return rc or result


def _print(journal, args, since, until):
    found = history_mod.find_host(journal, None, args.host)
    if found is None:
        # Not a host: a server's instance repair rows (issue 25).
        from instanceha.cmd import repair
        if repair.history_server(journal, args.host, args.json):
            return 0
        print("instanceha: no host %r in the journal" % args.host,
              file=sys.stderr)
        return 1
    host_id, name = found
    marker, printed = None, 0
    while True:
        want = PAGE if args.limit is None else min(PAGE,
                                                   args.limit - printed)
        entries, next_marker = history_mod.page(
            journal, host_id, since=since, until=until, marker=marker,
            limit=want)
        for e in entries:
            print(json.dumps(e) if args.json
                  else history_mod.format_entry(e))
        printed += len(entries)
        if next_marker is None or (args.limit is not None
                                   and printed >= args.limit):
            break
        marker = history_mod.parse_marker(next_marker)
    if not printed and not args.json:
        print("no entries for host %s%s" % (
            name, " in that time" if since or until else ""))
    return 0
