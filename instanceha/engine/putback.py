"""After a drain: putting the host back in service (the smoke test first
when configured), moving the drained servers back (fail-back), or
decommissioning it. Passes of the engine like the drain itself
(engine.drain), the same stuck handling for the migrations back."""

import dataclasses
from typing import Any, List, Optional, Union

import structlog

from instanceha.drivers.compute import base as compute_base
from instanceha.engine import drain
from instanceha.engine.context import Context
from instanceha.engine.passes import Requeue
from instanceha.events import Event, EventKind as E
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State

LOG = structlog.get_logger("instanceha.drain")

#: Seconds between two looks at a smoke test's server.
SMOKE_POLL = 2.0


@dataclasses.dataclass
class Smoke:
    """A smoke test under way: its server, when the test began."""

    started_at: float
    server_id: Optional[str] = None
    aborted: int = 0
    #: the service id the test enabled (to disable again on failure)
    enabled: Optional[str] = None

    def close(self) -> None:
        pass


def _abort_inflight(ctx: Context, record: HostRecord) -> int:
    """Abort the live migrations still in flight from the host, where
    Nova allows; returns how many."""
    aborted = 0
    for server in ctx.compute.list_servers(record.name):
        if (server.status or "").upper() != "MIGRATING":
            continue
        try:
            for mig in ctx.compute.server_migrations(server.id):
                ctx.compute.abort_migration(server.id, mig.id)
                aborted += 1
        except compute_base.ComputeError as e:
            LOG.warning("undrain_abort_refused", host=record.name,
                        server=server.id, reason=str(e),
                        effect="the migration finishes; the server stays "
                               "on its new host")
    run = ctx.runs.get(record.id)
    if isinstance(run, drain.Carry):
        run.close()
    return aborted


def undrain(ctx: Context, record: HostRecord, carry: Optional[Smoke] = None
            ) -> Union[Event, Requeue]:
    """Put a drained (or draining) host back: abort the live migrations
    still in flight from it, where Nova allows; for a host resumed from
    maintenance, run the smoke test when configured; then enable its
    compute service if a drain disabled it (an operator's own disable is
    left)."""
    m = ctx.conf.maintenance
    if carry is not None and record.state is not State.UNDRAINING:
        # Left undraining meanwhile (suspended by its operator): nothing
        # more is done; the smoke test's server is removed.
        if carry.server_id is not None:
            _delete(ctx, record, carry)
        return drain.result(ctx, record, E.UNDRAIN_FAILED,
                            "the host left undraining (%s)"
                            % record.state.value)
    if carry is None:
        aborted = _abort_inflight(ctx, record)
        carry = Smoke(started_at=ctx.clock(), aborted=aborted)
        if not (m.smoke_test and record.from_maintenance):
            return _enable(ctx, record, carry, "")
    return _smoke(ctx, record, carry, m)


def _enable(ctx: Context, record: HostRecord, carry: Smoke, tested: str
            ) -> Event:
    svc = ctx.compute.service_of(record.name)
    enabled = "; compute service enabled" if carry.enabled else ""
    if svc is not None and svc.status == "disabled" \
            and (svc.disabled_reason or "").startswith(drain.DRAIN_REASON):
        ctx.compute.enable_service(svc.id)
        enabled = "; compute service enabled"
    elif svc is not None and svc.status == "disabled":
        enabled = ("; left disabled: %r is not a drain's"
                   % (svc.disabled_reason or ""))
    return drain.result(ctx, record, E.UNDRAIN_OK,
                        "put back: %d migration(s) aborted%s%s"
                        % (carry.aborted, tested, enabled))


