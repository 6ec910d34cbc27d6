"""``instanceha check [--config-file F]``: could this node recover a host?

Run before enabling the service (and after changing its configuration or
the BMC inventory). It reads, and writes nothing:

1. the configuration files (every check ``instanceha run`` makes at start);
2. the BMC inventory (fields, secrets; the noop driver said loudly);
3. Nova through clouds.yaml: the maximum microversion, the compute
   services, and every compute host having a way to be fenced;
4. the notification broker, when ``[notifications] enabled`` (a
   connection through oslo.messaging's transport);
5. the coordination backend, when ``[coordination] backend_url`` is set
   (reached without joining the group);
6. the journal (connects; a SQLite file not yet created is not created);
7. one power-state read per fencing method of every host (no action).

It prints one line per finding (OK, WARN, FAIL, SKIP) and exits 1 when a
FAIL would prevent a recovery, 0 otherwise. Nothing printed holds a
secret: every line goes through :func:`instanceha.log.mask_text`, and
URLs are shown without their password.
"""

import concurrent.futures
import dataclasses
import logging
import os
import sqlite3
import sys
import threading

from instanceha import log

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"

#: seconds allowed for the broker connection before it counts as failed
BROKER_TIMEOUT = 15.0


@dataclasses.dataclass
class Finding:
    level: str
    what: str
    text: str


class Report:
    """Findings in order; rendered for a terminal."""

    def __init__(self):
        self.findings = []

    def add(self, level, what, text):
        finding = Finding(level, what, log.mask_text(str(text)))
        self.findings.append(finding)
        return finding

    def count(self, level):
        return sum(1 for f in self.findings if f.level == level)

    @property
    def exit_code(self):
        return 1 if self.count(FAIL) else 0

    def render(self):
        lines = ["%-4s  %s: %s" % (f.level, f.what, f.text)
                 for f in self.findings]
        fails, warns = self.count(FAIL), self.count(WARN)
        if fails:
            lines.append("RESULT: %d problem(s) would prevent a recovery"
                         "%s" % (fails, "; %d warning(s)" % warns
                                 if warns else ""))
        elif warns:
            lines.append("RESULT: ready to recover, with %d warning(s)"
                         % warns)
        else:
            lines.append("RESULT: ready to recover")
        return "\n".join(lines)


# -- 1. configuration ----------------------------------------------------------

def check_config(argv, report):
    from oslo_config import cfg
    from instanceha import conf as conf_pkg
    try:
        conf = conf_pkg.load(argv)
    except (cfg.Error, ValueError) as e:
        report.add(FAIL, "configuration", e)
        return None
    files = conf_pkg.config_files(conf)
    if not files:
        report.add(WARN, "configuration", "no configuration file read: "
                   "every option has its default (give --config-file)")
    else:
        report.add(OK, "configuration", "%s: every option known and valid"
                   % ", ".join(files))
    return conf


# -- 2. inventory -------------------------------------------------------------

def check_inventory(conf, report):
    from instanceha import service as service_mod
    from instanceha.drivers import fencing as fencing_pkg
    from instanceha.drivers.fencing import inventory as inventory_mod
    path = conf.fencing.inventory
    try:
        inv, warnings = inventory_mod.read(path, fencing_pkg.FIELDS)
        service_mod.check_inventory(conf, inv)
    except (inventory_mod.InventoryError, service_mod.ConfigError) as e:
        report.add(FAIL, "inventory", e)
        return None
    report.add(OK, "inventory", "%s: %d host(s)" % (path, len(inv)))
    for w in warnings:
        report.add(WARN, "inventory", "%s (chmod 600 it)" % w)
    # One BMC entered by IP address and by DNS name is one BMC.
    for address, hosts in inventory_mod.shared(inv, inventory_mod.resolve):
        report.add(WARN, "inventory", "hosts %s share the BMC %s: powering "
                   "it off for one kills the others"
                   % (", ".join(hosts), address))
    noop = sorted(h for h, bmc in inv.items()
                  if any(m.driver == "noop" for m in bmc.methods))
    if noop:
        report.add(WARN, "inventory", "driver noop for %s: these hosts are "
                   "NOT powered off before their servers are evacuated; a "
                   "host that is only unreachable may corrupt their disks. "
                   "Test clouds only ([fencing] allow_unfenced = true)"
                   % ", ".join(noop))
    return inv


