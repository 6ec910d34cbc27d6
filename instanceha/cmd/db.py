"""``instanceha db upgrade``: the journal's schema brought to this
release's (like ``nova-manage db sync``). ``instanceha run`` does the
same at each start, so running it first is optional: it lets an operator
upgrade the schema once, before the replicas of the new release start,
and see the result. ``instanceha db version`` prints the revision the
journal is at, and the one this release needs."""

import argparse
import sys

from instanceha.cmd.common import load_conf, split_config_args
from instanceha.log import mask_url


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha db",
        description="The journal's database schema ([journal] connection).")
    p.add_argument("action", choices=("upgrade", "version"),
                   help="upgrade: bring the schema to this release's "
                        "(creating the journal if it does not exist); "
                        "version: print its revision")
    return p


def main(argv):
    mine, oslo = split_config_args(argv)
    p = parser()
    args, more = p.parse_known_args(mine)
    conf = load_conf(oslo + more)
    url = conf.journal.connection
    # Local: SQLAlchemy and alembic cost ~0.3 s at import.
    from instanceha.journal import migrate
    try:
        if args.action == "version":
            # Read-only: a journal that does not exist is not created.
            from instanceha.journal import read_only
            try:
                engine = read_only.engine(url)
            except read_only.NoJournal as e:
                print("instanceha: %s (this release needs revision %s)"
                      % (e, migrate.HEAD), file=sys.stderr)
                return 1
            try:
                with engine.connect() as c:
                    at = migrate.current(c)
            finally:
                engine.dispose()
            print("journal %s: revision %s (this release needs %s)"
                  % (mask_url(url), at or "none", migrate.HEAD))
            return 0 if at == migrate.HEAD else 1
        from instanceha.journal import Journal
        journal = Journal(url)
        try:
            before, after = journal.schema
        finally:
            journal.close()
    except Exception as e:      # noqa: BLE001 - a CLI says it and exits
        print("instanceha: journal %s: %s" % (mask_url(url), mask_url(e)),
              file=sys.stderr)
        return 1
    if before == after:
        print("journal %s: already at revision %s" % (mask_url(url), after))
    else:
        print("journal %s: upgraded from revision %s to %s"
              % (mask_url(url), before or "none", after))
    return 0
