"""What Nova's news about one server means for instance repair; pure.

:class:`ServerNews` holds the fields of one instance notification that
tell a guest that stopped by itself from a user's stop (see
``doc/instance-repair-research.md``); :func:`classify_notification` turns
it into a :class:`Verdict`, :func:`classify_actions` does the same for the
periodic sweep from a server's record and its instance actions
(``os-instance-actions``). :func:`news_from_notification` reads a
versioned notification's payload into a :class:`ServerNews`.
"""

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

# -- verdicts ----------------------------------------------------------------
#: the guest crashed (power_state crashed); Nova stopped the server
CRASHED = "crashed"
#: the guest went off by itself; Nova's power-state sync stopped the server
STOPPED_BY_ITSELF = "stopped_by_itself"
#: the server fell into ERROR
ERROR = "error"
#: a user stopped it: never repaired
USER_STOP = "user_stop"
DELETED = "deleted"
SHELVED = "shelved"
RESIZING = "resizing"
MIGRATING = "migrating"
#: a rebuild or an evacuation (the host path's) is under way or failed
REBUILDING = "rebuilding"
RESCUED = "rescued"
#: the hypervisor paused a running guest (I/O error, watchdog): Nova
#: keeps vm_state active and ignores it (manager.py _sync_instance_power_
#: state); reported, not repaired (it may resume by itself)
HYPERVISOR_PAUSED = "hypervisor_paused"

#: verdicts that call for a repair
REPAIRABLE = frozenset([CRASHED, STOPPED_BY_ITSELF, ERROR])
#: verdicts that leave the server to its owner (or to the host path): a
#: pending repair of the server is dropped
LEFT_ALONE = frozenset([USER_STOP, DELETED, SHELVED, RESIZING, MIGRATING,
                        REBUILDING, RESCUED])
#: reported only
REPORTED = frozenset([HYPERVISOR_PAUSED])

#: initiator of a notification whose payload and message context did not
#: say (payloads before InstancePayload 1.7, legacy payloads): no stop is
#: classified on such news (neither repaired nor taken for a user's); the
#: sweep decides
UNKNOWN_INITIATOR = "(unknown)"

#: power_state names by Nova's index (nova/objects/fields.py
#: InstancePowerState.ALL), for the API's OS-EXT-STS:power_state
POWER_STATES = {0: "pending", 1: "running", 3: "paused", 4: "shutdown",
                6: "crashed", 7: "suspended"}

_OFF = frozenset(["shutdown", "crashed"])
_DELETE_TASKS = frozenset(["deleting", "soft-deleting"])
_RESIZE_TASKS = frozenset(["resize_prep", "resize_migrating",
                           "resize_migrated", "resize_finish",
                           "resize_reverting", "resize_confirming"])
_REBUILD_TASKS = frozenset(["rebuilding", "rebuild_block_device_mapping",
                            "rebuild_spawning"])
_RESCUE_TASKS = frozenset(["rescuing", "unrescuing"])

#: instance.<action>.* notifications that say who owns the server now
_ACTIONS_LEFT_ALONE = {
    "delete": DELETED, "soft_delete": DELETED, "shutdown": DELETED,
    "shelve": SHELVED, "shelve_offload": SHELVED, "unshelve": SHELVED,
    "resize": RESIZING, "resize_prep": RESIZING, "resize_finish": RESIZING,
    "resize_confirm": RESIZING, "resize_revert": RESIZING,
    "live_migration_pre": MIGRATING, "live_migration_post": MIGRATING,
    "live_migration_post_dest": MIGRATING,
    "live_migration_rollback": MIGRATING,
    "live_migration_rollback_dest": MIGRATING,
    "live_migration_abort": MIGRATING,
    "live_migration_force_complete": MIGRATING,
    "rebuild": REBUILDING, "rebuild_scheduled": REBUILDING,
    "evacuate": REBUILDING,
    "rescue": RESCUED, "unrescue": RESCUED,
}
#: compute_task.<method>.error (the conductor's)
_TASKS_LEFT_ALONE = {"rebuild_server": REBUILDING,
                     "migrate_server": MIGRATING}
