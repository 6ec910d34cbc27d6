"""Recovery timings and fencing audit ages for /metrics.

Histograms (from what this process saw since it started):

- ``instanceha_detection_to_fenced_seconds``: a host entered suspect,
  then fenced (BMC confirmed Off, or kdump proof).
- ``instanceha_fenced_to_isolated_seconds``: fenced, then isolated in
  Nova (compute service forced down and disabled: evacuating).
- ``instanceha_drain_migration_seconds``: one server's migration off a
  draining host requested, then the server gone from the host.
- ``instanceha_evacuation_seconds``: one server's evacuation requested,
  then done (rebuilt and seen on its new host), read from the journal's
  evacuation rows at each scrape.

Gauge ``instanceha_journal_reachable``: 1 when this scrape's read of the
journal (the evacuations finished since the last scrape) succeeded, 0 when
it raised (its database unreachable, or not reached yet at start); not
exported without a journal. It says whether the journal answers reads;
failing writes are the engine's ``degraded`` in status.

Gauge ``instanceha_fencing_audit_age_seconds{host}``: seconds since the
fencing readiness audit last found the host fenceable (+Inf before it ever
did). It is derived at scrape time from the audit's last verdict, so an
audit that both found a host fenceable and was followed by another audit
between two scrapes is not seen: keep the scrape interval below [audit]
interval.
"""

import threading

from prometheus_client import Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
import structlog

from instanceha.fsm.states import State

LOG = structlog.get_logger("instanceha.api")

_DETECT_BUCKETS = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800)
_ISOLATE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
_EVACUATE_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200,
                     1800, 3600)
_DRAIN_BUCKETS = (5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
_DETECTING = (State.SUSPECT, State.FENCING)


class Timings:
    """Engine listener (old record, new record, event) observing the
    detection and isolation durations, plus the evacuation rows read at
    scrape time."""

    def __init__(self, registry, journal, started_at):
        self._lock = threading.Lock()
        self._suspect_at = {}      # host id -> entered suspect
        self._fenced_at = {}       # host id -> entered fenced
        self._journal = journal
        self._evac_since = started_at
        self._evac_seen = set()    # ids finished at _evac_since
        self.detect = Histogram(
            "instanceha_detection_to_fenced_seconds",
            "Seconds from a host's detection (suspect) to its fencing "
            "(fenced)", buckets=_DETECT_BUCKETS, registry=registry)
        self.isolate = Histogram(
            "instanceha_fenced_to_isolated_seconds",
            "Seconds from a host's fencing to its isolation in Nova "
            "(forced down and disabled)", buckets=_ISOLATE_BUCKETS,
            registry=registry)
        self.evacuate = Histogram(
            "instanceha_evacuation_seconds",
            "Seconds from a server's evacuation request to its rebuild "
            "seen done", buckets=_EVACUATE_BUCKETS, registry=registry)
        self.drain = Histogram(
            "instanceha_drain_migration_seconds",
            "Seconds from a drain's migration request to the server "
            "leaving the drained host", buckets=_DRAIN_BUCKETS,
            registry=registry)
        self.journal_reachable = None
        if journal is not None:
            self.journal_reachable = Gauge(
                "instanceha_journal_reachable",
                "1 when the journal answered this scrape's read, 0 when "
                "the read failed", registry=registry)

    def on_change(self, old, new, event):
        at = event.at
        with self._lock:
            if new.state is State.SUSPECT and old.state is not State.SUSPECT:
                self._suspect_at.setdefault(new.id, at)
            if new.state is State.FENCED and old.state is not State.FENCED:
                start = self._suspect_at.pop(new.id, None)
                if start is not None and at >= start:
                    self.detect.observe(at - start)
                self._fenced_at[new.id] = at
            elif new.state not in _DETECTING:
                self._suspect_at.pop(new.id, None)
            if new.state is State.EVACUATING and old.state is State.FENCED:
                start = self._fenced_at.pop(new.id, None)
                if start is not None and at >= start:
                    self.isolate.observe(at - start)
            elif new.state is not State.FENCED:
                self._fenced_at.pop(new.id, None)

    def read_drains(self, ctx):
        """Observe the drain migrations finished since the last read
        (engine.context.Context.drain_durations)."""
        durations = getattr(ctx, "drain_durations", None)
        while durations:
            try:
                seconds = durations.popleft()
            except IndexError:
                break
            self.drain.observe(seconds)

    def read_evacuations(self):
        """Observe the evacuations done since the last read."""
        if self._journal is None:
            return
        try:
            rows = self._journal.evacuations_finished(self._evac_since)
        except Exception as e:  # noqa: BLE001 - the scrape goes on
            LOG.warning("metrics_journal_unreadable",
                        reason="%s: %s" % (type(e).__name__, e))
            self.journal_reachable.set(0)
            return
        self.journal_reachable.set(1)
        with self._lock:
            for row in rows:
                if row["id"] in self._evac_seen:
                    continue
                if row["finished_at"] > self._evac_since:
                    self._evac_since = row["finished_at"]
                    self._evac_seen = set()
                self._evac_seen.add(row["id"])
                if row["status"] == "done" \
                        and row["finished_at"] >= row["requested_at"]:
                    self.evacuate.observe(row["finished_at"]
                                          - row["requested_at"])


class AuditAges:
    """When each host was last found fenceable by the audit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._audit_at = None
        self._ok_at = {}

    def collect(self, engine, snap, now):
        audit = (getattr(engine, "health", None) or {}).get("audit")
        if audit is None:
            return
        last_at = audit().get("last_at")
        unprotected = snap.get("unprotected") or {}
        hosts = [h["name"] or h["id"] for h in snap["hosts"]]
        with self._lock:
            if last_at is not None and last_at != self._audit_at:
                self._audit_at = last_at
                for host in hosts:
                    if host not in unprotected:
                        self._ok_at[host] = last_at
            gauge = GaugeMetricFamily(
                "instanceha_fencing_audit_age_seconds",
                "Seconds since the fencing readiness audit last found the "
                "host fenceable (+Inf: never)", labels=["host"])
            for host in sorted(hosts):
                ok_at = self._ok_at.get(host)
                gauge.add_metric([host], float("inf") if ok_at is None
                                 else max(0.0, now - ok_at))
        yield gauge
