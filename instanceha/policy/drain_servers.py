"""How each server of a host being drained leaves it (:func:`classify`);
pure.

Rules (exact), first match wins:

1. the server has the opt-out tag, or metadata ``<opt_out_tag>=true``
   (a value other than true/false counts as true, with an error):
   ``leave``, and the preflight refuses;
2. ``ERROR`` (status or vm_state): ``defer``: not moved, last, reported;
3. a migration or resize in progress (status ``MIGRATING``, ``RESIZE``,
   ``REVERT_RESIZE``, or a ``migrating``/``resize_*`` task): ``wait``;
4. ``VERIFY_RESIZE`` (vm_state ``resized``): ``confirm``;
5. any other task in progress (``image_snapshot``, ``rebooting``...):
   ``wait``: Nova refuses to move a server with a task, and the task
   ends by itself;
6. ``ACTIVE`` or ``PAUSED``: ``live``, unless one of ``live_blockers``
   applies (:func:`blockers`): ``leave``, and the preflight refuses;
7. ``SHUTOFF``: ``cold`` with ``shutoff = migrate``, else ``leave``
   (reported, not refused);
8. any other state (``SUSPENDED``, ``RESCUE``, ``SHELVED``,
   ``SOFT_DELETED``, unknown...): Nova moves it neither live nor cold:
   ``leave``, and the preflight refuses.

The status decides; without one, the vm_state does.
"""

import dataclasses
import re
from typing import List, Optional, Tuple

from instanceha.policy import order
from instanceha.policy.capacity_need import Need, need_of
from instanceha.policy.drain_settings import (
    ACCELERATOR, COLD, CONFIRM, DEFER, LEAVE, LIVE, MIGRATE, PCI, VGPU, VTPM,
    WAIT, Settings)
from instanceha.policy.evacuable import parse_bool
from instanceha.policy.facts import (ERROR, SERVER, Problem, ServerFacts,
                                     describe, flavor_body, short)

#: refusal kinds a server can cause
OPT_OUT = "opt_out"
NOT_LIVE = "not_live_migratable"
STATE = "state"

_MOVING_STATUSES = ("MIGRATING", "RESIZE", "REVERT_RESIZE")
_MOVING_TASKS = ("migrating", "resize_prep", "resize_migrating",
                 "resize_migrated", "resize_finish", "resize_reverting",
                 "resize_confirming")
#: vm_state -> status, for a server read without its status
_BY_VM_STATE = {"active": "ACTIVE", "paused": "PAUSED",
                "stopped": "SHUTOFF", "resized": "VERIFY_RESIZE",
                "error": "ERROR", "suspended": "SUSPENDED",
                "rescued": "RESCUE", "shelved": "SHELVED",
                "shelved_offloaded": "SHELVED_OFFLOADED",
                "soft-delete": "SOFT_DELETED", "deleted": "DELETED",
                "building": "BUILD"}
_VGPU = re.compile(r"^resources[^:]*:VGPU$")


@dataclasses.dataclass(frozen=True)
class ServerVerdict:
    server_id: str
    name: str
    how: str
    #: why this ``how``: 'ACTIVE: live-migrated'
    reason: str
    #: the preflight refusal this server causes, None if none
    refusal: Optional[str] = None
    #: OPT_OUT, NOT_LIVE or STATE with a refusal, else ''
    kind: str = ""
    priority: int = 0
    zone: Optional[str] = None
    #: what it takes on a destination (counted when it moves), None when
    #: its size is unknown
    need: Optional[Need] = None
    problems: Tuple[Problem, ...] = ()


def label(server: ServerFacts) -> str:
    return describe(SERVER, server.name, server.id)


def state_of(server: ServerFacts) -> Optional[str]:
    """Nova's status, upper case; from the vm_state without one."""
    if server.status:
        return server.status.strip().upper() or None
    if server.vm_state:
        vm = server.vm_state.strip().lower()
        return _BY_VM_STATE.get(vm, vm.upper())
    return None


def opted_out(server: ServerFacts, tag: str
              ) -> Tuple[Optional[str], List[Problem]]:
    """(how it opted out, or None; problems)."""
    if tag in tuple(server.tags or ()):
        return "has the tag %s" % tag, []
    meta = server.metadata or {}
    if tag not in meta:
        return None, []
    raw = meta[tag]
    verdict = parse_bool(raw)
    if verdict is False:
        return None, []
    if verdict is True:
        return "has metadata %s=%s" % (tag, str(raw).strip()), []
    return "has metadata %s=%r (neither true nor false: counted as " \
        "true)" % (tag, raw), [Problem(
            ERROR, SERVER, server.id, server.name, tag, str(raw),
            "%s: metadata %s=%r is neither true nor false; the server is "
            "kept on its host" % (label(server), tag, raw))]


