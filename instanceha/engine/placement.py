"""Where a host's servers may go, before any is sent: reserved hosts brought
in (engine.reserve), then the capacity preflight (policy.capacity) on
Placement's counts."""

import dataclasses
from typing import (Dict, List, Mapping, Optional, Sequence, Tuple)

import structlog

from instanceha.drivers.compute import base
from instanceha.engine import reserve
from instanceha.engine.context import Context
from instanceha.engine.evac_state import Outcome
from instanceha.fsm.record import HostRecord
from instanceha.policy import capacity, reserved
from instanceha.policy.capacity_need import Need
from instanceha.policy.facts import CapacityRecord

LOG = structlog.get_logger("instanceha.evacuator")


def place(ctx: Context, record: HostRecord, servers: Mapping[str, base.Server],
          ordered: Sequence[str], outcome: Outcome
          ) -> Tuple[List[str], Dict[str, str], Dict[str, str]]:
    """Where the servers may go, before any is sent: reserved hosts
    brought in (engine.reserve), then the capacity preflight
    (policy.capacity) on Placement's counts. Returns (server ids to send,
    in order; {id: why it waits}; {id: target host} when evacuations are
    aimed at reserved hosts). Counts that cannot be read hold nothing
    back: the scheduler alone decides (said in the log)."""
    host = record.name
    cs = capacity.Settings.from_conf(ctx.conf)
    rs = reserved.Settings.from_conf(ctx.conf)
    if not ordered or not (cs.enabled or rs.enabled):
        return list(ordered), {}, {}
    services = ctx.shared_services()
    capacities, cs = _capacities(ctx, host, cs)
    aggregates = ()
    if cs.scope == capacity.AGGREGATE or (
            rs.enabled and reserved.AGGREGATE in rs.match):
        aggregates = base.aggregates_or_none(
            ctx.compute, LOG, "the aggregate scope falls back to the lost "
            "host's zone", host=host) or ()
    needs = []
    for sid in ordered:
        need, problem = capacity.need_of(servers[sid].raw or {})
        if problem is not None:
            LOG.warning("server_size_unknown", host=host, server=sid,
                        reason=problem.message,
                        effect="sent without a capacity check")
        needs.append((sid, need))
    preflight = cs.enabled and capacities is not None
    pre = None
    if preflight and capacities is not None:
        _, pre = capacity.check(host, needs, services, capacities,
                                aggregates, cs)
    targets: Dict[str, str] = {}
    if rs.enabled:
        if rs.target:
            # Aimed at the reserved hosts: size them for every server.
            need = sum((n for _, n in needs if n is not None),
                       capacity.Need())
        else:
            need = pre.pending_need if pre is not None else None
        brought, text = reserve.bring_in(ctx, record, services, aggregates,
                                         capacities, need)
        outcome.reserved = text
        if brought:
            services = [s._replace(status="enabled", disabled_reason=None)
                        if s.host in brought else s for s in services]
            if preflight and capacities is not None:
                _, pre = capacity.check(host, needs, services, capacities,
                                        aggregates, cs)
            if rs.target:
                targets = aim(needs, brought, capacities, cs)
    if pre is None:
        return list(ordered), {}, targets
    if pre.pending:
        outcome.capacity = pre.text
        outcome.no_capacity.update(pre.pending)
        LOG.warning("capacity_preflight", host=host, send=len(pre.fits),
                    waiting=len(pre.pending), reason=pre.text)
    else:
        LOG.info("capacity_preflight", host=host, send=len(pre.fits),
                 reason=pre.text)
    return list(pre.fits), dict(pre.pending), targets


def _capacities(ctx: Context, host: str, cs: capacity.Settings
                ) -> Tuple[Optional[Mapping[str, CapacityRecord]],
                           capacity.Settings]:
    """(Placement's counts, or None when they cannot be read; the capacity
    settings, without vCPU when the counts come from os-hypervisors)."""
    try:
        capacities = ctx.shared_capacities()
    except (base.ComputeError, NotImplementedError) as e:
        LOG.warning("capacity_unknown", host=host,
                    reason=str(e) or type(e).__name__,
                    effect="no capacity preflight: every server is sent and "
                           "Nova's scheduler decides")
        return None, cs
    if capacities and capacity.VCPUS in cs.resources and any(
            c.source == "hypervisors" for c in capacities.values()):
        # os-hypervisors counts physical CPUs and knows no allocation
        # ratio: overcommitted hosts would look full. RAM and disk are
        # still checked (their ratios are 1.0 unless an operator chose
        # otherwise).
        cs = dataclasses.replace(cs, resources=tuple(
            r for r in cs.resources if r != capacity.VCPUS))
        LOG.warning("capacity_from_hypervisors", host=host,
                    reason="Placement cannot be read; os-hypervisors knows "
                           "no CPU allocation ratio", effect="vCPU not "
                           "checked by the capacity preflight")
    return capacities, cs


def aim(needs: Sequence[Tuple[str, Optional[Need]]], hosts: Sequence[str],
        capacities: Optional[Mapping[str, CapacityRecord]],
        settings: capacity.Settings) -> Dict[str, str]:
    """{server id: reserved host} for evacuations aimed at the reserved
    hosts: each server where the preflight's simulation on those hosts
    alone puts it (sizes unknown: in turn). A server with no room there
    gets no target (the scheduler picks)."""
    if capacities is None:
        return {sid: hosts[i % len(hosts)] for i, (sid, _) in
                enumerate(needs)}
    sim = capacity.preflight(
        needs, capacity.free_on(hosts, capacities, settings),
        dataclasses.replace(settings, enabled=True))
    aimed = dict(sim.placed)
    for i, sid in enumerate(sim.unknown):
        aimed[sid] = hosts[i % len(hosts)]
    return aimed
