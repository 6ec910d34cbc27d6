"""Power state across an evacuation, pure: which servers of a lost host are
evacuated, at which compute microversion, and whether instanceha must stop
a server once Nova has rebuilt it. No I/O. See doc/recovery-policy.md.

What Nova 34 does (read in its source, checked on the real-Nova bed):

* ``compute/api.py`` ``API.evacuate`` accepts only vm_state ``active``,
  ``stopped`` and ``error`` (``check_instance_state``); any other state is
  answered 409. It has no ``check_instance_lock``: a locked server is
  evacuated like any other.
* ``compute/manager.py`` ``_do_rebuild_instance``: the server is spawned on
  its destination and comes up ACTIVE; when its vm_state was ``stopped``
  Nova powers it off again right away ("bringing vm to original state"),
  at *every* microversion. So a stopped server arrives SHUTOFF at 2.94
  already (the guest does run briefly between spawn and that power-off,
  at 2.95 too: nothing the API can avoid).
* ``api/openstack/compute/evacuate.py``: from 2.95 the API asks for
  ``target_state = stopped`` for every server, so an ACTIVE server
  arrives SHUTOFF too. The compute ignores the target state for a server
  in ``error``, which arrives ACTIVE at every microversion. 2.95 is also
  refused (HTTP 400) while any nova-compute is older than service
  version 62, i.e. during a rolling upgrade.

Hence instanceha evacuates every server at the configured
``[evacuation] microversion`` (2.94 by default: every server keeps its
power state). Using 2.95 for stopped servers would change nothing for
them and could fail mid-upgrade. The one server Nova starts behind its
owner's back is one in ``error`` whose power was off: a stopped server on
a host that died, whose first evacuation found no valid host (the
conductor then sets vm_state ``error`` and leaves power_state SHUTDOWN),
or one reset to error. Such a server is stopped once it has arrived (it is
ACTIVE with no task on its new host then, which ``os-stop`` needs).
"""

import dataclasses
import re
from typing import Optional, Protocol, Sequence, Tuple

#: vm_states Nova's evacuate accepts (compute/api.py check_instance_state).
EVACUABLE_VM_STATES = frozenset({"active", "stopped", "error"})
#: From this microversion Nova stops every evacuated server (error aside).
STOP_ALL_MICROVERSION = (2, 95)
DEFAULT_MICROVERSION = (2, 94)

#: Nova's power_state values (nova/compute/power_state.py).
NOSTATE, RUNNING, PAUSED, SHUTDOWN, CRASHED, SUSPENDED = 0, 1, 3, 4, 6, 7

#: vm_state from the API status, when the vm_state is not shown. Only the
#: statuses that name one vm_state whatever the task state.
_FROM_STATUS = {"ACTIVE": "active", "SHUTOFF": "stopped", "ERROR": "error",
                "PAUSED": "paused", "SUSPENDED": "suspended",
                "SHELVED": "shelved",
                "SHELVED_OFFLOADED": "shelved_offloaded",
                "RESCUE": "rescued", "VERIFY_RESIZE": "resized",
                "BUILD": "building", "SOFT_DELETED": "soft-delete"}

#: Why a server in each non-evacuable vm_state is left where it is.
_NOT_EVACUABLE = {
    "paused": "paused by its owner; its memory was lost with the host",
    "suspended": "suspended by its owner; its saved state is on the lost "
                 "host's disk",
    "shelved": "shelved by its owner",
    "shelved_offloaded": "shelved and offloaded: it runs on no host",
    "rescued": "in rescue mode",
    "resized": "waiting for its resize to be confirmed or reverted",
    "building": "still being built",
    "soft-delete": "soft-deleted by its owner",
    "deleted": "deleted",
}


#: a compute API microversion: (major, minor)
Microversion = Tuple[int, int]


def parse_microversion(text: object) -> Microversion:
    """'2.94' -> (2, 94); ValueError otherwise."""
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(text))
    if not match:
        raise ValueError("not a microversion: %r" % (text,))
    return int(match.group(1)), int(match.group(2))


def _fmt(mv: Tuple[int, ...]) -> str:
    return "%d.%d" % mv