def blockers(server: ServerFacts, which: Tuple[str, ...]) -> List[str]:
    """Why Nova would not live-migrate ``server``, for each of ``which``
    (PCI, VGPU, ACCELERATOR, VTPM) that applies: 'flavor gpu.big asks
    for a vGPU (resources:VGPU=1)'."""
    out = []
    specs, fl = {}, "its flavor"
    if server.flavor is not None:
        specs = dict(server.flavor.extra_specs or {})
        fl = short("flavor", server.flavor.name, server.flavor.id)
    props, im = {}, "its image"
    if server.image is not None:
        props = dict(server.image.properties or {})
        im = short("image", server.image.name, server.image.id)

    def spec(key: str, what: str) -> None:
        out.append("%s asks for %s (%s=%s)" % (fl, what, key, specs[key]))

    for key in sorted(specs):
        value = specs[key]
        if value is None or str(value).strip() in ("", "0"):
            continue
        if PCI in which and key == "pci_passthrough:alias":
            spec(key, "PCI passthrough")
        elif VGPU in which and _VGPU.match(key):
            spec(key, "a vGPU")
        elif ACCELERATOR in which and key == "accel:device_profile":
            spec(key, "an accelerator")
        elif VTPM in which and key in ("hw:tpm_version", "hw:tpm_model"):
            spec(key, "a vTPM")
    if VTPM in which:
        for key in ("hw_tpm_version", "hw_tpm_model"):
            if props.get(key) not in (None, ""):
                out.append("%s asks for a vTPM (%s=%s)" % (im, key,
                                                          props[key]))
                break
    return out


def need_for(server: ServerFacts) -> Tuple[Optional[Need], Optional[Problem]]:
    """The server's size as the capacity preflight counts it (through
    :func:`~instanceha.policy.capacity_need.need_of`)."""
    body = {"id": server.id, "name": server.name,
            "flavor": None if server.flavor is None
            else flavor_body(server.flavor),
            "image": server.image.id if server.image is not None else ""}
    return need_of(body)


def classify(server: ServerFacts, s: Settings = Settings()) -> ServerVerdict:
    """How ``server`` leaves the host: the rules of the module
    docstring."""
    who = label(server)
    prio = order.priority_of(server, s.priority)
    problems: List[Problem] = list(prio.problems)
    state = state_of(server)
    task = (server.task_state or "").strip().lower() or None
    how, reason, refusal, kind = LEAVE, "", None, ""
    out, out_problems = opted_out(server, s.opt_out_tag)
    problems.extend(out_problems)
    if out is not None:
        reason = "%s %s: kept on its host" % (who, out)
        refusal, kind = "%s %s (the drain's opt-out)" % (who, out), OPT_OUT
    elif state == "ERROR":
        how = DEFER
        reason = "%s is in ERROR: Nova moves it neither live nor cold; " \
            "deferred to the end and reported" % who
    elif state in _MOVING_STATUSES or task in _MOVING_TASKS:
        how = WAIT
        reason = "%s is already %s (%s, task %s): waited for" % (
            who, "resizing" if "RESIZE" in (state or "") or (
                task or "").startswith("resize") else "migrating",
            state or "state unknown", task or "none")
    elif state == "VERIFY_RESIZE":
        how = CONFIRM
        reason = "%s is in VERIFY_RESIZE: its resize or migration is " \
            "confirmed" % who
    elif task is not None:
        how = WAIT
        reason = "%s has task %s in progress (%s): waited for" % (
            who, task, state or "state unknown")
    elif state in ("ACTIVE", "PAUSED"):
        why = blockers(server, s.live_blockers)
        if why:
            reason = "%s is %s but cannot be live-migrated: %s" % (
                who, state, "; ".join(why))
            refusal, kind = reason, NOT_LIVE
        else:
            how, reason = LIVE, "%s is %s: live-migrated" % (who, state)
    elif state == "SHUTOFF":
        if s.shutoff == MIGRATE:
            how = COLD
            reason = "%s is SHUTOFF: cold-migrated and confirmed (it " \
                "stays stopped)" % who
        else:
            reason = "%s is SHUTOFF: left on the host (shutoff = leave)" \
                % who
    else:
        reason = "%s is %s: Nova moves it neither live nor cold" % (
            who, state or "in an unknown state")
        refusal, kind = reason, STATE
    need = None
    if how in (LIVE, COLD, CONFIRM):
        need, problem = need_for(server)
        if problem is not None:
            problems.append(problem)
    return ServerVerdict(server.id, server.name, how, reason, refusal, kind,
                         prio.value, server.zone, need, tuple(problems))
