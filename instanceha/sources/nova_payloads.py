"""Parse Nova notification payloads into small typed facts.

Pure functions, no I/O: the listener in :mod:`instanceha.sources.notifications`
hands every message here and turns the result into events or progress
records. Anything that does not look like the payloads Nova sends raises
:class:`PayloadError`, which the listener logs with the event type and drops.

Versioned payloads are oslo.versionedobjects primitives::

    {"nova_object.name": ..., "nova_object.version": "1.1",
     "nova_object.data": {...}}

Fields are read by name, so added fields in newer minor versions are
harmless; a payload missing a field we need is rejected rather than guessed.
Legacy (unversioned) ``compute.instance.*`` payloads are flat dicts and are
used for instance progress only.
"""

import dataclasses
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, overload

from instanceha.util import timeparse


class PayloadError(ValueError):
    """The payload is not what Nova sends for this event type."""


@dataclasses.dataclass(frozen=True)
class ServiceFacts:
    uuid: str
    host: str
    binary: str
    forced_down: bool
    disabled: bool
    disabled_reason: Optional[str]
    last_seen_up: Optional[float]     # seconds since the epoch, or None
    schema: str                       # "ServiceStatusPayload 1.1"


@dataclasses.dataclass(frozen=True)
class InstanceFacts:
    server_id: str
    event: str                        # event type, legacy prefix removed
    host: Optional[str]
    node: Optional[str]
    state: Optional[str]
    task_state: Optional[str]
    old_state: Optional[str] = None
    old_task_state: Optional[str] = None
    fault: Optional[str] = None
    publisher_host: Optional[str] = None
    schema: str = ""
    #: instance repair (issue 25): the power state's name, the request
    #: context's user and project (``action_initiator_*``, payload 1.7+)
    #: and whether the payload carried them (False: an older or legacy
    #: payload; nobody can tell who acted)
    power_state: Optional[str] = None
    initiator_user: Optional[str] = None
    initiator_project: Optional[str] = None
    has_initiator: bool = False

    def progress_facts(self) -> Dict[str, Optional[str]]:
        """Keyword arguments for ``ProgressBoard.record``."""
        facts = {"host": self.host, "state": self.state,
                 "task_state": self.task_state, "event": self.event}
        for key in ("node", "old_state", "old_task_state", "fault",
                    "publisher_host"):
            value = getattr(self, key)
            if value is not None:
                facts[key] = value
        return facts


SERVICE_EVENTS = frozenset(["service.update"])
#: A live or cold migration's steps ending: a drain's progress. The
#: destination's pre_live_migration ending is the moment the copy starts
#: (the drain's stuck clock starts when a pass sees it copying).
MOVE_EVENTS = frozenset([
    "instance.live_migration_pre.end",
    "instance.live_migration_post.end",
    "instance.live_migration_post_dest.end",
    "instance.live_migration_rollback.end",
    "instance.live_migration_abort.end",
    "instance.live_migration_force_complete.end",
    "instance.resize_finish.end", "instance.resize_confirm.end",
    "instance.resize.error",
])
INSTANCE_EVENTS = frozenset([
    "instance.evacuate", "instance.rebuild_scheduled",
    "instance.rebuild.start", "instance.rebuild.end",
    "instance.rebuild.error", "instance.update",
]) | MOVE_EVENTS
LEGACY_PREFIX = "compute."
#: instance repair's (besides instance.update and every instance.*.error)
REPAIR_EVENTS = frozenset(["instance.power_off.start",
                           "instance.power_off.end"])
#: the event type filter's patterns for them ([notifications] event_types
#: gets them while [instance_repair] enabled is on)
REPAIR_EVENT_PATTERNS = (r"^instance\.power_off\.(start|end)$",
                         r"^instance\.[a-z_]+\.error$")

# Task states Nova sets while an evacuation rebuilds a server.
REBUILD_TASK_STATES = frozenset([
    "rebuilding", "rebuild_block_device_mapping", "rebuild_spawning",
])


def unwrap(payload: Any) -> Tuple[str, str, Mapping[str, Any]]:
    """Return (name, version, data) of a versioned payload."""
    # type() is dict for everything oslo.messaging decodes; the typing
    # Mapping check (several microseconds) is left for other mappings.
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise PayloadError("payload is %s, not an object"
                           % type(payload).__name__)
    try:
        name = payload["nova_object.name"]
        version = payload["nova_object.version"]
        data = payload["nova_object.data"]
    except KeyError as exc:
        raise PayloadError("not a versioned payload: no %s" % exc) from None
    if type(data) is not dict and not isinstance(data, Mapping):
        raise PayloadError("nova_object.data is not an object")
    if not isinstance(version, str) or not version.split(".")[0].isdigit():
        raise PayloadError("bad nova_object.version %r" % (version,))
    return str(name), version, data