# -- 3. Nova --------------------------------------------------------------------

def check_nova(conf, report, compute_factory):
    from instanceha.drivers.compute import base
    try:
        compute = compute_factory(conf)
    except base.ComputeError as e:
        report.add(FAIL, "nova", e)
        return None, None
    mv = getattr(compute, "max_microversion", None)
    try:
        services = compute.list_services()
    except base.ComputeError as e:
        report.add(FAIL, "nova", "cannot list compute services: %s" % e)
        return compute, None
    up = sum(1 for s in services if s.state == "up" and not s.forced_down)
    report.add(OK, "nova", "cloud %r: max microversion %s, evacuate at %s; "
               "%d compute service(s), %d up"
               % (conf.cloud, ".".join(str(p) for p in mv) if mv else "?",
                  conf.evacuation.microversion, len(services), up))
    if not services:
        report.add(WARN, "nova", "Nova lists no compute service: nothing "
                   "to protect yet")
    return compute, services


def check_coverage(conf, inventory, services, report):
    """Every compute host can be fenced: an inventory entry or
    [fencing] default_driver."""
    if inventory is None or services is None:
        return
    hosts = {s.host for s in services}
    missing = sorted(hosts - set(inventory))
    if missing and not conf.fencing.default_driver:
        report.add(FAIL, "inventory", "no entry for compute host(s) %s and "
                   "[fencing] default_driver is unset: they cannot be "
                   "fenced, so never evacuated" % ", ".join(missing))
    elif missing:
        report.add(WARN, "inventory", "compute host(s) %s fenced with "
                   "[fencing] default_driver %s"
                   % (", ".join(missing), conf.fencing.default_driver))
    stale = sorted(set(inventory) - hosts)
    if stale:
        report.add(WARN, "inventory", "entries for host(s) Nova does not "
                   "list as compute services: %s (renamed or removed?)"
                   % ", ".join(stale))


# -- 4. notifications -----------------------------------------------------------

def _connect_broker(conf):
    """Build the notification transport and open one connection."""
    import oslo_messaging
    transport = oslo_messaging.get_notification_transport(
        conf, url=conf.notifications.transport_url)
    try:
        driver = transport._driver
        get = getattr(driver, "_get_connection", None)
        if get is None:
            return "transport %s built (driver without a connection to "\
                "test)" % type(driver).__name__
        from oslo_messaging._drivers import common
        with get(common.PURPOSE_LISTEN, retry=1) as conn:
            ensure = getattr(conn, "ensure_connection", None)
            if ensure is not None:
                ensure()
        return "connected"
    finally:
        transport.cleanup()


def check_notifications(conf, report, connect=_connect_broker,
                        timeout=BROKER_TIMEOUT):
    group = conf.notifications
    if not group.enabled:
        report.add(SKIP, "notifications", "[notifications] enabled = false: "
                   "the reconciler's poll alone detects failures")
        return
    url = group.transport_url
    if url is None:
        from oslo_config import cfg
        try:
            url = conf.transport_url    # registered by oslo.messaging
        except cfg.NoSuchOptError:
            url = None
    where = log.mask_url(url) or "(no transport_url)"
    result = _bounded(lambda: connect(conf), timeout)
    if "ok" in result:
        report.add(OK, "notifications", "%s: %s" % (where, result["ok"]))
    else:
        report.add(FAIL, "notifications", "%s: %s" % (where,
                                                      result["error"]))


# -- 4b. coordination ----------------------------------------------------------

