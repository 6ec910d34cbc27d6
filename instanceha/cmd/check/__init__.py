"""``instanceha check [--config-file F]``: could this node recover a host?

Run before enabling the service (and after changing its configuration or
the BMC inventory). It reads, and writes nothing:

1. the configuration files, then every start-up check ``instanceha run``
   makes (the same list, :mod:`instanceha.service.preflight`): the
   journal's URL, the BMC inventory (every error at once), the operator
   API's socket directory and TCP address, the notification transport,
   the kdump and agent heartbeat listeners' addresses, the agents' key
   files, clouds.yaml;
2. the BMC inventory (secrets' modes, shared BMCs; noop said loudly);
3. Nova through clouds.yaml: the maximum microversion, the compute
   services, and every compute host having a way to be fenced;
4. the notification broker, when ``[notifications] enabled`` (a
   connection through oslo.messaging's transport);
5. the coordination backend, when ``[coordination] backend_url`` is set
   (reached without joining the group);
6. the journal (connects; a SQLite file not yet created is not created);
7. one power-state read per fencing method of every host (no action).

It prints one line per finding (OK, WARN, FAIL, SKIP) and exits 2 when
``instanceha run`` would refuse to start (its start-up checks: the lines
``run`` prints), 1 when another FAIL would prevent a recovery, 0
otherwise. Nothing printed holds a
secret: every line goes through :func:`instanceha.log.mask_text`, and
URLs are shown without their password.
"""

import logging
import sys

from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha import log
from instanceha.cmd.check import backends
from instanceha.cmd.check import fencing
from instanceha.cmd.check import nova
from instanceha.cmd.check.report import FAIL, OK, WARN, Report
from instanceha.service import preflight


# -- 1. configuration and every start-up check of ``run`` -------------------

def check_config(argv, report):
    try:
        conf = conf_pkg.load(argv)
    except (cfg.Error, ValueError) as e:
        report.add(FAIL, "configuration", e, refuses=True)
        return None
    files = conf_pkg.config_files(conf)
    if not files:
        report.add(WARN, "configuration", "no configuration file read: "
                   "every option has its default (give --config-file)")
    else:
        report.add(OK, "configuration", "%s: every option known and valid"
                   % ", ".join(files))
    return conf


def check_startup(conf, report):
    """``instanceha run``'s own start-up checks (the same list it makes);
    returns ((the inventory, its warnings) or None, {what refused})."""
    inventory, refused = None, set()
    for outcome in preflight.run(conf):
        for line in outcome.errors:
            report.add(FAIL, outcome.what, line, refuses=True)
        if outcome.errors:
            refused.add(outcome.what)
            continue
        if outcome.what == "inventory":
            inventory = outcome.value
        elif outcome.ok:
            report.add(OK, outcome.what, outcome.ok)
    return inventory, refused


# -- the command --------------------------------------------------------------

def run(argv, compute_factory=nova.nova_driver,
        fencer_factory=fencing.fencer,
        connect_broker=backends.connect_broker,
        probe_coordination=backends.probe_coordination):
    """Every check in order; returns the :class:`Report`."""
    report = Report()
    conf = check_config(argv, report)
    if conf is None:
        return report
    read, refused = check_startup(conf, report)
    inventory = fencing.check_inventory(conf, read, report)
    # The live reads, but none of what the start-up checks refused (said
    # once, as run says it).
    services = None
    if "nova" not in refused:
        _, services = nova.check_nova(conf, report, compute_factory)
    fencing.check_coverage(conf, inventory, services, report)
    if "notifications" not in refused:
        backends.check_notifications(conf, report, connect_broker)
    backends.check_coordination(conf, report, probe_coordination)
    if "journal" not in refused:
        backends.check_journal(conf, report)
    fencing.check_fencing(conf, inventory, services, report, fencer_factory)
    return report


def _quiet_logs(conf_fmt="console"):
    """Library and driver log lines go to stderr, warnings and above only,
    so that stdout is the report."""
    log.setup(conf_fmt, False, stream=sys.stderr)
    logging.getLogger().setLevel(logging.WARNING)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    _quiet_logs()
    report = run(argv)
    print(report.render())
    sys.stdout.flush()
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