def parse_time(value: Any) -> Optional[float]:
    """ISO 8601 as Nova writes it (naive means UTC) -> epoch seconds."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PayloadError("time %r is not a string" % (value,))
    try:
        return timeparse.epoch(value)
    except ValueError:
        raise PayloadError("bad time %r" % (value,)) from None


@overload
def _str(data: Mapping[str, Any], key: str,
         required: Literal[True] = ...) -> str: ...


@overload
def _str(data: Mapping[str, Any], key: str,
         required: bool) -> Optional[str]: ...


def _str(data: Mapping[str, Any], key: str,
         required: bool = True) -> Optional[str]:
    value = data.get(key)
    if value is None:
        if required:
            raise PayloadError("missing %s" % key)
        return None
    if not isinstance(value, str):
        raise PayloadError("%s is %s, not a string"
                           % (key, type(value).__name__))
    return value


def _bool(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise PayloadError("%s is %r, not a boolean" % (key, value))
    return value


def parse_service(payload: Any) -> ServiceFacts:
    name, version, data = unwrap(payload)
    if name != "ServiceStatusPayload":
        raise PayloadError("service.update carries %s" % name)
    uuid = data.get("uuid")
    if not uuid:
        # ServiceStatusPayload 1.0 (before Nova 16) had no uuid: no host key.
        raise PayloadError("ServiceStatusPayload %s has no uuid" % version)
    return ServiceFacts(
        uuid=_str(data, "uuid"), host=_str(data, "host"),
        binary=_str(data, "binary"),
        forced_down=_bool(data, "forced_down"),
        disabled=_bool(data, "disabled"),
        disabled_reason=_str(data, "disabled_reason", required=False),
        last_seen_up=parse_time(data.get("last_seen_up")),
        schema="%s %s" % (name, version))


def _publisher_host(publisher_id: Any) -> Optional[str]:
    if isinstance(publisher_id, str) and ":" in publisher_id:
        return publisher_id.split(":", 1)[1] or None
    return None


def parse_instance(event_type: str, publisher_id: Any,
                   payload: Any) -> InstanceFacts:
    if event_type.startswith(LEGACY_PREFIX):
        return _parse_legacy_instance(event_type[len(LEGACY_PREFIX):],
                                      publisher_id, payload)
    name, version, data = unwrap(payload)
    if not name.startswith("Instance"):
        raise PayloadError("%s carries %s" % (event_type, name))
    old_state = old_task_state = None
    task_state = _str(data, "task_state", required=False)
    update = data.get("state_update")
    if update is not None:
        _, _, update = unwrap(update)
        old_state = _str(update, "old_state", required=False)
        old_task_state = _str(update, "old_task_state", required=False)
        task_state = _str(update, "new_task_state", required=False)
    fault = data.get("fault")
    if fault is not None:
        _, _, fault_data = unwrap(fault)
        fault = "%s: %s" % (fault_data.get("exception"),
                            fault_data.get("exception_message"))
    power = data.get("power_state")
    return InstanceFacts(
        server_id=_str(data, "uuid"), event=event_type,
        host=_str(data, "host", required=False),
        node=_str(data, "node", required=False),
        state=_str(data, "state", required=False),
        task_state=task_state, old_state=old_state,
        old_task_state=old_task_state, fault=fault,
        publisher_host=_publisher_host(publisher_id),
        schema="%s %s" % (name, version),
        power_state=power if isinstance(power, str) else None,
        initiator_user=_str(data, "action_initiator_user", required=False),
        initiator_project=_str(data, "action_initiator_project",
                               required=False),
        has_initiator=("action_initiator_user" in data
                       or "action_initiator_project" in data))


def _parse_legacy_instance(event_type: str, publisher_id: Any,
                           payload: Any) -> InstanceFacts:
    if not isinstance(payload, Mapping):
        raise PayloadError("payload is %s, not an object"
                           % type(payload).__name__)
    task_state = payload.get("new_task_state", payload.get("task_state"))
    if task_state is not None and not isinstance(task_state, str):
        raise PayloadError("task_state is not a string")
    fault = payload.get("exception") or payload.get("message")
    return InstanceFacts(
        server_id=_str(payload, "instance_id"), event=event_type,
        host=_str(payload, "host", required=False),
        node=_str(payload, "node", required=False),
        state=_str(payload, "state", required=False),
        task_state=task_state,
        old_state=_str(payload, "old_state", required=False),
        old_task_state=_str(payload, "old_task_state", required=False),
        fault=str(fault) if fault and event_type.endswith(".error") else None,
        publisher_host=_publisher_host(publisher_id), schema="legacy")


def is_repair_event(event_type: str) -> bool:
    """Instance repair's news besides instance.update: a power-off
    (Nova's sync stopping a guest that went off by itself) and an
    action's ``.error`` (issue 25)."""
    return event_type in REPAIR_EVENTS or (
        event_type.startswith("instance.") and event_type.endswith(".error"))


def is_rebuild_related(facts: InstanceFacts) -> bool:
    """instance.update is sent for every state change of every server;
    only those of a rebuild are evacuation progress."""
    if facts.event in MOVE_EVENTS:
        return False
    return (facts.event != "instance.update"
            or facts.task_state in REBUILD_TASK_STATES
            or facts.old_task_state in REBUILD_TASK_STATES)


def is_move(facts: InstanceFacts) -> bool:
    """A live or cold migration step ended (a drain's progress)."""
    return facts.event in MOVE_EVENTS


def describe(value: Any, limit: int = 200) -> str:
    """Short repr of a bad payload for a log line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
