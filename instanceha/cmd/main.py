"""Console script ``instanceha``.

    instanceha run    [--config-file F]   run the service (SIGHUP: reload
                                          mutable options and the inventory)
    instanceha check  [--config-file F]   check the configuration, the
                                          inventory, Nova, the broker, the
                                          journal and every BMC before
                                          enabling the service
    instanceha status [--config-file F]   print every host's state, since when, why
    instanceha status HOST [--config-file F]
                                          HOST's state and, from the journal,
                                          what was decided for each of its
                                          servers in its last recovery, and why
    instanceha capacity [--json] [--config-file F]
                                          failover capacity: how many of the
                                          largest hosts of each zone, aggregate
                                          and reserved pool can fail at once
                                          with every server still placed
    instanceha demo   [--hosts N ...]     simulated cloud: kill a host, watch recovery
    instanceha suspend HOST (--seconds N | --forever) [--reason R] [--config-file F]
                                          hands off HOST until N seconds pass
                                          (or until resumed)
    instanceha maintenance HOST [--reason R] [--config-file F]
                                          planned work: heartbeat loss is ignored
    instanceha drain HOST [--reason R] [--then maintenance|decommission]
                     [--concurrency N] [--force] [--dry-run] [--config-file F]
                                          move every server off a live HOST by
                                          migrations (preflight first), then
                                          maintenance or decommission
    instanceha resume HOST [--reason R] [--fail-back|--no-fail-back]
                      [--config-file F]
                                          watch HOST again (or retry its recovery;
                                          a drained HOST is re-enabled, a drain
                                          in progress cancelled)
    instanceha resume --storm [--reason R] [--config-file F]
                                          lift the storm hold for the hosts lost now
    instanceha history HOST [--since TIME] [--until TIME] [--limit N] [--json]
                                          HOST's journal: every transition,
                                          action and evacuation, in time order
    instanceha status SERVER / history SERVER
                                          a server's instance repair: its case,
                                          markers and journal rows
    instanceha repair SERVER [--level L] [--reason R] [--config-file F]
                                          a one-off instance repair of SERVER
                                          (up the ladder to level L)
    instanceha repair --clear SERVER [--reason R] [--config-file F]
                                          clear SERVER's repair failure
    instanceha policy explain SERVER [--config-file F]
                                          what the recovery policies decide for
                                          SERVER if its host is lost, and why
    instanceha agent-key HOST --output FILE [--previous] [--force] [--config-file F]
                                          write HOST's own heartbeat key (derived
                                          from [agent] master_key_file) for its
                                          agent, mode 0600
    instanceha db upgrade [--config-file F]
                                          bring the journal's schema to this
                                          release's (run does it at start too)
    instanceha db version [--config-file F]
                                          the journal's schema revision

suspend, maintenance, drain and resume talk to the service's API through its
unix socket ([api] unix_socket, /run/instanceha/api.sock by default: run
them as the service's user or group); with [api] auth_strategy = keystone
they send a token for the clouds.yaml cloud the service uses ([DEFAULT]
cloud). status, capacity and history read the status file and
the journal.
"""

import os
import sys

from instanceha.cmd import demo
from instanceha.cmd import host_commands
from instanceha.cmd import policy
from instanceha.cmd import run
from instanceha.cmd import status
from instanceha.cmd.common import logs_to_stderr
# Re-exported: tests and callers know them as instanceha.cmd.main's.
from instanceha.cmd.host_commands import format_answer  # noqa: F401
from instanceha.cmd.host_commands import positive_seconds  # noqa: F401
from instanceha.cmd.status import format_decisions  # noqa: F401
from instanceha.cmd.status import format_status  # noqa: F401
from instanceha.cmd.status import server_decisions  # noqa: F401

USAGE = __doc__ + """
instanceha --version prints the release; instanceha COMMAND --help a
command's own options.
"""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (instanceha status | head -3): the rest of
        # the output is dropped, and so is Python's flush of it at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def version():
    """This release's version, as installed."""
    from importlib import metadata
    try:
        return metadata.version("instanceha")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _main(argv):
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.strip())
        return 0
    if argv[0] == "--version":
        print("instanceha %s" % version())
        return 0
    # Every command's log lines (a driver's, a library's) go to stderr:
    # stdout is the command's answer. run and demo set their own.
    logs_to_stderr()
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        return run.main(rest)
    if cmd == "status":
        return status.main(rest)
    if cmd == "capacity":
        from instanceha.cmd import capacity
        return capacity.main(rest)
    if cmd in ("suspend", "maintenance", "drain", "resume"):
        return host_commands.main(cmd, rest)
    if cmd == "repair":
        from instanceha.cmd import repair
        return repair.main(rest)
    if cmd == "policy":
        return policy.main(rest)
    if cmd == "agent-key":
        from instanceha.cmd import agent_key
        return agent_key.main(rest)
    if cmd == "demo":
        return demo.main(rest)
    if cmd == "check":
        # Local: the checks import the service, Nova's driver and the
        # backends' clients (~0.7 s), which no other CLI command needs.
        from instanceha.cmd import check
        return check.main(rest)
    if cmd == "db":
        # Local: it loads SQLAlchemy and alembic.
        from instanceha.cmd import db
        return db.main(rest)
    if cmd == "history":
        # Local: it reads the journal; at module top SQLAlchemy would cost
        # every CLI command ~0.2 s.
        from instanceha.cmd import history
        return history.main(rest)
    print("instanceha: unknown command %r\n\n%s" % (cmd, USAGE.strip()),
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
