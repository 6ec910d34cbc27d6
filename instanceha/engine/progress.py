"""Evacuation progress board: lets event sources wake evacuation waits.

The evacuate action polls Nova's migrations between waits; a notification
listener that sees ``instance.*`` events for a server calls :meth:`record`,
which wakes every waiter at once instead of letting it sleep the full poll
interval. Without notifications it degrades to plain polling.
"""

import threading


class ProgressBoard:

    def __init__(self):
        self._cond = threading.Condition()
        self._seen = {}      # server_id -> dict(host=..., state=..., event=...)
        self._generation = 0

    def record(self, server_id, **facts):
        """Note what an event said about a server and wake the waiters."""
        with self._cond:
            self._seen.setdefault(server_id, {}).update(facts)
            self._generation += 1
            self._cond.notify_all()

    def facts(self, server_id):
        with self._cond:
            return dict(self._seen.get(server_id, {}))

    def forget(self, server_id):
        with self._cond:
            self._seen.pop(server_id, None)

    def generation(self):
        with self._cond:
            return self._generation

    def wait(self, since_generation, timeout):
        """Block until something is recorded after ``since_generation`` or
        ``timeout`` seconds pass. Returns the current generation."""
        with self._cond:
            if self._generation == since_generation:
                self._cond.wait(timeout)
            return self._generation
