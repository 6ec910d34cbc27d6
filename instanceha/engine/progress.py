"""Evacuation progress board: lets event sources wake evacuation waits.

An evacuation runs in passes that judge Nova's migrations; a notification
listener that sees ``instance.*`` events for a server calls :meth:`record`,
which wakes the hosts waiting for their next pass at once instead of after
the full poll interval. Without notifications it degrades to plain polling.
"""

import threading
from typing import Callable, Dict, List, Optional


class ProgressBoard:

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: server_id -> dict(host=..., state=..., event=...)
        self._seen: Dict[str, Dict[str, object]] = {}
        self._generation = 0
        self._subscribers: List[Callable[[str], object]] = []

    def subscribe(self, fn: Callable[[str], object]) -> None:
        """fn(server_id) after each record (outside the board's lock): the
        engine wakes the evacuations waiting for their next pass."""
        self._subscribers.append(fn)

    def record(self, server_id: str, **facts: object) -> None:
        """Note what an event said about a server and wake the waiters."""
        with self._cond:
            self._seen.setdefault(server_id, {}).update(facts)
            self._generation += 1
            self._cond.notify_all()
        for fn in list(self._subscribers):
            fn(server_id)

    def nudge(self, server_id: str) -> None:
        """A server moved (a live or cold migration's notification): wake
        the passes waiting (a drain reads its servers again) without
        keeping anything about it."""
        for fn in list(self._subscribers):
            fn(server_id)

    def facts(self, server_id: str) -> Dict[str, object]:
        with self._cond:
            return dict(self._seen.get(server_id, {}))

    def forget(self, server_id: str) -> None:
        with self._cond:
            self._seen.pop(server_id, None)

    def generation(self) -> int:
        with self._cond:
            return self._generation

    def wait(self, since_generation: int, timeout: Optional[float]) -> int:
        """Block until something is recorded after ``since_generation`` or
        ``timeout`` seconds pass. Returns the current generation."""
        with self._cond:
            if self._generation == since_generation:
                self._cond.wait(timeout)
            return self._generation
