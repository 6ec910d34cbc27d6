"""Failover capacity, measured on the engine's work queue: every
``[failover_capacity] interval`` seconds one pass (Action.
FAILOVER_CAPACITY, work no host state starts) reads the cloud and
computes, with :mod:`instanceha.policy.failover_capacity`, how many of the
largest hosts of each zone, aggregate, reserved pool and of the cloud can
fail at once with every server the recovery policy would evacuate still
placed. Status, ``instanceha capacity`` and /metrics show the last
measure; nothing is changed anywhere.

Reads, once per measure: Nova's compute services and Placement's counts
(shared with the evacuations: ``Context.shared_*``), every host aggregate,
every server (``list_all_servers``: Nova's pages of 1,000, each decided
as it comes and dropped: only the counts per host, size and priority are
kept) and, when the policies consult them, the servers' images (each
read once). Which servers count: those
Nova would evacuate (:func:`~instanceha.policy.power.plan`) and the
recovery policies select (:func:`~instanceha.engine.selection.decide`,
the evacuator's own), on hosts whose compute service is enabled (or any,
with ``[policy] recover_disabled_hosts``); their priority is the
selection's. A failed read keeps the last measure, marked with the error.
"""

import collections
import dataclasses
import time
from typing import (Any, Callable, Counter, Dict, List, Mapping, NamedTuple,
                    Optional, Set, Tuple)

import structlog

from instanceha import runtime
from instanceha.drivers.compute import base
from instanceha.engine import selection
from instanceha.engine.context import Context
from instanceha.engine.inbox import Pending
from instanceha.engine.passes import Requeue
from instanceha.fsm.states import Action
from instanceha.policy import capacity, power, reserved
from instanceha.policy import failover_capacity as fc
from instanceha.policy.capacity_need import Need

LOG = structlog.get_logger("instanceha.failover_capacity")


class FailoverKey(NamedTuple):
    """The measure's key on the engine's work queue (hosts' keys are
    their service UUIDs: strings)."""
    what: str = "failover_capacity"


KEY = FailoverKey()


class Measuring:
    """The carry of the measure's passes, and their subject."""

    __slots__ = ("owner",)

    def __init__(self, owner: "FailoverCapacity") -> None:
        self.owner = owner

    @property
    def name(self) -> str:
        """What the engine's log lines name it by."""
        return "failover capacity"

    def close(self) -> None:
        """Nothing to close: the next pass reads the cloud afresh."""
        self.owner.running = False


def run_pass(ctx: Context, subject: object, carry: Measuring
             ) -> Optional[Requeue]:
    """One pass (Action.FAILOVER_CAPACITY's runner): a measure when one is
    due, then a Requeue for the next; None once the measure is turned
    off (the view is dropped)."""
    owner = carry.owner
    if not owner.enabled:
        owner.running = False
        owner.drop()
        return None
    wait = owner.due_in()
    if wait <= 0:
        why = ctx.may_act()
        if why is None:
            owner.refresh()
        else:
            # A standby measures nothing and shows nothing: the figures
            # of the member that acts are the cloud's (the alert takes
            # the maximum over replicas: stale ones must not hide them).
            owner.standby(why)
        wait = owner.due_in()
    # Woken by no server's news (an empty set): only its timer runs it.
    return Requeue(max(wait, 1.0), carry, waits_for=frozenset())


