"""Failpoints: named places where a test can have the process killed.

``INSTANCEHA_FAILPOINT`` names one or more points (comma-separated); when
the running code reaches one of them, the process kills itself with
SIGKILL at once: no cleanup, no journal flush, as a crash or an OOM kill
would. Used by the crash-safety tests to stop instanceha exactly between a
journalled decision and its side effect, instead of relying on timing.

Without the variable (production), :func:`hit` is one membership test of
an empty frozenset. The variable is read once, at import.

Points (``<kind>`` and ``<state>`` are the values of Action and State):

``after_transition:<state>``   the transition into <state> and the actions
                               it starts are journalled; none has run
``before_action:<kind>``       an action is about to run its side effect
``after_action:<kind>``        the side effect returned; its result is not
                               journalled yet
``before_evacuate_request``    a server's evacuation row is journalled;
                               Nova has not been asked
``after_evacuate_request``     Nova accepted the evacuation; the engine has
                               not looked at it again
``before_restore``             Nova's cleanup is confirmed; the service is
                               not put back yet
``before_drain_request:<req>`` a drain pass decided to send <req>
                               (live_migrate, cold_migrate,
                               confirm_resize) for a server; Nova has not
                               been asked
``after_drain_request:<req>``  Nova accepted it; the drain has not noted
                               it
``before_repair_request:<a>``  an instance repair attempt <a> (start,
                               hard_reboot, cold_migrate, rebuild) is
                               journalled as running and its markers set;
                               Nova has not been asked
``after_repair_request:<a>``   Nova accepted it; the repair has not noted
                               it (its result is journalled when it ends)

A point reached for one server (the drain's and the repair's) may also be
armed for that server alone: ``<point>@<server id>`` (the crash matrix
kills one process per server of the same cloud).
"""

import os
import signal

ENV = "INSTANCEHA_FAILPOINT"

ARMED = frozenset(p.strip() for p in os.environ.get(ENV, "").split(",")
                  if p.strip())


def hit(name, key=None):
    """Kill this process now if ``name`` is armed, or ``name@key`` (a
    point armed for one server)."""
    if ARMED and (name in ARMED or (key is not None
                                    and "%s@%s" % (name, key) in ARMED)):
        os.kill(os.getpid(), signal.SIGKILL)
