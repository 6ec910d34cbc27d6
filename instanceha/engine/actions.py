"""The side effects the state machine asks for, one function per Action.

Each takes the engine's context and the host's record and returns the result
as an Event. A definitive answer (BMC refused, Nova refused) is a *_FAILED
event; trouble a retry may cure (Nova unreachable, HTTP 5xx) is raised, and
the engine retries the action with back-off.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Callable, List, Optional, Union

import structlog

from instanceha import failpoints
from instanceha.drivers.compute import base as compute_base
from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.drivers.fencing.watchdog import WatchdogDriver
from instanceha.engine import proof, reserve, stale
from instanceha.engine.evac_run import close_open_rows
from instanceha.engine.passes import Done, Requeue, answer
from instanceha.events import Event, EventKind as E
from instanceha.events import (
    Fenced, Isolated, Payload, PowerReading, Restored, ServiceReport)
from instanceha.policy import proof as proof_policy
from instanceha.fsm.nova_row import classify
from instanceha.fsm.states import Action, State, gave_up_kind
from instanceha.drivers.compute import nova_clock
from instanceha.fsm.record import HostRecord
from instanceha.util.marker import MARKER

if TYPE_CHECKING:
    from instanceha.engine.context import Context

#: a method's check before its power-off: None to go on, else why not
Check = Callable[[BMC], Optional[str]]

LOG = structlog.get_logger("instanceha.actions")

CLEANED_UP = {"completed", "error", "failed", "cancelled"}


def disabled_reason(state: str, at: float) -> str:
    """The marker instanceha writes into Nova: 'instanceha: <state> <time>'."""
    iso = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    return "%s %s %s" % (MARKER, state,
                         iso.strftime("%Y-%m-%dT%H:%M:%SZ"))


class FenceHeld(Exception):
    """The control-plane gate closed after the fencing decision was taken
    and before the power-off: nothing was powered off; the engine keeps
    the host fencing and runs the action again later (not a failure: no
    retry budget is used)."""


def _gated(ctx: Context, check: Check) -> Check:
    """``check`` for chain.fence, then the gate again right before each
    power-off: a fence action that waited (in the queue, behind a BMC
    read or Nova's list of services) while the control plane failed
    powers nothing off."""
    def guarded(method: BMC) -> Optional[str]:
        why = check(method)
        if why:
            return why
        held = ctx.fence_gate()
        if held:
            raise FenceHeld(held)
        return None
    return guarded


#: the journal's name of the step that condemns a host (its watchdog
#: method's poison pill), written before the pill leaves
CONDEMN = "condemn"


def _condemning(ctx: Context, record: HostRecord, check: Check,
                rows: List[int]) -> Check:
    """``check``, then, before a method that condemns the host (the
    watchdog method sends its agent and peers the poison pill), a journal
    row of that step of its own: the journal is written before every
    action. Its id is added to ``rows`` (finished by
    :func:`_condemned`); a failed write fails the method (nothing sent)."""
    def journalled(method: BMC) -> Optional[str]:
        why = check(method)
        if why or method.driver != WatchdogDriver.name:
            return why
        rows.append(ctx.journal.action_started(record, CONDEMN,
                                               ctx.clock()))
        LOG.warning("condemn_journalled", host=record.name,
                    reason="the watchdog method condemns the host next: "
                           "its poison pill goes to its agent and peers")
        return None
    return journalled


def _condemned(ctx: Context, rows: List[int], what: str) -> None:
    """Finish the condemnation rows of one fence attempt (their pill was
    sent when the method ran): ``what`` came of their level."""
    for row in rows:
        try:
            ctx.journal.action_finished(row, ctx.clock(), "sent",
                                        "poison pill sent to the host and "
                                        "its peers; " + what)
        except Exception as e:   # noqa: BLE001 - the fence's outcome stands
            LOG.error("journal_write_failed", action=CONDEMN,
                      reason=str(e))


def _not_fenced(e: Exception) -> str:
    return ("its level did not prove the host dead (it stays condemned "
            "until it is back and cleaned up): %s" % e)


def _result(record: HostRecord, kind: E, ctx: Context, reason: str,
            payload: Optional[Payload] = None) -> Event:
    return answer(ctx, record, kind, reason, payload)


def live_sharers(ctx: Context, record: HostRecord, bmc: BMC
                 ) -> List[compute_base.ComputeService]:
    """Compute services other than ``record``'s that map to the same
    machine and look alive on Nova's own clock (up, or heartbeating while
    forced down): powering the BMC off would kill them (a renamed host's
    stale old service row, a copy-pasted inventory entry). One machine is
    recognised by its BMC's address (a DNS name and the IP it resolves
    to are one), by the system UUID its BMCs reported (its Redfish and its
    IPMI address), and by the host name our BMC reports (another compute
    host's, whether or not that host has an inventory entry)."""
    ev = ctx.evidence
    reported = ev.hostnames(bmc) - {proof_policy.short_name(record.name)}
    if inventory.identity(bmc) is None and not reported:
        return []

    def same(other: Optional[BMC]) -> bool:
        return other is not None and (
            inventory.same_bmc(bmc, other, inventory.resolve)
            or ev.same_machine(bmc, other))
    # Only hosts whose inventory entry reaches the same machine, or that
    # our BMC names, can be hurt: with none (the usual case) Nova need not
    # be asked at all.
    # Candidates from indexes (entries reaching one BMC; BMCs that
    # reported one system UUID), each then judged as ``same`` says.
    names = {name for name in (ctx.bmc_mates(record.name, bmc)
                               | ev.same_machine_hosts(bmc))
             if name != record.name and same(ctx.inventory.get(name))}
    if not names and not reported:
        return []
    everyone = ctx.compute.list_services()
    # Nova's now: the newest heartbeat of a service Nova calls up.
    newest = nova_clock.newest_heartbeat(everyone) or 0
    delta = ctx.conf.detection.delta
    out: List[compute_base.ComputeService] = []
    for s in everyone:
        if s.id == record.id or s.host == record.name:
            continue
        named = proof_policy.short_name(s.host) in reported
        if not named and (s.host not in names
                          or not same(ctx.bmc_for(s.host))):
            continue
        fresh = s.updated_at is not None and newest - s.updated_at <= delta
        if (s.state == "up" and not s.forced_down) or fresh:
            out.append(s)
    return out


class FenceCarry:
    """One fencing attempt between its passes: where the levels stand
    (chain.Progress) and the journal rows of its condemnations."""

    def __init__(self) -> None:
        self.progress = chain.Progress()
        self.rows: List[int] = []

    def close(self) -> None:
        self.progress.close()


def fence(ctx: Context, record: HostRecord,
          carry: Optional[FenceCarry] = None
          ) -> Union[Event, Requeue, Done]:
    """Fence the host through its inventory entry's levels. Runs in
    passes: a method that can only be waited for (the watchdog's
    deadline) makes it Requeue until then, holding no worker; the next
    pass goes on with that method (``carry``) without its checks again:
    they belong to the attempt's start."""
    bmc = ctx.bmc_for(record.name)
    if bmc is None:
        if carry is not None:
            _condemned(ctx, carry.rows, "the host's inventory entry was "
                       "removed while its fencing was waited for")
        return _result(record, E.FENCE_FAILED, ctx,
                       "no BMC for host %s in the fencing inventory"
                       % record.name)
    if carry is not None:
        if record.state is not State.FENCING:
            why = ("the host left fencing (%s) while its fencing was "
                   "waited for" % record.state.value)
            _condemned(ctx, carry.rows, why)
            LOG.warning("fence_abandoned", host=record.name, reason=why)
            return Done("abandoned", why)
        return _fence_levels(ctx, record, bmc, carry)
    sharers = live_sharers(ctx, record, bmc)
    if sharers:
        other = sharers[0]
        address = next((m.address for m in bmc.methods
                        if inventory.same_bmc(m, ctx.bmc_for(other.host),
                                              inventory.resolve)),
                       bmc.address)
        return _result(record, E.FENCE_FAILED, ctx,
                       "refusing to power off: BMC %s of %s reaches the "
                       "machine of compute service %s (%s), which is up "
                       "(same BMC address, system UUID or reported host "
                       "name); a renamed host's old service row? Delete the "
                       "stale service and fix the inventory" % (
                           address, record.name, other.host, other.id))
    untrusted = ctx.evidence.untrusted(bmc)
    if untrusted:
        return _result(record, E.FENCE_FAILED, ctx,
                       "refusing to fence %s through its inventory entry: "
                       "UNPROTECTED: %s" % (record.name, untrusted))
    return _fence_levels(ctx, record, bmc, FenceCarry())


def _fence_levels(ctx: Context, record: HostRecord, bmc: BMC,
                  carry: FenceCarry) -> Union[Event, Requeue]:
    condemned = carry.rows
    try:
        # Each method of the entry in order (Redfish, then IPMI...): the
        # first that confirms Off proves the host dead, if its Off may
        # prove it (a BMC seen On for this host: proof.fence_check).
        done = chain.fence(bmc, ctx.fencer, check=_condemning(
            ctx, record, _gated(ctx, proof.fence_check(ctx, record)),
            condemned), progress=carry.progress)
    except FenceHeld as e:
        # A condemnation made at the attempt's start (chain.fence) stands
        # (doc/safety.md rule 25); its row says why nothing followed.
        _condemned(ctx, condemned, "the fencing gate closed before the "
                   "power levels (it stays condemned until it is back and "
                   "cleaned up): %s" % e)
        raise
    except fencing_base.BmcUnreachable as e:
        # No BMC answered: nothing refused, and the host is not proven
        # dead. Raised, so the engine retries with back-off ([DEFAULT]
        # action_retries bounds it; then the host goes failed).
        _condemned(ctx, condemned, _not_fenced(e))
        raise
    except fencing_base.FenceError as e:
        _condemned(ctx, condemned, _not_fenced(e))
        return _result(record, E.FENCE_FAILED, ctx, str(e))
    except Exception as e:
        _condemned(ctx, condemned, _not_fenced(e))
        raise
    if isinstance(done, chain.Waiting):
        # Nothing to do but wait (the watchdog's deadline): the next pass
        # then, woken by nothing else.
        LOG.info("fence_waiting", host=record.name,
                 retry_in=round(done.after, 2), reason=done.why)
        return Requeue(done.after, carry, frozenset())
    outcome = done
    _condemned(ctx, condemned, "the host was fenced: %s"
               % outcome.describe())
    leveled = outcome.leveled or outcome.scope != fencing_base.HOST
    return _result(record, E.FENCE_OK, ctx, outcome.describe(), Fenced(
        method=outcome.index, method_driver=outcome.driver,
        method_address=outcome.address, methods=outcome.methods,
        failed_methods=tuple(f.as_dict() for f in outcome.failures),
        level=outcome.level if leveled else None,
        levels=outcome.levels if leveled else None,
        level_methods=outcome.level_methods if leveled else (),
        scope=outcome.scope, protects=outcome.protects,
        how="; ".join(outcome.how)))


def isolate(ctx: Context, record: HostRecord) -> Event:
    reason = disabled_reason("evacuating", ctx.clock())
    try:
        svc = ctx.compute.force_down(record.id, reason)
    except compute_base.Conflict as e:
        why = str(e)
        if record.proven_by == "storage":
            why += ("; its storage fencing (Ceph blocklist) stays: remove "
                    "it (ceph osd blocklist rm) once the host is known to "
                    "be back, before resuming it")
        return _result(record, E.ISOLATE_FAILED, ctx, why)
    # Nova bumps updated_at on our write: remember it so it is not taken
    # for a heartbeat of a returning host.
    written = svc.updated_at if svc is not None and svc.updated_at else None
    if written is None:
        written = ctx.clock()
    return _result(record, E.ISOLATE_OK, ctx, reason, Isolated(written))




def check_cleanup(ctx: Context, record: HostRecord) -> Event:
    migrations = ctx.compute.list_evacuations(record.name)
    waiting = [m for m in migrations if m.status not in CLEANED_UP]
    if waiting:
        return _result(record, E.CLEANUP_PENDING, ctx,
                       "%d of %d evacuation migrations not completed yet"
                       % (len(waiting), len(migrations)))
    stale_rebuilds = stale.settle(ctx, record)
    if stale_rebuilds.waiting:
        return _result(record, E.CLEANUP_PENDING, ctx,
                       "waiting up to %.0fs for %d rebuild(s) cast to this "
                       "host while it was dead to run (the servers were "
                       "rebuilt elsewhere; one such rebuild sets its server "
                       "to error, which is then repaired)"
                       % (ctx.conf.evacuation.stale_rebuild_wait,
                          len(stale_rebuilds.waiting)))
    failpoints.hit("before_restore")
    # Unfence (a Ceph blocklist entry removed) only now: the host is back
    # and its evacuated servers are cleaned up; before the service is put
    # back, so that nothing is scheduled to a host cut off its storage.
    bmc = ctx.bmc_for(record.name)
    if bmc is not None:
        try:
            chain.unfence(bmc, ctx.fencer)
        except fencing_base.FenceError as e:
            return _result(record, E.CLEANUP_PENDING, ctx,
                           "the host's storage fencing could not be undone "
                           "yet (the service stays forced down): %s" % e)
    restore_reason = record.operator_disabled
    enable = not ctx.conf.evacuation.leave_disabled and restore_reason is None
    try:
        ctx.compute.restore(record.id, enable=enable,
                            disabled_reason=restore_reason)
    except compute_base.Conflict as e:
        return _result(record, E.CLEANUP_PENDING, ctx,
                       "Nova refused to put the host back: %s" % e)
    # A request a stopped process left open (the re-proof then failed
    # and the host came back) is closed, not left 'requested' for ever.
    close_open_rows(ctx, record, "the host reported back and "
                              "was put back")
    returned = reserve.give_back(ctx, record)
    done = sum(1 for m in migrations if m.status == "completed")
    if enable:
        text = ("%d evacuation migrations completed; forced_down unset and "
                "service enabled" % done)
    elif restore_reason is not None:
        text = ("%d evacuation migrations completed; forced_down unset, "
                "service left disabled as its operator had it: %s"
                % (done, restore_reason))
    else:
        text = ("%d evacuation migrations completed; forced_down unset, "
                "service left disabled ([evacuation] leave_disabled)" % done)
    if stale_rebuilds.text():
        text += "; " + stale_rebuilds.text()
    if bmc is not None and any(m.driver == WatchdogDriver.name for m in
                               getattr(bmc, "all_methods", None) or ()):
        text += ("; its watchdog condemnation lifted (no poison pill to its "
                 "agent or peers any more)")
    if returned:
        text += "; " + returned
    return _result(record, E.CLEANUP_CONFIRMED, ctx, text, Restored(enable))


def probe_power(ctx: Context, record: HostRecord) -> Optional[Event]:
    """Read the BMC of a host whose heartbeat was just lost (a read, no
    action): Off is the second witness of its death (Policy
    power_evidence) if that BMC was seen On for the host; On is kept
    as that evidence; unknown or no answer changes nothing. Returns the
    POWER_ON / POWER_OFF event to apply, or None."""
    method, state = chain.first_reading(ctx.bmc_for(record.name),
                                        ctx.fencer)
    if state is None:
        return None
    LOG.info("power_probe", host=record.name, power=state.value,
             reason="heartbeat lost: reading the BMC; Off is the second "
                    "witness of death")
    kind = E.POWER_OFF if state is fencing_base.PowerState.OFF \
        else E.POWER_ON
    return Event(kind, record.id, ctx.clock(), name=record.name,
                 source="bmc", reason="BMC reports power %s" % state.value,
                 payload=PowerReading(
                     readings=((inventory.method_key(method), state.value),),
                     by="heartbeat loss"))


def probe_nova(ctx: Context, record: HostRecord) -> Optional[Event]:
    """Read the host's own row of Nova (a read, no action) for a host
    suspect on its agent's silence once Nova owes its heartbeat: the
    answer, with when the read started, is the host's next event (a
    heartbeat Nova recorded since clears the host; none corroborates the
    silence). None when Nova lists no row for it."""
    started = ctx.clock()
    svc = ctx.compute.service_of(record.name)
    if svc is None or svc.id != record.id:
        return None
    # Judged by Nova's own up/down (its service_down_time), as the
    # reconciler judges a row when Nova's clock is unknown: the row's
    # updated_at, in the report, is what corroborates the silence. A
    # host somebody else forced down says so, as at any reconcile pass.
    kind, why = classify(svc, None, ctx.conf.detection.delta)
    return Event(kind, record.id, ctx.clock(), name=record.name,
                 source="nova",
                 reason="the host's row, read when its heartbeat was owed: "
                        + why,
                 payload=ServiceReport(
                     forced_down=svc.forced_down, status=svc.status,
                     disabled_reason=svc.disabled_reason,
                     updated_at=svc.updated_at, zone=svc.zone,
                     read_at=started))


def give_up(ctx: Context, record: HostRecord, action: Action, error: str,
            attempts: int) -> Event:
    """The definitive result for an action that kept raising (one with
    a give-up answer: the executor asks only for those)."""
    why = "%s raised %d times in a row, last: %s" % (action.value, attempts,
                                                    error)
    kind = gave_up_kind(action)
    assert kind is not None, action
    return _result(record, kind, ctx, why)
