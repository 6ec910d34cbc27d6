"""The pass protocol: how every long piece of work runs on the engine.

Evacuation, drain, undrain, fail-back, decommission and instance repair
are re-entrant passes: ``run(ctx, subject, carry) -> result | Requeue``.
A pass reads the world (Nova, the journal), does what the gates allow,
and either answers (the action's result) or returns a :class:`Requeue`:
"come back in ``after`` seconds, with this ``carry``". The engine runs
the next pass with that carry on the shared workers, sooner when a
notification about one of the servers the pass waits for wakes it. No
pass waits; its progress lives in the carry and in journal rows.
"""

from typing import Callable, FrozenSet, Optional, Protocol

from instanceha.events import Event, EventKind, Payload
from instanceha.fsm.record import HostRecord


class Carry(Protocol):
    """What one pass hands the next. ``close()`` is called when the
    work is abandoned (a new attempt replaces it, the engine stops)."""

    def close(self) -> None: ...


class Requeue:
    """A pass that is not finished: the engine runs the next pass of the
    same action after ``after`` seconds (sooner when woken by news of a
    server in ``waits_for``, or of any server when it is None), handing
    ``carry`` back."""

    __slots__ = ("after", "carry", "waits_for")

    def __init__(self, after: float, carry: Optional[Carry],
                 waits_for: Optional[FrozenSet[str]] = None) -> None:
        self.after = after
        self.carry = carry
        self.waits_for = waits_for

    def close(self) -> None:
        """The work is abandoned (the action raised, the engine stops)."""
        if self.carry is not None:
            self.carry.close()


class Done:
    """An action that ends with nothing for the state machine to step
    (soft fencing's request): its outcome and detail, which the executor
    writes on the attempt's journal row."""

    __slots__ = ("outcome", "detail")

    def __init__(self, outcome: str, detail: str) -> None:
        self.outcome = outcome
        self.detail = detail


class Clocked(Protocol):
    """What :func:`answer` reads of the context: its clock."""
    @property
    def clock(self) -> Callable[[], float]: ...


def answer(ctx: Clocked, record: HostRecord, kind: EventKind, reason: str,
           payload: Optional[Payload] = None) -> Event:
    """An action's result for the host of ``record``: the event the
    state machine steps with next."""
    return Event(kind, record.id, ctx.clock(), name=record.name,
                 reason=reason, source="action", payload=payload)


__all__ = ["Carry", "Done", "Requeue", "answer"]
