"""The per-host state machine: pure data and functions, no I/O, no clock."""

from instanceha.fsm.machine import HostRecord, Policy, step, UndeclaredTransition  # noqa
from instanceha.fsm.states import Action, State, ENTRY_ACTION  # noqa