def _smoke(ctx: Context, record: HostRecord, carry: Smoke, m: Any
           ) -> Union[Event, Requeue]:
    """One look at the smoke test: its server booted forced onto the host
    must become ACTIVE within smoke_timeout.

    Nova (from Train) refuses any boot on a disabled compute, forced or
    not (its COMPUTE_STATUS_DISABLED trait in Placement), so the host is
    enabled for the test: the scheduler may place other servers there
    meanwhile (said in the log). A failed test disables it again with
    the drain's marker and the reason."""
    now = ctx.clock()
    late = now - carry.started_at > m.smoke_timeout
    if carry.server_id is None:
        svc = ctx.compute.service_of(record.name)
        if svc is None or svc.state != "up" or svc.forced_down:
            if late:
                return drain.result(
                    ctx, record, E.UNDRAIN_FAILED,
                    "smoke test: nova-compute did not report up within "
                    "%.0fs; the host stays disabled" % m.smoke_timeout)
            return Requeue(SMOKE_POLL, carry)
        if svc.status == "disabled" \
                and (svc.disabled_reason or "").startswith(drain.DRAIN_REASON):
            ctx.compute.enable_service(svc.id)
            carry.enabled = svc.id
            LOG.warning("smoke_test_enabled_host", host=record.name,
                        reason="Nova boots nothing on a disabled compute: "
                               "enabled for the smoke test; the scheduler "
                               "may place servers there meanwhile")
        server = ctx.compute.create_server(
            "instanceha-smoke-%s" % record.name, m.smoke_flavor,
            m.smoke_image, record.name, zone=svc.zone,
            network=m.smoke_network or None)
        carry.server_id = server.id
        LOG.info("smoke_test_started", host=record.name, server=server.id,
                 reason="a server booted on the host before it is "
                        "re-enabled")
        return Requeue(SMOKE_POLL, carry)
    try:
        server = ctx.compute.get_server(carry.server_id)
        status, fault = (server.status or "").upper(), server.fault
    except compute_base.NotFound:
        status, fault = "GONE", "the server disappeared"
    if status == "ACTIVE":
        _delete(ctx, record, carry)
        LOG.info("smoke_test_passed", host=record.name,
                 seconds=round(now - carry.started_at, 1))
        return _enable(ctx, record, carry,
                       "; smoke test passed in %.0fs"
                       % (now - carry.started_at))
    if status in ("ERROR", "GONE") or late:
        _delete(ctx, record, carry)
        if carry.enabled is not None:
            ctx.compute.disable_service(
                carry.enabled, "%s: smoke test failed" % drain.DRAIN_REASON)
        why = ("smoke test failed: its server is %s%s; the host stays "
               "disabled" % (status if not late or status in ("ERROR",
                                                               "GONE")
                             else "not ACTIVE after %.0fs (%s)"
                             % (m.smoke_timeout, status),
                             " (%s)" % fault if fault else ""))
        LOG.error("smoke_test_failed", host=record.name, reason=why)
        return drain.result(ctx, record, E.UNDRAIN_FAILED, why)
    return Requeue(SMOKE_POLL, carry)


def _delete(ctx: Context, record: HostRecord, carry: Smoke) -> None:
    try:
        ctx.compute.delete_server(carry.server_id)
    except compute_base.ComputeError as e:
        LOG.warning("smoke_server_not_deleted", host=record.name,
                    server=carry.server_id, reason=str(e),
                    effect="delete it by hand")