#: os-instance-actions names (nova/compute/instance_actions.py) that
#: leave a server in ERROR to their owner
_RECORDS_LEFT_ALONE = {
    "delete": DELETED, "shelve": SHELVED, "shelveOffload": SHELVED,
    "unshelve": SHELVED, "resize": RESIZING, "migrate": RESIZING,
    "confirmResize": RESIZING, "revertResize": RESIZING,
    "live-migration": MIGRATING, "live_migration_cancel": MIGRATING,
    "live_migration_force_complete": MIGRATING,
    "rebuild": REBUILDING, "evacuate": REBUILDING,
    "rescue": RESCUED, "unrescue": RESCUED,
}


@dataclasses.dataclass(frozen=True)
class ServerNews:
    """The fields of one Nova instance notification that matter here."""
    #: event type without the legacy ``compute.`` prefix:
    #: instance.power_off.start, instance.update, compute_task.X.error...
    event: str
    #: payload ``uuid`` (``instance_uuid`` for compute_task.*)
    server_id: str
    #: vm_state now: payload ``state`` (instance.update:
    #: ``state_update.state``)
    state: Optional[str] = None
    #: task_state now: payload ``task_state`` (instance.update:
    #: ``state_update.new_task_state``)
    task_state: Optional[str] = None
    #: power_state name (running, shutdown, crashed, paused, suspended,
    #: pending): at power_off.start already ``shutdown``/``crashed`` when
    #: Nova's sync stops a guest that went off by itself
    power_state: Optional[str] = None
    #: instance.update only: ``state_update.old_state`` (active -> stopped
    #: is a stop; building -> error a failed build)
    old_state: Optional[str] = None
    #: instance.update only: ``state_update.old_task_state`` (the
    #: operation that failed into ERROR)
    old_task_state: Optional[str] = None
    #: ``action_initiator_user`` / ``_project``: the request context's
    #: user and project; both None for Nova's own (periodic task,
    #: hypervisor lifecycle event) context
    initiator_user: Optional[str] = None
    initiator_project: Optional[str] = None
    #: the server's host (payload ``host``): the host path owns a lost
    #: host's servers
    host: Optional[str] = None
    #: ``fault.exception`` (``reason.exception`` for compute_task.*)
    fault: Optional[str] = None

    @property
    def by_nova(self) -> bool:
        """Nova's own context did it: no user, no project."""
        return self.initiator_user is None and self.initiator_project is None

    @property
    def who(self) -> str:
        if self.by_nova:
            return "Nova itself (no user in the request context)"
        return "user %s of project %s" % (self.initiator_user or "?",
                                          self.initiator_project or "?")


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: str
    server_id: str
    reason: str
    #: a user's request context did it (as far as the news says)
    by_user: bool = False
    host: Optional[str] = None

    @property
    def repair(self) -> bool:
        """The server calls for a repair."""
        return self.kind in REPAIRABLE

    @property
    def left_alone(self) -> bool:
        """Its owner (or the host path) has it: drop a pending repair."""
        return self.kind in LEFT_ALONE


def _verdict(news: ServerNews, kind: str, why: str) -> Verdict:
    return Verdict(kind, news.server_id, "%s: %s" % (news.event, why),
                   by_user=not news.by_nova, host=news.host)


def _parts(event: str) -> Tuple[str, str, str]:
    """('instance', 'power_off', 'start') of an event type; the phase is
    '' for phaseless events (instance.update, instance.evacuate)."""
    pieces = event.split(".")
    if len(pieces) == 2:
        return pieces[0], pieces[1], ""
    if len(pieces) >= 3:
        return pieces[0], ".".join(pieces[1:-1]), pieces[-1]
    return event, "", ""


