"""The operator's host commands: the verb in ``POST /hosts/<host>/<verb>``
and the operator event it becomes (the state machine decides what the
event means in the host's current state).

A module of its own so that both the router (:mod:`instanceha.api.wsgi`)
and the API (:mod:`instanceha.api.server`) import it without importing
each other.
"""

from instanceha.events import EventKind as E

COMMANDS = {"suspend": E.OPERATOR_SUSPEND,
            "maintenance": E.OPERATOR_MAINTENANCE,
            "drain": E.OPERATOR_DRAIN,
            "resume": E.OPERATOR_RESUME}