def fail_back(ctx: Context, record: HostRecord,
              carry: Optional[drain.Carry] = None) -> Union[Event, Requeue]:
    """One pass of moving the drained servers back onto the host (live
    migrations aimed at it, by the drain's concurrency and stuck
    handling); the result once each is back or cannot come."""
    if carry is not None and record.state is not State.FAILING_BACK:
        carry.close()
        return drain.result(ctx, record, E.FAIL_BACK_CANCELLED,
                            "the host left failing back (%s)"
                            % record.state.value)
    settings = drain.settings_for(ctx, record.drain_concurrency)
    now = ctx.clock()
    if carry is None:
        carry = drain.Carry(ctx=ctx, host=record.name, host_id=record.id,
                            initial=tuple(record.drain_moved))
        ctx.runs[record.id] = carry
    carry.moved = set()
    moving: List[str] = []
    todo: List[str] = []
    gone: List[str] = []
    for sid in carry.initial:
        if sid in carry.given_up:
            continue
        try:
            server = ctx.compute.get_server(sid)
        except compute_base.NotFound:
            gone.append(sid)
            continue
        status = (server.status or "").upper()
        if server.host == record.name and status != "MIGRATING":
            carry.moved.add(sid)
        elif status == "MIGRATING":
            moving.append(sid)
        elif status in ("ACTIVE", "PAUSED"):
            todo.append(sid)
        else:
            carry.given_up[sid] = "%s: not live-migratable now" % status
    wake = [drain.watch(ctx, record, carry, sid, settings, now)
            for sid in moving]
    room = max(0, min(settings.concurrency - len(moving),
                      settings.max_concurrent
                      - drain.others_inflight(ctx, record.name)))
    sent = 0
    for sid in todo:
        if sent >= room:
            break
        tries = carry.attempts.get(sid, 0)
        if tries > settings.stuck_retries:
            carry.given_up[sid] = "live migration back failed %d times" % (
                tries)
            continue
        carry.attempts[sid] = tries + 1
        if drain.send(ctx, record, carry, sid, "live_migrate_back",
                      lambda s: ctx.compute.live_migrate(
                          s, host=record.name)):
            sent += 1
    if sent:
        wake.append(now + drain.QUICK)
    carry.moving = len(moving) + sent
    if carry.moving or any(s not in carry.given_up for s in todo):
        # News of a server moving back wakes it; of any server while
        # other hosts' moves hold some back.
        return Requeue(drain.next_pass(settings, now, wake), carry,
                       waits_for=None if room < len(todo)
                       else frozenset(carry.initial))
    carry.close()
    parts = ["%d/%d servers moved back" % (len(carry.moved),
                                            len(carry.initial))]
    if gone:
        parts.append("%d deleted meanwhile" % len(gone))
    if carry.given_up:
        parts.append("not moved back: " + ", ".join(
            "%s (%s)" % kv for kv in sorted(carry.given_up.items())))
    kind = E.FAIL_BACK_FAILED if carry.given_up else E.FAIL_BACK_OK
    return drain.result(ctx, record, kind, "; ".join(parts))


def decommission(ctx: Context, record: HostRecord) -> Event:
    """A drained host leaves the cloud: out of its aggregates, its compute
    service deleted. Only with no server left on it and the service
    disabled; otherwise a refusal naming what stops it."""
    left = ctx.compute.list_servers(record.name)
    if left:
        return drain.result(
            ctx, record, E.DECOMMISSION_FAILED,
            "%d server(s) still on the host (%s)" % (
                len(left), ", ".join(sorted(s.name or s.id
                                            for s in left)[:5])))
    svc = ctx.compute.service_of(record.name)
    if svc is None:
        return drain.result(ctx, record, E.DECOMMISSION_OK,
                            "its compute service was already gone")
    if svc.status != "disabled":
        return drain.result(ctx, record, E.DECOMMISSION_FAILED,
                            "its compute service is enabled again")
    removed = []
    for agg in compute_base.aggregates_or_none(
            ctx.compute, LOG, "the host is not removed from its "
            "aggregates", host=record.name) or ():
        if record.name in agg.hosts and agg.id is not None:
            ctx.compute.remove_host_from_aggregate(agg.id, record.name)
            removed.append(agg.name)
    try:
        ctx.compute.delete_service(svc.id)
    except compute_base.NotFound:
        pass                        # deleted meanwhile: what was asked
    text = "compute service deleted"
    if removed:
        text += ", removed from aggregate(s) %s" % ", ".join(sorted(removed))
    if record.name in (ctx.inventory or {}):
        text += ("; its BMC inventory entry is left over: remove it (then "
                 "SIGHUP)")
    LOG.warning("host_decommissioned", host=record.name, reason=text)
    return drain.result(ctx, record, E.DECOMMISSION_OK, text)