def classify_notification(news: ServerNews) -> Optional[Verdict]:
    """What ``news`` says about its server for instance repair: a
    :class:`Verdict`, or None when it says nothing of use (the server is
    fine, or the news alone cannot tell: the sweep will)."""
    obj, action, phase = _parts(news.event)
    if obj == "compute_task":
        return _compute_task(news, action, phase)
    if obj != "instance":
        return None
    if action == "update":
        return _update(news)
    if action == "power_off":
        return _power_off(news, phase)
    left = _ACTIONS_LEFT_ALONE.get(action)
    if left is not None:
        return _verdict(news, left, "%s in progress or done" % action)
    if phase == "error" and action != "create" and news.state == "error":
        return _verdict(news, ERROR, "%s failed and left the server in "
                        "ERROR%s" % (action, _fault(news)))
    return None


def _fault(news: ServerNews) -> str:
    return " (%s)" % news.fault if news.fault else ""


def _compute_task(news: ServerNews, method: str, phase: str
                  ) -> Optional[Verdict]:
    if phase != "error" or method == "build_instances":
        return None
    left = _TASKS_LEFT_ALONE.get(method)
    if left is not None:
        return _verdict(news, left, "the conductor's %s failed%s" % (
            method, _fault(news)))
    if news.state == "error":
        return _verdict(news, ERROR, "the conductor's %s failed and left "
                        "the server in ERROR%s" % (method, _fault(news)))
    return None


def _power_off(news: ServerNews, phase: str) -> Optional[Verdict]:
    if news.initiator_user == UNKNOWN_INITIATOR:
        return None          # who stopped it is unknown: the sweep decides
    if not news.by_nova:
        return _verdict(news, USER_STOP, "stopped by %s" % news.who)
    if phase != "start":
        # At .end every stop looks the same (stopped, power shutdown): the
        # vm_state before it is gone, and Nova also stops on its own a
        # server a user stopped whose guest runs (sync of a stopped
        # server, nova-compute's restart retrying a stop).
        return None
    if news.state in ("active", "paused") and news.power_state == "crashed":
        return _verdict(news, CRASHED, "the guest crashed (power_state "
                        "crashed while %s); Nova's power-state sync is "
                        "stopping the server" % news.state)
    if news.state in ("active", "paused") and news.power_state == "shutdown":
        return _verdict(news, STOPPED_BY_ITSELF, "the guest went off by "
                        "itself (power_state shutdown while %s); Nova's "
                        "power-state sync is stopping the server"
                        % news.state)
    if news.state == "active" and news.power_state == "suspended":
        return _verdict(news, STOPPED_BY_ITSELF, "the guest suspended "
                        "itself (power_state suspended while active); "
                        "Nova's power-state sync is stopping the server")
    # A stopped server whose guest runs, stopped again by Nova: a user's
    # stop enforced; or a stop retried at nova-compute's start.
    return None


def _update(news: ServerNews) -> Optional[Verdict]:
    state, task, old_task = news.state, news.task_state, news.old_task_state
    if (state in ("deleted", "soft-delete") or task in _DELETE_TASKS
            or (state == "error" and old_task in _DELETE_TASKS)):
        return _verdict(news, DELETED, "being deleted")
    if (state in ("shelved", "shelved_offloaded")
            or (task or "").startswith("shelving") or task == "unshelving"
            or (state == "error" and (old_task or "").startswith(
                "shelving"))):
        return _verdict(news, SHELVED, "being shelved or shelved")
    if state == "error":
        return _into_error(news)
    if task in _RESIZE_TASKS or state == "resized":
        return _verdict(news, RESIZING, "being resized or cold-migrated")
    if task == "migrating":
        return _verdict(news, MIGRATING, "being live-migrated")
    if task in _REBUILD_TASKS:
        return _verdict(news, REBUILDING, "being rebuilt or evacuated")
    if state == "rescued" or task in _RESCUE_TASKS:
        return _verdict(news, RESCUED, "in rescue")
    if news.initiator_user == UNKNOWN_INITIATOR:
        return None          # who acted is unknown: the sweep decides
    if not news.by_nova:
        if task == "powering-off" or (
                state == "stopped" and news.old_state not in (None,
                                                              "stopped")):
            return _verdict(news, USER_STOP, "stopped by %s" % news.who)
        return None
    return _update_by_nova(news)


