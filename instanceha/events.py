"""Typed events: the only thing sources, action results and operators hand to
the engine.

A source (reconciler, notification listener, fence_kdump socket, operator
command) turns what it saw into an :class:`Event` for one host key. Time
always arrives inside the event (``at``, seconds since the epoch, read from
the source's injected clock); the state machine never reads a clock.

The host key is the compute service's UUID as Nova reports it from
microversion 2.53 on; ``name`` is the service's ``host`` field, kept for
logs and for drivers that address hosts by name.
"""

import dataclasses
import enum
from typing import Any, Mapping


class EventKind(str, enum.Enum):
    # Observations of the compute service (reconciler, notifications).
    HEARTBEAT_OK = "heartbeat_ok"          # nova-compute is reporting in
    HEARTBEAT_LOST = "heartbeat_lost"      # reported down, or updated_at too old
    FORCED_DOWN = "forced_down"            # another actor forced the service down
    TICK = "tick"                          # time passed; carries cluster_ok
    KDUMP = "kdump"                        # fence_kdump message from the host
    # A read of the host's BMC (not our action): its power state now.
    POWER_OFF = "power_off"
    POWER_ON = "power_on"
    # A compute host became schedulable (enabled and up): a host waiting
    # for capacity may try again now rather than at its back-off time.
    CAPACITY = "capacity"
    # Results of actions (engine workers).
    FENCE_OK = "fence_ok"
    FENCE_FAILED = "fence_failed"
    ISOLATE_OK = "isolate_ok"              # forced down + disabled in Nova
    ISOLATE_FAILED = "isolate_failed"
    EVACUATE_OK = "evacuate_ok"            # every evacuable server rebuilt elsewhere
    EVACUATE_NO_CAPACITY = "evacuate_no_capacity"
    EVACUATE_FAILED = "evacuate_failed"
    # The evacuation pass found the host not dead now (the BMC reports On
    # or did not answer, or Nova recorded a heartbeat since the fence):
    # nothing was sent; the host is watched again.
    REPROOF_FAILED = "reproof_failed"
    CLEANUP_CONFIRMED = "cleanup_confirmed"  # migrations completed; host put back
    CLEANUP_PENDING = "cleanup_pending"
    # Operator commands.
    OPERATOR_SUSPEND = "operator_suspend"
    OPERATOR_MAINTENANCE = "operator_maintenance"
    OPERATOR_RESUME = "operator_resume"


@dataclasses.dataclass(frozen=True)
class Event:
    kind: EventKind
    host: str                 # compute service UUID
    at: float                 # seconds since the epoch, from the source's clock
    name: str = ""            # compute host name (service.host)
    reason: str = ""          # human-readable: why the source says this
    source: str = ""          # reconciler | notification | kdump | operator | action
    cluster_ok: bool = True   # TICK only: False when the suspect threshold is exceeded
    detail: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def log_fields(self):
        # Not "event": structlog takes that key for the log line's name.
        return {"kind": self.kind.value, "host": self.name or self.host,
                "host_id": self.host, "source": self.source,
                "reason": self.reason}
