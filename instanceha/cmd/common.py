"""What the CLI's subcommands share: their configuration, the split of
their arguments from oslo.config's, reading the journal, and how an age
is printed.

A module of its own so that :mod:`instanceha.cmd.main` and the
subcommands it dispatches to import it without importing each other.
"""

import logging
import sys
import time

from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha import log
from instanceha.log import mask_url


def load_conf(argv):
    """The configuration from ``argv`` (--config-file, ...); a bad one is
    said on stderr and exits 2."""
    try:
        return conf_pkg.load(argv)
    except (cfg.Error, ValueError) as e:
        print("instanceha: configuration error: %s" % e, file=sys.stderr)
        raise SystemExit(2)


def split_config_args(argv):
    """(command args, oslo.config args): --config-file/--config-dir and
    their values go to oslo.config, so that an optional HOST cannot take
    a config file's path."""
    mine, oslo = [], []
    it = iter(argv)
    for arg in it:
        if arg in ("--config-file", "--config-dir"):
            oslo.append(arg)
            oslo.append(next(it, ""))
        elif arg.startswith(("--config-file=", "--config-dir=")):
            oslo.append(arg)
        else:
            mine.append(arg)
    return mine, oslo


def reading_journal(conf, read):
    """``read(journal)`` on the configured journal, opened read-only
    (nothing created, upgraded or written) and closed after. Returns (its
    result, 0), or (None, 1) once a journal that does not exist yet, is of
    another release, or cannot be opened or read is said on stderr in one
    line, its URL's password masked."""
    # Local: SQLAlchemy costs ~0.1 s at import; only the commands that
    # read the journal (status HOST, history) need it.
    from instanceha.journal import Journal
    from instanceha.journal import read_only
    journal = None
    try:
        journal = Journal(conf.journal.connection, read_only=True)
        return read(journal), 0
    except (read_only.NoJournal, read_only.OutOfDate) as e:
        print("instanceha: %s" % e, file=sys.stderr)
        return None, 1
    except BrokenPipeError:
        raise               # stdout's reader went away: see cmd.main
    except Exception as e:      # noqa: BLE001 - a CLI says it and exits
        print("instanceha: cannot read the journal %s: %s"
              % (mask_url(conf.journal.connection), mask_url(e)),
              file=sys.stderr)
        return None, 1
    finally:
        if journal is not None:
            journal.close()


def age(seconds):
    """A duration for the operator: 42s, 17m, 3h05m (never negative)."""
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm" % (seconds // 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def iso(at):
    """Epoch seconds as ISO 8601 UTC to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def config_arguments(parser):
    """--config-file and --config-dir in an argparse ``parser``'s help
    (split_config_args hands them to oslo.config)."""
    parser.add_argument("--config-file", metavar="PATH", action="append",
                        help="a configuration file (repeatable: later "
                             "files win); default "
                             "/etc/instanceha/instanceha.conf")
    parser.add_argument("--config-dir", metavar="DIR", action="append",
                        help="a directory whose *.conf files are read "
                             "after the --config-file ones")


class _Stderr:
    """The process's stderr when written to (a test's capture, or the
    real one), not when the log handler was made."""

    @staticmethod
    def write(text):
        sys.stderr.write(text)

    @staticmethod
    def flush():
        sys.stderr.flush()


def logs_to_stderr():
    """Log lines (structlog's and the libraries'), warnings and errors
    only, to stderr, masked like the service's: stdout is for the
    command's answer alone, and stderr for what went wrong."""
    log.setup("console", False, stream=_Stderr(), level=logging.WARNING)
