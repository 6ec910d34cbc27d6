"""Proving a host dead with I/O: the fence action's check of each method,
and the re-proof before an evacuation pass sends anything. The decisions
are instanceha.policy.proof's; this module reads the BMC and Nova."""

from typing import Callable, Optional, Tuple

import structlog

from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.inventory_entry import BMC, NO_BMC
from instanceha.engine.context import Context
from instanceha.fsm.record import HostRecord
from instanceha.policy import proof

LOG = structlog.get_logger("instanceha.proof")

UNFENCED = "noop"


def fence_check(ctx: Context, record: HostRecord
                ) -> Callable[[BMC], Optional[str]]:
    """The ``check`` for chain.fence: a method whose Off would prove
    nothing (never seen On for this host, and the host is not one
    instanceha already isolated) is read first; On is what a live machine
    reports (seen On: the power-off may prove it), anything else fails
    the method without a power-off."""
    def check(method: BMC) -> Optional[str]:
        if method.driver == UNFENCED:
            return None          # allow_unfenced: the operator's choice
        if method.driver in NO_BMC:
            return None          # no BMC: its own driver proves its part
        why = machine_check(ctx, record, method) or \
            ctx.evidence.untrusted(ctx.bmc_for(record.name))
        if why:
            return why
        ok, why = ctx.evidence.off_proves(record.name, method,
                                          record.isolated)
        if ok:
            return None
        state = ctx.fencer(method.driver).power_state(method)
        if state is fencing_base.PowerState.ON:
            ctx.evidence.read(record.name, method, proof.ON, "fence")
            return None
        LOG.warning("fence_refused", host=record.name, driver=method.driver,
                    address=method.address, power=getattr(state, "value",
                                                          state),
                    reason=why)
        return why
    return check


def machine_check(ctx: Context, record: HostRecord, method: BMC
                  ) -> Optional[str]:
    """None when ``method`` may power the host off as far as the machine
    behind its BMC goes, else why not. The BMC's system identity is read
    again first (a read, no action; the audit's may be old: a BMC
    recabled since) when the host's agent reported a UUID or a verified
    identity is required. A BMC reporting another machine's UUID is
    refused always; one not verified only with [fencing]
    require_verified_identity."""
    required = ctx.conf.fencing.require_verified_identity
    evidence = ctx.evidence
    if required or evidence.host_uuid(record.name):
        try:
            found = ctx.fencer(method.driver).system_identity(method)
        except Exception as e:   # noqa: BLE001 - the last reading stands
            LOG.info("system_identity_unknown", host=record.name,
                     driver=method.driver, address=method.address,
                     reason=type(e).__name__)
            found = None
        if found:
            evidence.identity_key(record.name, inventory.method_key(method),
                                  found)
    verdict, text = evidence.machine(record.name, method)
    if verdict == proof.VERIFIED or (verdict == proof.NOT_VERIFIED
                                     and not required):
        return None
    if verdict == proof.NOT_VERIFIED:
        text += " ([fencing] require_verified_identity refuses it)"
    LOG.warning("fence_refused", host=record.name, driver=method.driver,
                address=method.address, reason=text)
    return text


def reprove(ctx: Context, record: HostRecord) -> Tuple[bool, str]:
    """(ok, reason): is the host dead *now*? A fresh BMC read says Off
    (from an entry that may prove it), and Nova has recorded no heartbeat
    since instanceha's own last write. A host proven dead by a kdump
    message ([kdump] action = evacuate) and one fenced with the noop
    driver ([fencing] allow_unfenced) have no power-off to re-read: only
    the heartbeat is checked. A host fenced by storage only (a level of
    Ceph blocklisting) has its blocklist entries read again instead of a
    power state, and its heartbeat checked. Raises ComputeError when Nova
    cannot be read (the engine retries the action)."""
    svc = ctx.compute.service_of(record.name)
    if svc is not None and svc.id != record.id:
        svc = None              # another service now bears the name
    updated_at = svc.updated_at if svc is not None else None
    floor = record.written_at
    bmc = ctx.bmc_for(record.name)
    unfenced = bmc is not None and bool(bmc.methods) and all(
        m.driver == UNFENCED for m in bmc.methods)
    level = chain.level_of(bmc, record.fenced_level)
    if record.proven_by == "storage" or (
            record.proven_by == "power" and chain.powerless(level)):
        # Fenced by a level without power: by storage only (the host may
        # run; what may be evacuated is only what lives on that storage),
        # or by a method proving death by time. What must hold now is
        # that fencing (the blocklist still listed), not a power state.
        untrusted = None
        why = chain.still_fenced(bmc, record.fenced_level, ctx.fencer) \
            if bmc is not None else "no entry in the fencing inventory"
        if why:
            LOG.info("reproof", host=record.name, ok=False, reason=why)
            return False, "its fencing does not hold now: %s" % why
        power = proof.OFF        # stands for "fenced"; the heartbeat decides
    elif record.proven_by == "kdump" or unfenced:
        power = proof.OFF        # nothing to re-read; the heartbeat decides
        untrusted = None
    elif bmc is None:
        return False, "no BMC for host %s in the fencing inventory" % (
            record.name)
    else:
        # The fence of this recovery already required a BMC seen On (or
        # the Off of instanceha's own power-off); one found untrusted
        # since proves nothing.
        untrusted = ctx.evidence.untrusted(bmc)
        _, state = chain.first_reading(bmc, ctx.fencer)
        power = state.value if state is not None else \
            "no method answers a power-state read"
    ok, reason = proof.reproof(power, updated_at, floor, untrusted)
    if ok and (record.proven_by == "storage" or chain.powerless(level)):
        reason = ("its fencing (level %s) still holds and Nova has no "
                  "heartbeat since the fence" % record.fenced_level)
    LOG.info("reproof", host=record.name, ok=ok, power=power,
             updated_at=updated_at, floor=floor, reason=reason)
    return ok, reason
