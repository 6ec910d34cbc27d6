"""The per-host state machine: pure data and functions, no I/O, no clock."""

from instanceha.fsm.machine import step, UndeclaredTransition  # noqa
from instanceha.fsm.record import HostRecord  # noqa
from instanceha.fsm.settings import Policy  # noqa
from instanceha.fsm.states import Action, State, ENTRY_ACTION  # noqa