def _probe_coordination(conf):
    """Reach the tooz backend without joining the group: the members the
    group has now."""
    import uuid
    from tooz import coordination as tooz_coord
    from instanceha import coordination
    c = conf.coordination
    coordination._probe(c.backend_url, max(1, c.lease // 3))
    coord = tooz_coord.get_coordinator(
        c.backend_url, ("instanceha-check-%s" % uuid.uuid4().hex[:8])
        .encode(), timeout=str(max(1, int(c.lease // 3))))
    coord.start(start_heart=False)
    try:
        try:
            members = coord.get_members(c.group.encode()).get()
        except tooz_coord.GroupNotCreated:
            return "reachable; group %s not created yet (no member " \
                "started)" % c.group
        return "reachable; group %s has %d member(s)" % (c.group,
                                                           len(members))
    finally:
        coord.stop()


def check_coordination(conf, report, probe=_probe_coordination,
                       timeout=BROKER_TIMEOUT):
    url = conf.coordination.backend_url
    if not url:
        report.add(SKIP, "coordination", "[coordination] backend_url unset: "
                   "one process acts alone")
        return
    result = _bounded(lambda: probe(conf), timeout)
    if "ok" in result:
        report.add(OK, "coordination", "%s: %s" % (log.mask_url(url),
                                                   result["ok"]))
    else:
        report.add(FAIL, "coordination", "%s: %s" % (log.mask_url(url),
                                                     result["error"]))


def _bounded(fn, timeout):
    """{"ok": fn()} or {"error": text}, within ``timeout`` seconds (the
    attempt is left behind in a daemon thread after that)."""
    result = {}

    def attempt():
        try:
            result["ok"] = fn()
        except Exception as e:   # noqa: BLE001 - reported, not raised
            result["error"] = "%s: %s" % (type(e).__name__, e)
    thread = threading.Thread(target=attempt, daemon=True,
                              name="instanceha-check-probe")
    thread.start()
    thread.join(timeout)
    if not result:
        result["error"] = "no answer within %.0fs" % timeout
    return result


# -- 5. journal -----------------------------------------------------------------

def check_journal(conf, report):
    url = conf.journal.connection
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:"):
        return _check_sqlite(url[len("sqlite:///"):], report)
    try:
        import sqlalchemy as sa
        from instanceha.journal import store
        engine = sa.create_engine(url)
        try:
            with engine.connect() as c:
                c.execute(sa.text("SELECT 1"))
            tables = set(sa.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as e:   # noqa: BLE001 - a driver, a URL, a refusal
        report.add(FAIL, "journal", "%s: %s: %s"
                   % (log.mask_url(url), type(e).__name__, e))
        return
    missing = set(store.METADATA.tables) - tables
    report.add(OK, "journal", "%s: connected%s" % (
        log.mask_url(url), "; its tables are created at first start"
        if missing else ""))


def _check_sqlite(path, report):
    if not os.path.exists(path):
        parent = os.path.dirname(path) or "."
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if os.access(parent, os.W_OK):
            report.add(OK, "journal", "%s does not exist yet; created at "
                       "first start (%s is writable)" % (path, parent))
        else:
            report.add(WARN, "journal", "%s does not exist yet and %s is not "
                       "writable by this user: the service's user must be "
                       "able to create it" % (path, parent))
        return
    try:
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        try:
            rows = db.execute("SELECT count(DISTINCT host_id) FROM "
                              "transitions").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error as e:
        report.add(FAIL, "journal", "%s: %s" % (path, e))
        return
    report.add(OK, "journal", "%s: %d host(s) recorded" % (path, rows))
    if not os.access(path, os.W_OK):
        report.add(WARN, "journal", "%s is not writable by this user" % path)


# -- 6. fencing readiness -------------------------------------------------------

def check_fencing(conf, inventory, services, report, fencer_factory):
    """One power-state read per fencing method of every host (no action),
    judged as the service's readiness audit judges it."""
    from instanceha.drivers import fencing as fencing_pkg
    from instanceha.drivers.compute import base as compute_base
    from instanceha.drivers.fencing import base as fencing_base
    from instanceha.drivers.fencing import inventory as inventory_mod
    from instanceha.sources import audit
    if inventory is None:
        return
    by_host = {s.host: s for s in services or ()}
    hosts = sorted(set(inventory) | set(by_host))
    fencers = fencing_pkg.Fencers(lambda name: fencer_factory(name, conf))

    def one(host):
        bmc = inventory_mod.entry_for(inventory, host,
                                      conf.fencing.default_driver)
        found = [audit.read_identity(fencers.get, m) for m in
                 (bmc.methods if bmc is not None else ())
                 if m.driver != "noop"]
        return host, bmc, audit.readings(bmc, fencers.get), found

    with concurrent.futures.ThreadPoolExecutor(
            conf.audit.concurrency,
            thread_name_prefix="instanceha-check") as pool:
        results = list(pool.map(one, hosts))
    for problem in machines_shared(results, set(by_host)):
        report.add(FAIL, "inventory", problem)
    results = [r[:3] for r in results]
    for host, bmc, readings in results:
        what = "fencing %s" % host
        if bmc is None:
            continue        # reported by check_coverage
        if all(m.driver == "noop" for m in bmc.methods):
            report.add(WARN, what, "noop: NOT powered off before "
                       "evacuation (test clouds only)")
            continue
        service = by_host.get(host) or compute_base.ComputeService(
            id="", host=host, state="down", status="enabled",
            forced_down=False, disabled_reason=None, updated_at=None)
        reason, degraded = audit.judge(service, bmc, readings)
        shown = ", ".join("%s: power %s" % (name, r.value)
                          for name, r in readings
                          if isinstance(r, fencing_base.PowerState))
        if reason is not None:
            report.add(FAIL, what, reason)
        elif degraded:
            report.add(WARN, what, "%s; but %s" % (shown, "; ".join(degraded)))
        else:
            report.add(OK, what, shown)
    fencers.close()


def machines_shared(results, computes):
    """What the BMCs say about their machines, against each other and
    Nova: [problem] for entries of different hosts whose BMCs report one
    system UUID (one machine by its Redfish and its IPMI address, say),
    and for an entry whose BMC reports another compute host's name (that
    host's machine, whether or not it has an entry of its own): fencing
    one would power the other off. ``results``: [(host, entry, readings,
    [system identity per method])]."""
    from instanceha.policy import proof
    owners = {}
    problems = []
    shorts = {proof.short_name(h): h for h in computes}
    for host, bmc, _, found in results:
        if bmc is None:
            continue
        for ident in found:
            for u in (ident or {}).get("uuids") or ():
                owners.setdefault(u, set()).add(host)
            name = proof.short_name((ident or {}).get("hostname"))
            other = shorts.get(name)
            if name and other and other != host:
                problems.append(
                    "the BMC of %s's entry reports the machine %s, i.e. "
                    "compute host %s: fencing %s would power %s off"
                    % (host, name, other, host, other))
    for u, hosts in sorted(owners.items()):
        if len(hosts) > 1:
            problems.append("hosts %s reach one machine (system UUID %s "
                            "reported by their BMCs): fencing one powers the "
                            "others off" % (", ".join(sorted(hosts)), u))
    return sorted(set(problems))


# -- the command -----------------------------------------------------------------

def _nova(conf):
    from instanceha.drivers.compute.nova import NovaDriver
    return NovaDriver(conf)


def _fencer(name, conf):
    from instanceha.drivers import fencing as fencing_pkg
    return fencing_pkg.load_driver(name, conf)


def run(argv, compute_factory=_nova, fencer_factory=_fencer,
        connect_broker=_connect_broker, probe_coordination=_probe_coordination):
    """Every check in order; returns the :class:`Report`."""
    report = Report()
    conf = check_config(argv, report)
    if conf is None:
        return report
    inventory = check_inventory(conf, report)
    _, services = check_nova(conf, report, compute_factory)
    check_coverage(conf, inventory, services, report)
    check_notifications(conf, report, connect_broker)
    check_coordination(conf, report, probe_coordination)
    check_journal(conf, report)
    check_fencing(conf, inventory, services, report, fencer_factory)
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