def _into_error(news: ServerNews) -> Optional[Verdict]:
    old_state, old_task = news.old_state, news.old_task_state
    if old_state == "building":
        return None          # a failed build never ran: not a repair
    if old_state == "error":
        return None          # already in ERROR: no transition
    if old_task in _RESIZE_TASKS:
        return _verdict(news, RESIZING, "a resize or cold migration failed "
                        "into ERROR (task %s)" % old_task)
    if old_task == "migrating":
        return _verdict(news, MIGRATING, "a live migration failed into "
                        "ERROR")
    if old_task in _REBUILD_TASKS:
        return _verdict(news, REBUILDING, "a rebuild or evacuation failed "
                        "into ERROR (task %s)" % old_task)
    if old_task in _RESCUE_TASKS:
        return _verdict(news, RESCUED, "a rescue failed into ERROR")
    how = ("while %s" % old_task) if old_task else (
        "set by %s" % news.who)
    return _verdict(news, ERROR, "the server went from %s to ERROR, %s%s"
                    % (old_state or "?", how, _fault(news)))


def _update_by_nova(news: ServerNews) -> Optional[Verdict]:
    state, task, power = news.state, news.task_state, news.power_state
    if state == "stopped" and news.old_state in ("active", "paused"):
        if power == "crashed":
            return _verdict(news, CRASHED, "the guest crashed; Nova stopped "
                            "the server (%s -> stopped)" % news.old_state)
        return _verdict(news, STOPPED_BY_ITSELF, "the guest went off by "
                        "itself; Nova stopped the server (%s -> stopped)"
                        % news.old_state)
    if state in ("active", "paused") and task in (None, "powering-off"):
        if power == "crashed":
            return _verdict(news, CRASHED, "the guest crashed (power_state "
                            "crashed while %s)" % state)
        if power == "shutdown":
            return _verdict(news, STOPPED_BY_ITSELF, "the guest went off "
                            "by itself (power_state shutdown while %s)"
                            % state)
        if state == "active" and power == "suspended":
            return _verdict(news, STOPPED_BY_ITSELF, "the guest suspended "
                            "itself (power_state suspended while active)")
        if state == "active" and power == "paused" and task is None:
            return _verdict(news, HYPERVISOR_PAUSED, "the hypervisor paused "
                            "the guest (power_state paused while active); "
                            "Nova leaves it so")
    return None


# -- the sweep ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ActionRecord:
    """One instance action (``os-instance-actions``)."""
    action: str                      # stop, start, reboot, resetState...
    user_id: Optional[str] = None    # None: Nova's own context
    project_id: Optional[str] = None
    request_id: Optional[str] = None
    start_time: Optional[float] = None

    @property
    def by_nova(self) -> bool:
        return self.user_id is None and self.project_id is None


def power_state_name(value: Union[int, str, None]) -> Optional[str]:
    """Nova's power state (the API's integer, or a notification's name) by
    name; None when unknown."""
    if value is None:
        return None
    if isinstance(value, int):
        return POWER_STATES.get(value)
    text = str(value).strip().lower()
    if text.isdigit():
        return POWER_STATES.get(int(text))
    return text or None