class FailoverCapacity:
    """The measure and its last answer."""

    def __init__(self, conf: Any, ctx: Context,
                 start_work: Callable[[FailoverKey, Pending], object],
                 process_time: Callable[[], float] = time.process_time
                 ) -> None:
        self.conf = conf
        self.ctx = ctx
        self._start_work = start_work
        self._cpu = process_time
        #: a pass is queued or running
        self.running = False
        self._view: Optional[Dict[str, object]] = None
        self._last: Optional[float] = None

    @property
    def enabled(self) -> bool:
        return bool(self.conf.failover_capacity.enabled)

    def start(self) -> None:
        """Queue the first pass (at start, and when turned on by a
        reload)."""
        if self.enabled and not self.running:
            self.running = True
            self._start_work(KEY, Pending(Action.FAILOVER_CAPACITY, None,
                                          Measuring(self)))

    def reload_settings(self) -> None:
        self.start()

    def drop(self) -> None:
        self._view = None

    def standby(self, why: str) -> None:
        """Not the member that acts: no measure, none shown; asked again
        after the interval."""
        if self._view is not None:
            LOG.info("failover_capacity_not_measured", reason=why,
                     effect="this member shows no failover capacity")
        self._view = None
        self._last = self.ctx.clock()

    def due_in(self) -> float:
        """Seconds until the next measure is due (0 or less: now)."""
        if self._last is None:
            return 0.0
        return self._last + float(self.conf.failover_capacity.interval) \
            - self.ctx.clock()

    def snapshot(self) -> Optional[Dict[str, object]]:
        """The last measure as status shows it (None: none yet)."""
        return None if self._view is None else dict(self._view)

    # -- the measure -------------------------------------------------------
    def refresh(self) -> None:
        """Read the cloud and measure; a failed read keeps the last
        measure with the error beside it."""
        ctx = self.ctx
        at = ctx.clock()
        self._last = at
        cpu = self._cpu()
        try:
            with runtime.collection_paused():
                report, settings = self._measure(at)
        except (base.ComputeError, NotImplementedError) as e:
            why = str(e) or type(e).__name__
            LOG.warning("failover_capacity_unknown", reason=why,
                        effect="the last measure is kept, marked stale; "
                               "tried again in %.0f s"
                               % self.conf.failover_capacity.interval)
            view = dict(self._view or {"scopes": []})
            view.update(error=why, error_at=at)
            self._view = view
            return
        seconds = self._cpu() - cpu
        self._view = {
            "at": at, "cpu_seconds": round(seconds, 3), "error": None,
            "min_priority": settings.min_priority,
            "max_hosts": settings.limit, **report.as_dict()}
        low = [s for s in report.scopes if s.hosts < 1 and s.members]
        lowest = report.lowest()
        LOG.info("failover_capacity", scopes=len(report.scopes),
                 counted=report.counted, unknown=report.unknown,
                 lowest=None if lowest is None else lowest.hosts,
                 cpu_seconds=round(seconds, 3),
                 reason=lowest.text if lowest is not None else
                 "no compute host")
        if low:
            LOG.warning("failover_capacity_low",
                        scopes=",".join(s.scope for s in low),
                        reason="; ".join(s.text for s in low[:5]),
                        effect="losing such a scope's largest host leaves "
                               "servers waiting for capacity")

    def _measure(self, now: float) -> Tuple[fc.Report, fc.Settings]:
        ctx, conf = self.ctx, self.conf
        cs = capacity.Settings.from_conf(conf)
        rs = reserved.Settings.from_conf(conf)
        services = ctx.shared_services()
        capacities = ctx.shared_capacities()
        if capacities is None:
            raise base.ComputeError("no host capacities")
        if capacity.VCPUS in cs.resources and any(
                c.source == "hypervisors" for c in capacities.values()):
            # os-hypervisors knows no CPU allocation ratio (as the
            # preflight: engine.placement)
            cs = dataclasses.replace(cs, resources=tuple(
                r for r in cs.resources if r != capacity.VCPUS))
        policies = selection.Policies.from_conf(conf)
        aggregates = selection.aggregates(
            ctx.compute, None, "failover capacity counts no aggregate "
            "scope and no aggregate-scope recovery policy this time")
        tally = self._count(services, policies, aggregates, now)
        fs = conf.failover_capacity
        settings = fc.Settings.of(cs, rs, fs.min_priority, fs.max_hosts)
        hosts = fc.loads(services, capacities, aggregates, tally, cs, rs)
        return fc.measure(hosts, settings), settings

    def _count(self, services: List[base.ComputeService],
               policies: selection.Policies,
               aggregates: Tuple[selection.AggregateFacts, ...],
               now: float) -> Mapping[Tuple[str, Optional[Need], int], int]:
        """{(host, size, priority): how many} of the servers the policies
        would evacuate. Nova's list of every server is decided page by
        page (each server's decision is its own: the policies' per-host
        grouping only orders them): only the counts are kept, never the
        whole cloud's servers."""
        conf = self.conf
        every = bool(conf.policy.recover_disabled_hosts)
        counted: Dict[str, bool] = {}
        for s in services:
            if getattr(s, "binary", "nova-compute") != "nova-compute":
                continue
            ok = every or s.status == "enabled"
            counted[s.host] = counted.get(s.host, True) and ok
        mv = power.parse_microversion(conf.evacuation.microversion)
        compute = self.ctx.compute
        images: Dict[str, selection.ImageFacts] = {}
        asked: Set[str] = set()

        def page(servers: List[base.Server]
                 ) -> List[Tuple[str, Optional[Need], int]]:
            by_host: Dict[str, List[base.Server]] = {}
            for server in servers:
                host = server.host
                if host and counted.get(host) and power.plan(
                        server.vm_state, server.power_state, mv,
                        server.status).evacuate:
                    by_host.setdefault(host, []).append(server)
            # The images of this page not read yet (only when the
            # policies consult images).
            new = [sv for group in by_host.values() for sv in group
                   if selection.image_id(sv) not in asked]
            if new:
                asked.update(i for i in map(selection.image_id, new) if i)
                images.update(selection.images_of(compute, new, policies))
            out = []
            for host, group in by_host.items():
                d = selection.decide(policies, group, aggregates, images,
                                     now)
                raw = {sv.id: sv.raw or {} for sv in group}
                for sid in d.selection.ordered:
                    need, _ = capacity.need_of(raw[sid])
                    out.append((host, need, -d.selection.keys[sid][0]))
            return out

        tally: Counter[Tuple[str, Optional[Need], int]] = \
            collections.Counter(compute.list_all_servers(per_page=page))
        return tally
