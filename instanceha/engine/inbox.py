"""What waits for each host, in the order it is to be handled.

A host's inbox holds its events (observations, operator commands), the
results of its actions (put at the front: they are facts, an isolation
done in Nova must be recorded first) and the action to run next. Beside
it: the next pass of an unfinished action (an evacuation), which runs
once the inbox is empty and its time has come, and the last error of an
action being retried (status). The back-off itself is the work queue's
(a key held back is not handed to a worker). Not locked on its own: the
engine calls it under its lock.
"""

import collections
from typing import (TYPE_CHECKING, DefaultDict, Deque, Dict, FrozenSet,
                    Hashable, List, NamedTuple, Optional, Set, Tuple, Union)

from instanceha.events import Event, EventKind as E
from instanceha.fsm.states import Action

if TYPE_CHECKING:
    from instanceha.engine.passes import Carry

#: Operator commands applied before a host's next queued action.
PREEMPT = {E.OPERATOR_SUSPEND, E.OPERATOR_MAINTENANCE}

#: Observations where only the newest pending one matters.
COALESCE = {E.HEARTBEAT_OK, E.HEARTBEAT_LOST, E.TICK}


#: the journal update that finishes an action's attempt: (action_id, at,
#: outcome, detail), as Journal.record takes it
Finish = Tuple[Optional[int], float, str, str]


class Pending(NamedTuple):
    """An action to run (an Action); action_id is its journal row (None:
    write one); carry: what its previous pass handed over (a
    passes.Carry; None: a first pass)."""
    action: Action
    action_id: Optional[int]
    carry: Optional["Carry"] = None


class Pass(NamedTuple):
    """The next pass of an unfinished action, not before ``due`` (sooner
    when news of a server in ``waits_for`` comes; None: of any server)."""
    pending: Pending
    due: float
    waits_for: Optional[FrozenSet[str]] = None


class Result(NamedTuple):
    """An action's result event and the journal update that finishes it."""
    event: Event
    finish: Optional[Finish]


#: what waits in a host's inbox
Item = Union[Event, Pending, Result]


class Inboxes:

    def __init__(self) -> None:
        self._boxes: DefaultDict[Hashable, Deque[Item]] = \
            collections.defaultdict(collections.deque)
        self._passes: Dict[Hashable, Pass] = {}
        #: keys woken while their pass ran: its next pass is due at once
        self._woken: Set[Hashable] = set()
        #: key (host_id) -> "action: error" (retrying)
        self._errors: Dict[Hashable, str] = {}

    def put(self, event: Event) -> None:
        """An event at the back; a newer observation of the same kind
        replaces one still waiting at the back."""
        box = self._boxes[event.host]
        if (event.kind in COALESCE and box and isinstance(box[-1], Event)
                and box[-1].kind in COALESCE
                and box[-1].kind is event.kind):
            box[-1] = event
        else:
            box.append(event)

    def put_front(self, host_id: Hashable, item: Item) -> None:
        self._boxes[host_id].appendleft(item)

    def append(self, host_id: Hashable, item: Item) -> None:
        self._boxes[host_id].append(item)

    def take(self, host_id: Hashable, now: float) -> Optional[Item]:
        """The next item to handle for the host, or None (nothing, or it
        only a pass not due yet). An operator's hands-off comes before the next
        action, which the state check then drops; the next pass of
        unfinished work comes once the inbox is empty and it is due."""
        box = self._boxes.get(host_id)
        if not box:
            nxt = self._passes.get(host_id)
            if nxt is None or nxt.due > now:
                return None
            del self._passes[host_id]
            self._woken.discard(host_id)
            return nxt.pending
        item = box.popleft()
        if box and isinstance(item, Pending):
            held = [e for e in box if isinstance(e, Event)
                    and e.kind in PREEMPT]
            if held:
                box.remove(held[0])
                box.appendleft(item)
                item = held[0]
        return item

    # -- passes of unfinished work ---------------------------------------------
    def set_pass(self, key: Hashable, pending: Pending, due: float,
                 waits_for: Optional[FrozenSet[str]] = None) -> None:
        """The next pass of ``key``'s work; due at once if news woke it
        while the last pass ran."""
        if key in self._woken:
            self._woken.discard(key)
            due = min(due, self._passes[key].due) \
                if key in self._passes else float("-inf")
        self._passes[key] = Pass(pending, due, waits_for)

    def start_or_wake(self, key: Hashable, pending: Pending, now: float
                      ) -> None:
        """Work news asks for: its waiting pass is due now, or ``pending``
        is its first pass (and should a pass of it be running, its next
        one is due at once)."""
        old = self._passes.get(key)
        if old is not None:
            self._passes[key] = old._replace(due=min(old.due, now))
        else:
            self._passes[key] = Pass(pending, now)
            self._woken.add(key)

    def wake_passes(self, now: float, server_id: Optional[str] = None
                    ) -> List[Hashable]:
        """Every pass waiting for news of ``server_id`` (None: every pass
        waiting) is due now; returns their keys."""
        keys = [k for k, p in self._passes.items() if p.due > now and (
            server_id is None or p.waits_for is None
            or server_id in p.waits_for)]
        for k in keys:
            self._passes[k] = self._passes[k]._replace(due=now)
        return keys

    def pop_pass(self, host_id: Hashable, action: Action) -> Optional[Pass]:
        """The waiting pass of ``action`` for the host, removed, or None."""
        old = self._passes.get(host_id)
        if old is None or old.pending.action is not action:
            return None
        del self._passes[host_id]
        return old

    def pop_all_passes(self) -> List[Pass]:
        passes, self._passes = list(self._passes.values()), {}
        self._woken.clear()
        return passes

    # -- errors of actions being retried -----------------------------------------
    def note_error(self, host_id: Hashable, error: str) -> None:
        self._errors[host_id] = error

    def clear_error(self, host_id: Hashable) -> None:
        self._errors.pop(host_id, None)

    def errors(self) -> Dict[Hashable, str]:
        """host_id -> the retrying action's last error."""
        return dict(self._errors)
