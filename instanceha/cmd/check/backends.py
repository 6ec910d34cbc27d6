"""Checks 4 to 6: the services instanceha connects to besides Nova and
the BMCs: the notification broker (when ``[notifications] enabled``), the
coordination backend (when ``[coordination] backend_url`` is set; reached
without joining the group) and the journal (a SQLite file not yet created
is not created). A broker or backend that does not answer is given up
after a timeout."""

import os
import sqlite3
import threading
import uuid

from oslo_config import cfg
import oslo_messaging
from oslo_messaging._drivers import common as messaging_common
import sqlalchemy as sa
from tooz import coordination as tooz_coord

from instanceha import log
from instanceha.cmd.check.report import FAIL, OK, SKIP, WARN
from instanceha.coordination import backend as coord_backend
from instanceha.journal import store

#: seconds allowed for the broker connection before it counts as failed
BROKER_TIMEOUT = 15.0


# -- 4. notifications ---------------------------------------------------------

def connect_broker(conf):
    """Build the notification transport and open one connection."""
    transport = oslo_messaging.get_notification_transport(
        conf, url=conf.notifications.transport_url)
    try:
        driver = transport._driver
        get = getattr(driver, "_get_connection", None)
        if get is None:
            return "transport %s built (driver without a connection to "\
                "test)" % type(driver).__name__
        with get(messaging_common.PURPOSE_LISTEN, retry=1) as conn:
            ensure = getattr(conn, "ensure_connection", None)
            if ensure is not None:
                ensure()
        return "connected"
    finally:
        transport.cleanup()


def check_notifications(conf, report, connect=connect_broker,
                        timeout=BROKER_TIMEOUT):
    group = conf.notifications
    if not group.enabled:
        report.add(SKIP, "notifications", "[notifications] enabled = false: "
                   "the reconciler's poll alone detects failures")
        return
    url = group.transport_url
    if url is None:
        try:
            url = conf.transport_url    # registered by oslo.messaging
        except cfg.NoSuchOptError:
            url = None
    where = log.mask_url(url) or "(no transport_url)"
    result = bounded(lambda: connect(conf), timeout)
    if "ok" in result:
        report.add(OK, "notifications", "%s: %s" % (where, result["ok"]))
    else:
        report.add(FAIL, "notifications", "%s: %s" % (where,
                                                      result["error"]))


# -- 5. coordination ----------------------------------------------------------

def probe_coordination(conf):
    """Reach the tooz backend without joining the group: the members the
    group has now."""
    c = conf.coordination
    coord_backend.probe(c.backend_url, max(1, c.lease // 3))
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


def check_coordination(conf, report, probe=probe_coordination,
                       timeout=BROKER_TIMEOUT):
    url = conf.coordination.backend_url
    if not url:
        report.add(SKIP, "coordination", "[coordination] backend_url unset: "
                   "one process acts alone")
        return
    result = bounded(lambda: probe(conf), timeout)
    if "ok" in result:
        report.add(OK, "coordination", "%s: %s" % (log.mask_url(url),
                                                   result["ok"]))
    else:
        report.add(FAIL, "coordination", "%s: %s" % (log.mask_url(url),
                                                     result["error"]))


def bounded(fn, timeout):
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


# -- 6. journal ---------------------------------------------------------------

def check_journal(conf, report):
    url = conf.journal.connection
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:"):
        return _check_sqlite(url[len("sqlite:///"):], report)
    try:
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
