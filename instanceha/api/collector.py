"""The /metrics families read from the engine at each scrape: the state of
every host and the count per state, the threshold and storm holds, the
hosts waiting for the fencing rate limit, transitions and actions run, the
hosts the fencing readiness audit found unprotected, the audit ages
(:class:`instanceha.api.metrics.AuditAges`) and each source's numeric
health fields.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from instanceha.fsm.states import State


class SnapshotCollector:
    """A prometheus_client collector over ``api.engine``'s snapshot and
    stats (``api``: the :class:`instanceha.api.server.OperatorAPI`, for its
    engine, audit ages and clock)."""

    def __init__(self, api):
        self._api = api

    def collect(self):
        snap = self._api.engine.snapshot()
        state = GaugeMetricFamily("instanceha_host_state",
                                  "1 for the state each host is in",
                                  labels=["host", "state"])
        counts = GaugeMetricFamily("instanceha_hosts",
                                   "Hosts per state", labels=["state"])
        per_state = {s.value: 0 for s in State}
        for h in snap["hosts"]:
            state.add_metric([h["name"] or h["id"], h["state"]], 1)
            per_state[h["state"]] += 1
        for s, n in per_state.items():
            counts.add_metric([s], n)
        hold = GaugeMetricFamily(
            "instanceha_threshold_hold",
            "1 while more hosts look dead than the threshold allows")
        hold.add_metric([], 0 if snap["cluster"]["ok"] else 1)
        storm_hold = GaugeMetricFamily(
            "instanceha_storm_hold",
            "1 while a storm (hosts lost within the storm window above the "
            "threshold) holds new fencing in a scope", labels=["scope"])
        lost = GaugeMetricFamily(
            "instanceha_storm_lost_hosts",
            "Hosts lost or recovering within the storm window",
            labels=["scope"])
        for scope, view in sorted((snap.get("storm") or {}).items()):
            held = view["over"] and (view["acknowledged"] is None
                                     or view["lost"] > view["acknowledged"])
            storm_hold.add_metric([scope], 1 if held else 0)
            lost.add_metric([scope], view["lost"])
        waiting = GaugeMetricFamily(
            "instanceha_fence_rate_waiting",
            "Hosts waiting for the fencing rate limit")
        waiting.add_metric([], len((snap.get("rate_limit") or {})
                                   .get("waiting", [])))
        trans = CounterMetricFamily("instanceha_transitions",
                                    "State transitions, by new state",
                                    labels=["state"])
        acts = CounterMetricFamily("instanceha_actions",
                                   "Actions run, by outcome",
                                   labels=["action", "outcome"])
        drains = CounterMetricFamily(
            "instanceha_drain_servers",
            "Drains: servers whose migration was asked (sent_live, "
            "sent_cold), moved off, stuck, aborted, forced to complete, "
            "given up", labels=["event"])
        ctx = getattr(self._api.engine, "ctx", None)
        for event, n in sorted(getattr(ctx, "drain_stats", {}).items()):
            drains.add_metric([event], n)
        for key, n in sorted(self._api.engine.stats.items()):
            if key[0] == "transition":
                trans.add_metric([key[1]], n)
            elif key[0] == "action":
                acts.add_metric([key[1], key[2]], n)
        unprotected = snap.get("unprotected") or {}
        per_host = GaugeMetricFamily(
            "instanceha_host_unprotected",
            "1 for a host the last fencing readiness audit found could not "
            "be fenced now", labels=["host"])
        for host in sorted(unprotected):
            per_host.add_metric([host], 1)
        count = GaugeMetricFamily(
            "instanceha_unprotected_hosts",
            "Hosts the last fencing readiness audit found could not be "
            "fenced now")
        count.add_metric([], len(unprotected))
        identity = GaugeMetricFamily(
            "instanceha_fencing_identity_methods",
            "Fencing methods by whether their BMC's machine is proven to be "
            "the host (its system UUID the one the host's agent reports): "
            "verified, not_verified (no agent UUID or no BMC UUID), "
            "mismatch (another machine: never powered off)",
            labels=["identity"])
        for verdict, n in sorted((snap.get("fencing_identity")
                                  or {}).items()):
            identity.add_metric([verdict], n)
        mismatch = GaugeMetricFamily(
            "instanceha_host_fencing_identity_mismatch",
            "1 for a host whose inventory entry reaches a BMC reporting "
            "another machine's system UUID (never fenced through it)",
            labels=["host"])
        for h in snap["hosts"]:
            if "mismatch" in (h.get("identity") or ""):
                mismatch.add_metric([h["name"] or h["id"]], 1)
        yield from (state, counts, hold, storm_hold, lost, waiting, trans,
                    acts, per_host, count, identity, mismatch, drains)
        yield from _instance_repair(snap.get("instance_repair"))
        yield from _failover_capacity(snap.get("failover_capacity"))
        yield from self._api.audit_ages.collect(self._api.engine, snap,
                                                self._api.clock())
        for name, health in sorted(snap["sources"].items()):
            for field, value in sorted(health.items()):
                if isinstance(value, bool) or not isinstance(value,
                                                             (int, float)):
                    continue
                g = GaugeMetricFamily(
                    "instanceha_source_%s_%s" % (name, field),
                    "%s of source %s" % (field, name))
                g.add_metric([], value)
                yield g


def _instance_repair(view):
    """Instance repair's hold, open cases by state and counts (issue 25),
    while it is on."""
    if not view:
        return
    hold = view.get("hold") or {}
    g = GaugeMetricFamily(
        "instanceha_instance_repair_hold",
        "1 while the cloud-wide hold stops instance repairs (many servers "
        "broke within [instance_repair] hold_window)")
    g.add_metric([], 1 if hold.get("held") else 0)
    yield g
    g = GaugeMetricFamily(
        "instanceha_instance_repair_failing",
        "Servers broken within [instance_repair] hold_window")
    g.add_metric([], hold.get("failing", 0))
    yield g
    g = GaugeMetricFamily("instanceha_instance_repair_cases",
                          "Servers being repaired, by where they stand",
                          labels=["state"])
    for state, n in sorted((view.get("by_state") or {}).items()):
        g.add_metric([state], n)
    yield g
    g = GaugeMetricFamily("instanceha_instance_repair_events",
                          "Instance repair events since start (actions "
                          "sent, outcomes, failed, excluded...)",
                          labels=["event"])
    for event, n in sorted((view.get("counts") or {}).items()):
        g.add_metric([event], n)
    yield g


def _failover_capacity(view):
    """How many of each scope's largest hosts can fail at once with every
    server the recovery policy would evacuate still placed (issue 38),
    once measured."""
    if not view:
        return
    g = GaugeMetricFamily(
        "instanceha_failover_capacity_hosts",
        "How many of the largest hosts of a scope (zone:NAME, "
        "aggregate:NAME, reserved:WHERE, cloud) can fail at once with "
        "every server the recovery policy would evacuate still placed on "
        "the scope's other hosts, by Placement's counts (a lower bound; "
        "at most [failover_capacity] max_hosts)", labels=["scope"])
    for s in view.get("scopes") or []:
        g.add_metric([s["scope"]], s["hosts"])
    yield g
    if view.get("at") is not None:
        g = GaugeMetricFamily(
            "instanceha_failover_capacity_measured_at",
            "When the failover capacity was last measured (seconds since "
            "the epoch)")
        g.add_metric([], view["at"])
        yield g
    g = GaugeMetricFamily(
        "instanceha_failover_capacity_error",
        "1 while the last failover capacity measure failed to read the "
        "cloud (the figures are the measure before)")
    g.add_metric([], 1 if view.get("error") else 0)
    yield g