@dataclasses.dataclass(frozen=True)
class Plan:
    """What happens to one server of a lost host."""
    evacuate: bool
    #: the microversion of the evacuate request (None when not evacuated)
    microversion: Optional[Tuple[int, ...]]
    #: the vm_state Nova leaves it in on its destination: "active" or
    #: "stopped" (None when not evacuated)
    arrives: Optional[str]
    #: it was powered off when its host was lost and must end powered off
    keep_off: bool
    #: Nova will start it: instanceha stops it once it has arrived
    stop_after: bool
    reason: str


def vm_state_of(vm_state: Optional[str], status: Optional[str] = None
                ) -> Optional[str]:
    """The server's vm_state, from its API status when not shown."""
    if vm_state:
        return str(vm_state).lower()
    return _FROM_STATUS.get(str(status or "").upper())


def plan(vm_state: Optional[str], power_state: Optional[int] = None,
         microversion: Sequence[int] = DEFAULT_MICROVERSION,
         status: Optional[str] = None) -> Plan:
    """The :class:`Plan` for a server read before its evacuation.

    ``vm_state``/``status``/``power_state`` as Nova shows them (vm_state
    ``None`` falls back to the status); ``microversion``: the configured
    ``[evacuation] microversion`` as (major, minor)."""
    state = vm_state_of(vm_state, status)
    mv = tuple(microversion)
    if state not in EVACUABLE_VM_STATES:
        if state is None:
            why = "its vm_state is unknown (status %s)" % (status or "none")
        else:
            why = "vm_state %s: %s" % (state, _NOT_EVACUABLE.get(
                state, "not a state Nova evacuates"))
        return Plan(False, None, None, False, False,
                    "not evacuable, %s; Nova evacuates only active, stopped "
                    "or error servers (an operator may reset its state, "
                    "e.g. 'openstack server set --state active', and "
                    "evacuate it by hand)" % why)
    if state == "stopped":
        return Plan(True, mv, "stopped", True, False,
                    "stopped by its owner: Nova powers it off again on its "
                    "new host (microversion %s)" % _fmt(mv))
    if state == "error":
        if power_state == SHUTDOWN:
            return Plan(True, mv, "active", True, True,
                        "in error with its power off (power_state %d): "
                        "Nova starts a server evacuated from error, so "
                        "instanceha stops it once it has arrived"
                        % SHUTDOWN)
        return Plan(True, mv, "active", False, False,
                    "in error: Nova rebuilds it and starts it (power_state "
                    "%s before)" % ("unknown" if power_state is None
                                    else power_state))
    if mv >= STOP_ALL_MICROVERSION:
        return Plan(True, mv, "stopped", False, False,
                    "active, evacuated at microversion %s: from %s Nova "
                    "stops every evacuated server ([evacuation] "
                    "microversion)" % (_fmt(mv), _fmt(STOP_ALL_MICROVERSION)))
    return Plan(True, mv, "active", False, False,
                "active: it keeps running (microversion %s)" % _fmt(mv))


class ServerState(Protocol):
    """What :func:`stop_reason` reads of a server: the compute driver's
    Server or a ServerFacts."""

    @property
    def host(self) -> Optional[str]: ...

    @property
    def vm_state(self) -> Optional[str]: ...

    @property
    def status(self) -> Optional[str]: ...

    @property
    def task_state(self) -> Optional[str]: ...


def stop_reason(p: Optional[Plan], server: Optional[ServerState],
                source: str) -> Optional[str]:
    """After the evacuation: why ``server`` (the record read now) must be
    stopped, or None. Only a server that was powered off (``keep_off``)
    and that Nova has started on a host other than ``source``; os-stop
    needs it ACTIVE with no task in progress. A stopped server Nova left
    SHUTOFF needs nothing."""
    if p is None or not p.keep_off or server is None:
        return None
    if server.host in (None, source):
        return None
    if vm_state_of(server.vm_state, server.status) != "active" \
            or server.task_state is not None:
        return None
    return ("was powered off when %s was lost, Nova started it on %s: %s"
            % (source, server.host, p.reason))
