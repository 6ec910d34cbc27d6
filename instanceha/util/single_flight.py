"""Callers that ask for a read while the same read is under way share its
answer: :class:`SingleFlight`.

Twenty hosts evacuated at once each want Nova's compute services and the
cloud's capacities (megabytes of JSON at thousands of hosts). The read
started by the first caller answers those that ask while it runs; an
answer is never kept after its read ends, so no caller gets one that was
started before the previous read finished: it is as fresh as a read of
its own started a moment earlier.
"""

import threading


class _Flight:
    __slots__ = ("done", "value", "error")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.error = None


class SingleFlight:
    """``read()`` runs ``fn()``, or waits for the ``fn()`` already running
    and returns its answer (``copy(answer)`` for each caller, so that no
    caller sees another's changes); its error is raised to every caller
    that waited for it."""

    def __init__(self, fn, copy=lambda value: value):
        self._fn = fn
        self._copy = copy
        self._lock = threading.Lock()
        self._flight = None
        #: reads run, and callers that shared one instead (metrics, tests)
        self.reads = 0
        self.shared = 0

    def __call__(self):
        with self._lock:
            flight = self._flight
            leader = flight is None
            if leader:
                flight = self._flight = _Flight()
                self.reads += 1
            else:
                self.shared += 1
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return self._copy(flight.value)
        try:
            flight.value = self._fn()
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                self._flight = None
            flight.done.set()
        return self._copy(flight.value)
