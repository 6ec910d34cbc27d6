"""Reserved hosts brought in for a lost host, and returned afterwards.

:mod:`instanceha.policy.reserved` decides which; this module journals and
acts. The journal row is written before the reserved host's compute
service is enabled, so a restart in between finds the host in use for the
same lost host (it is enabled then if it is still disabled) and never
hands it to another one.
"""

from typing import Mapping, Optional, Sequence, Tuple

import structlog

from instanceha.drivers.compute import base
from instanceha.engine.context import Context
from instanceha.fsm.record import HostRecord
from instanceha.policy import reserved
from instanceha.policy.capacity_need import Need
from instanceha.policy.facts import CapacityRecord

LOG = structlog.get_logger("instanceha.reserve")


def _failed_service(record: HostRecord,
                    services: Sequence[base.ComputeService]
                    ) -> base.ComputeService:
    svc = next((s for s in services if s.id == record.id), None)
    if svc is None:
        svc = base.ComputeService(id=record.id, host=record.name,
                                  state="down", status="disabled",
                                  forced_down=True, disabled_reason=None,
                                  updated_at=None, zone=record.zone)
    return svc


def bring_in(ctx: Context, record: HostRecord,
             services: Sequence[base.ComputeService],
             aggregates: Optional[Sequence[base.Aggregate]],
             capacities: Optional[Mapping[str, CapacityRecord]] = None,
             need: Optional[Need] = None) -> Tuple[Tuple[str, ...], str]:
    """Enable the reserved hosts chosen for ``record``'s host (sized by
    ``need``, a capacity.Need, when ``capacities`` are known). Returns
    (the reserved hosts in service for it, a line for its reason or
    "")."""
    settings = reserved.Settings.from_conf(ctx.conf)
    if not settings.enabled:
        return (), ""
    now = ctx.clock()
    in_use = {r["reserved_host"]: r["host_name"]
              for r in ctx.journal.reserved_in_use()}
    choice = reserved.choose(
        _failed_service(record, services), services, aggregates, in_use,
        settings, shortfall=need if capacities is not None else None,
        capacities=capacities)
    by_host = {s.host: s for s in services}
    brought = []
    for host in choice.hosts:
        svc = by_host.get(host)
        if svc is None:
            LOG.warning("reserved_host_missing", host=record.name,
                        reserved=host, reason="its compute service is no "
                        "longer listed by Nova")
            continue
        if host not in choice.already:
            ctx.journal.reserved_taken(host, record.id, record.name,
                                       svc.disabled_reason, now)
        if svc.status != "enabled":
            try:
                ctx.compute.enable_service(svc.id)
            except (base.ComputeError, NotImplementedError) as e:
                why = str(e) or type(e).__name__
                LOG.error("reserved_host_not_enabled", host=record.name,
                          reserved=host, reason=why)
                if host not in choice.already:
                    ctx.journal.reserved_returned(
                        host, ctx.clock(), "could not be enabled: " + why)
                continue
        brought.append(host)
    text = ""
    if brought:
        text = "reserved host(s) %s in service for it" % ", ".join(brought)
    if choice.missing:
        text = (text + "; " if text else "") + \
            "reserved hosts missing: " + choice.missing
    if brought or choice.missing:
        LOG.warning("reserved_hosts", host=record.name, enabled=brought,
                    missing=choice.missing, reason=choice.reason)
    return tuple(brought), text


def give_back(ctx: Context, record: HostRecord) -> str:
    """``record``'s host is back in service: return the reserved hosts
    brought in for it to the reserve ([reserved_hosts]
    return_to_reserve), or close their journal rows as kept in service.
    Returns a line for the host's reason, or ""."""
    rows = [r for r in ctx.journal.reserved_in_use()
            if r["host_name"] == record.name]
    if not rows:
        return ""
    settings = reserved.Settings.from_conf(ctx.conf)
    now = ctx.clock()
    in_use = {r["reserved_host"]: r["host_name"] for r in rows}
    originals = {r["reserved_host"]: r["original_reason"] for r in rows}
    plan = reserved.release(record.name, in_use, settings, originals)
    if not plan.hosts:
        for host in in_use:
            ctx.journal.reserved_returned(host, now, "kept in service: "
                                          + plan.reason)
        LOG.info("reserved_hosts_kept", host=record.name,
                 reserved=sorted(in_use), reason=plan.reason)
        return plan.reason
    by_host = {s.host: s for s in ctx.shared_services()}
    done, failed = [], []
    for host in plan.hosts:
        svc = by_host.get(host)
        try:
            if svc is None:
                raise base.NotFound("compute service of %s not listed"
                                    % host)
            ctx.compute.disable_service(svc.id, plan.reasons[host])
        except (base.ComputeError, NotImplementedError) as e:
            why = str(e) or type(e).__name__
            LOG.error("reserved_host_not_returned", host=record.name,
                      reserved=host, reason=why,
                      effect="it stays in service; disable it by hand")
            ctx.journal.reserved_returned(host, ctx.clock(),
                                          "could not be disabled: " + why)
            failed.append(host)
            continue
        ctx.journal.reserved_returned(
            host, ctx.clock(), "returned to the reserve: disabled with "
            "reason %r" % plan.reasons[host])
        done.append(host)
    LOG.info("reserved_hosts_returned", host=record.name, returned=done,
             failed=failed, reason=plan.reason)
    text = ""
    if done:
        text = "reserved host(s) %s returned to the reserve" % ", ".join(done)
    if failed:
        text = (text + "; " if text else "") + \
            "could not return %s (still in service)" % ", ".join(failed)
    return text