def classify_actions(server_id: str, vm_state: Optional[str],
                     task_state: Optional[str],
                     power_state: Union[int, str, None],
                     actions: Sequence[ActionRecord],
                     host: Optional[str] = None) -> Optional[Verdict]:
    """The sweep's verdict on one server from its record (vm_state,
    task_state, power_state as the API gives them) and its instance
    actions, **newest first** as Nova lists them. None: nothing to do, or
    nothing certain (the next sweep looks again)."""
    def verdict(kind: str, why: str, by_user: bool) -> Verdict:
        return Verdict(kind, server_id, "sweep: " + why, by_user=by_user,
                       host=host)

    if task_state is not None:
        return None                      # Nova is busy with it
    power = power_state_name(power_state)
    newest = actions[0] if actions else None
    if vm_state == "stopped":
        if newest is None or newest.action != "stop":
            return None                  # stopped by something else
        if not newest.by_nova:
            return verdict(USER_STOP, "stopped by user %s" % (
                newest.user_id or "?"), True)
        by_user = next((a for a in actions if not a.by_nova), None)
        if by_user is None:
            return None                  # no user's action left to compare
        if by_user.action == "stop":
            return verdict(USER_STOP, "stopped by user %s; Nova's later "
                           "stop enforced it" % (by_user.user_id or "?"),
                           True)
        if power == "crashed":
            return verdict(CRASHED, "the guest crashed and Nova stopped the "
                           "server (last user action: %s)" % by_user.action,
                           False)
        return verdict(STOPPED_BY_ITSELF, "Nova stopped the server, its "
                       "guest having gone off by itself (last user action: "
                       "%s)" % by_user.action, False)
    if vm_state == "error":
        if newest is not None:
            if newest.action == "create":
                return None              # a failed build never ran
            left = _RECORDS_LEFT_ALONE.get(newest.action)
            if left is not None:
                return verdict(left, "in ERROR after %s" % newest.action,
                               not newest.by_nova)
        return verdict(ERROR, "in ERROR%s" % (
            " after %s" % newest.action if newest is not None else ""),
            newest is not None and not newest.by_nova)
    if vm_state == "active" and power == "paused":
        return verdict(HYPERVISOR_PAUSED, "the hypervisor paused the guest "
                       "(power_state paused while active)", False)
    # active with the guest off: Nova's next sync stops it, and the next
    # sweep sees it stopped.
    return None


# -- reading a notification --------------------------------------------------

def _data(obj: Any) -> Mapping[str, Any]:
    """The fields of a versioned object primitive (or a plain dict)."""
    if isinstance(obj, Mapping):
        inner = obj.get("nova_object.data")
        return inner if isinstance(inner, Mapping) else obj
    return {}


def _text(data: Mapping[str, Any], key: str) -> Optional[str]:
    value = data.get(key)
    return value if isinstance(value, str) else None


def news_from_notification(event_type: str, payload: Any,
                           context: Optional[Mapping[str, Any]] = None
                           ) -> ServerNews:
    """A :class:`ServerNews` from a versioned notification's event type
    and payload (``context``: the message context, read only for its
    ``user_id``/``project_id`` when the payload has no initiator; it also
    holds the requester's token: never log it). A legacy payload is read
    as far as it goes (it has no power_state, and no initiator but the
    context's). Raises ValueError when the payload names no server."""
    event = event_type[len("compute."):] if event_type.startswith(
        "compute.instance.") else event_type
    data = _data(payload)
    server_id = (_text(data, "uuid") or _text(data, "instance_uuid")
                 or _text(data, "instance_id"))
    if not server_id:
        raise ValueError("%s: the payload names no server" % event_type)
    state, task = _text(data, "state"), _text(data, "task_state")
    old_state = old_task = None
    update = data.get("state_update")
    if update is not None:
        u = _data(update)
        state = _text(u, "state")
        old_state = _text(u, "old_state")
        task = _text(u, "new_task_state")
        old_task = _text(u, "old_task_state")
    elif "old_state" in data:
        # A legacy (unversioned) compute.instance.update: flat fields.
        old_state = _text(data, "old_state")
        task = _text(data, "new_task_state")
        old_task = _text(data, "old_task_state")
    if "action_initiator_user" in data or "action_initiator_project" in data:
        user = _text(data, "action_initiator_user")
        project = _text(data, "action_initiator_project")
    elif context is not None:
        user = _text(context, "user_id")
        project = _text(context, "project_id")
    else:
        user, project = UNKNOWN_INITIATOR, None
    fault = data.get("fault") or data.get("reason")
    fault_name = _text(_data(fault), "exception") if fault else None
    power = data.get("power_state")
    return ServerNews(
        event=event, server_id=server_id, state=state, task_state=task,
        power_state=power_state_name(power) if isinstance(
            power, (int, str)) else None,
        old_state=old_state, old_task_state=old_task,
        initiator_user=user, initiator_project=project,
        host=_text(data, "host"), fault=fault_name)
