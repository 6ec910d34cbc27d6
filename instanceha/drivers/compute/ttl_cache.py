"""A small thread-safe cache whose values expire: :class:`TTLCache`."""

import threading
import time


class TTLCache:
    """Values kept for ``ttl`` seconds of ``clock`` (0: nothing is kept).

    Thread-safe: several workers share one driver. A loader runs outside
    the lock (two threads may both load a missing key; both answers are
    Nova's); a value loaded while ``invalidate`` ran is not stored, so an
    answer read before our own write never outlives it.
    """

    def __init__(self, ttl, clock=time.monotonic):
        self.ttl = float(ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._values = {}           # key -> (expiry, value)
        self._generation = 0

    def get(self, key, loader):
        if self.ttl <= 0:
            return loader()
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and self._clock() < hit[0]:
                return hit[1]
            generation = self._generation
        value = loader()            # errors are not kept
        with self._lock:
            if generation == self._generation:
                self._values[key] = (self._clock() + self.ttl, value)
        return value

    def invalidate(self, key=None):
        """Forget ``key`` (None: everything)."""
        with self._lock:
            self._generation += 1
            if key is None:
                self._values.clear()
            else:
                self._values.pop(key, None)
