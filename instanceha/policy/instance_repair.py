"""Instance repair, pure: a server that breaks on a healthy host comes back,
in order of risk. Data in, decision out; no I/O, no clock.

After Senlin's health policy (lifecycle events, an ordered list of recovery
actions) and Ganeti's auto-repair (repair types by risk, nearest scope
wins, result markers); the Nova facts behind it are in
``doc/instance-repair-research.md``.

**What broke** (:func:`classify_notification`, :func:`classify_actions`
for the sweep): a :class:`Verdict` per server.

* ``crashed``, ``stopped_by_itself``, ``error``: repaired;
* ``user_stop``: a user's stop, **never undone**; ``deleted``,
  ``shelved``, ``resizing``, ``migrating``, ``rebuilding``, ``rescued``:
  left to their owner (a pending repair is dropped);
* ``hypervisor_paused``: reported only.

The one field that tells a guest that stopped by itself from a user's stop
is the request context's user and project in the payload
(``action_initiator_user``/``_project``): null for Nova's power-state sync.

**How far** (:func:`next_action`): the ladder ``[instance_repair]
actions``, by risk, each with a timeout and a minimum uptime:

========================  ===============  ====================================
action                    needs level      Nova accepts it in vm_state
========================  ===============  ====================================
``start``                 ``restart``      stopped
``hard_reboot``           ``reboot``       active, stopped, paused, suspended,
                                           error
``cold_migrate``          ``migrate``      active, stopped (then start)
``rebuild``               ``rebuild``      active, stopped, error; only with
                                           ``allow_rebuild``
========================  ===============  ====================================

The levels extend the repair levels of :mod:`instanceha.policy.repair`
(same key, scopes, suspensions): ``none < restart < reboot < migrate <
evacuate < rebuild``, each allowing the lower ones, valid while instance
repair is on (:class:`~instanceha.policy.repair_values.Ladder`). A server
whose level is ``evacuate`` (the default) may get start, hard reboot and
cold migration; ``rebuild`` needs the level ``rebuild`` set on purpose.

**How often**: at most ``max_repairs`` actions per server per ``window``,
then ``failed`` until an operator clears it; the cloud-wide :func:`hold`
when many servers break at once.

**Host path gaps** (:func:`restart_group_of`, :func:`release`,
:func:`excluded`): restart groups, and service-owned servers left alone.
"""

# The parts live in instance_repair_*; their public names are here.
from instanceha.policy.instance_repair_groups import (  # noqa: F401
    Member, excluded, release, restart_group_of)
from instanceha.policy.instance_repair_hold import (  # noqa: F401
    Failure, Hold, hold)
from instanceha.policy.instance_repair_ladder import (  # noqa: F401
    BUSY, DISABLED, FAILED, FAILURE, IN_PROGRESS, NOT_APPLICABLE,
    NOT_PERMITTED, OUTCOMES, RUNNING, SUCCESS, SUSPENDED, TIMEOUT, Action,
    Attempt, Refusal, deadline, judge, next_action)
from instanceha.policy.instance_repair_news import (  # noqa: F401
    CRASHED, DELETED, ERROR, HYPERVISOR_PAUSED, LEFT_ALONE, MIGRATING,
    REBUILDING, REPAIRABLE, REPORTED, RESCUED, RESIZING, SHELVED,
    STOPPED_BY_ITSELF, UNKNOWN_INITIATOR, USER_STOP, ActionRecord,
    ServerNews, Verdict, classify_actions, classify_notification,
    news_from_notification, power_state_name)
from instanceha.policy.instance_repair_settings import (  # noqa: F401
    ACCEPTS, ACTIONS, COLD_MIGRATE, HARD_REBOOT, NEEDS, REBUILD, START,
    Settings)
