"""A keyed work queue with per-key exponential back-off.

Semantics follow the controller pattern: a key is either waiting or being
processed, never both. Adding a key that is already waiting is a no-op
(wake-ups merge); adding a key while it is processed marks it dirty, and it
is queued again when :meth:`done` is called. :meth:`add_after` holds a key
back until a time; :meth:`add_rate_limited` holds the key back for a
delay that doubles per consecutive failure of that key, up to a cap,
until :meth:`forget` resets it; :meth:`hold` for a given delay. A key
held back is handed to no worker before its time, however often it is
added meanwhile: this is the engine's one layer of back-off.

Two lanes: a key added ``urgent`` (a host being proven dead: its next
step is a power-off decision) is taken before every ordinary key (an
evacuation pass, a cleanup check), and with ``ordinary_limit`` at most
that many ordinary keys are processed at once, so that some workers are
always free for urgent ones: a storm of evacuations never delays the
fencing of the next host to die.

Time comes from the injected ``clock``; a background thread (or a test
calling :meth:`pump`) moves due delayed keys onto the queue.
"""

import collections
import heapq
import itertools
import threading
from typing import (Callable, Counter, Deque, Dict, Hashable, List, Optional,
                    Set, Tuple)

from instanceha.util import backoff


class ShutDown(Exception):
    pass


class WorkQueue:

    def __init__(self, clock: Callable[[], float], base_delay: float = 0.5,
                 max_delay: float = 60.0,
                 ordinary_limit: Optional[int] = None) -> None:
        self._clock = clock
        self._base = base_delay
        self._max = max_delay
        self._cond = threading.Condition()
        self._queue: Deque[Hashable] = collections.deque()
        self._urgent: Deque[Hashable] = collections.deque()
        self._ordinary_limit = ordinary_limit
        self._dirty: Set[Hashable] = set()
        #: dirty keys added urgent
        self._dirty_urgent: Set[Hashable] = set()
        self._processing: Set[Hashable] = set()
        #: processing, taken as ordinary
        self._ordinary: Set[Hashable] = set()
        #: heap of (due, seq, key, urgent)
        self._delayed: List[Tuple[float, int, Hashable, bool]] = []
        self._seq = itertools.count()
        self._failures: Counter[Hashable] = collections.Counter()
        #: key -> the time before which it is handed to no worker
        self._hold_until: Dict[Hashable, float] = {}
        self._shutdown = False

    # -- adding -------------------------------------------------------------
    def add(self, key: Hashable, urgent: bool = False) -> None:
        with self._cond:
            self._add_locked(key, urgent)

    def _add_locked(self, key: Hashable, urgent: bool = False) -> None:
        if self._shutdown or self._held_locked(key):
            # Held back: the delayed entry of its hold adds it then.
            return
        if key in self._dirty:
            if urgent and key not in self._dirty_urgent:
                # Waiting as ordinary: it moves to the urgent lane.
                self._dirty_urgent.add(key)
                if key not in self._processing:
                    self._queue.remove(key)
                    self._urgent.append(key)
                    self._cond.notify_all()
            return
        self._dirty.add(key)
        if urgent:
            self._dirty_urgent.add(key)
        if key not in self._processing:
            (self._urgent if urgent else self._queue).append(key)
            # notify_all: the delayer waits on this condition too, and a
            # notify() that woke it instead of a worker left the key queued
            # with every worker asleep.
            self._cond.notify_all()

    def add_after(self, key: Hashable, delay: float,
                  urgent: bool = False) -> None:
        """Queue ``key`` in ``delay`` seconds (in the urgent lane when
        ``urgent``): released by the delayer at that time, not later."""
        if delay <= 0:
            return self.add(key, urgent)
        with self._cond:
            heapq.heappush(self._delayed, (self._clock() + delay,
                                           next(self._seq), key, urgent))
            self._cond.notify_all()

    def add_rate_limited(self, key: Hashable) -> float:
        """Hold ``key`` back for its back-off, then queue it again;
        returns the delay used."""
        with self._cond:
            n = self._failures[key]
            self._failures[key] += 1
        delay = backoff.exponential(self._base, n + 1, self._max)
        self.hold(key, delay)
        return delay

    def hold(self, key: Hashable, delay: float) -> None:
        """Hand ``key`` to no worker for ``delay`` seconds, then queue it
        again (a failure's back-off is :meth:`add_rate_limited`)."""
        with self._cond:
            until = self._clock() + delay
            self._hold_until[key] = max(until, self._hold_until.get(key, 0))
            heapq.heappush(self._delayed, (self._hold_until[key],
                                           next(self._seq), key, False))
            self._cond.notify_all()

    def holding(self, key: Hashable) -> bool:
        """Whether ``key`` is held back now."""
        with self._cond:
            return self._held_locked(key)

    def _held_locked(self, key: Hashable) -> bool:
        until = self._hold_until.get(key)
        if until is None:
            return False
        if until > self._clock():
            return True
        del self._hold_until[key]
        return False

    def forget(self, key: Hashable) -> None:
        """``key``'s work went well: its back-off starts afresh, and it
        is no longer held back."""
        with self._cond:
            self._failures.pop(key, None)
            self._hold_until.pop(key, None)

    def failures(self, key: Hashable) -> int:
        with self._cond:
            return self._failures[key]

    # -- delayed keys -------------------------------------------------------
    def pump(self) -> Optional[float]:
        """Move due delayed keys to the queue; return seconds to the next."""
        with self._cond:
            now = self._clock()
            while self._delayed and self._delayed[0][0] <= now:
                _, _, key, urgent = heapq.heappop(self._delayed)
                self._add_locked(key, urgent)
            return self._delayed[0][0] - now if self._delayed else None

    def run_delayer(self, wait: object = None) -> None:
        """Loop of the background thread that releases delayed keys."""
        while True:
            with self._cond:
                if self._shutdown:
                    return
            nxt = self.pump()
            with self._cond:
                if self._shutdown:
                    return
                self._cond.wait(timeout=min(nxt, 1.0) if nxt else 1.0)

    # -- processing ---------------------------------------------------------
    def get(self, timeout: Optional[float] = None) -> Optional[Hashable]:
        """Next key to process (marks it processing); ShutDown when closed.

        Returns None if ``timeout`` passes with nothing to do."""
        with self._cond:
            while not (self._urgent or (self._queue
                                        and self._ordinary_free())):
                if self._shutdown:
                    raise ShutDown()
                if not self._cond.wait(timeout) and timeout is not None:
                    return None
            if self._urgent:
                key = self._urgent.popleft()
            else:
                key = self._queue.popleft()
                self._ordinary.add(key)
            self._processing.add(key)
            self._dirty.discard(key)
            self._dirty_urgent.discard(key)
            return key

    def taken_urgent(self, key: Hashable) -> bool:
        """``key`` is being processed, taken from the urgent lane."""
        with self._cond:
            return key in self._processing and key not in self._ordinary

    def _ordinary_free(self) -> bool:
        return (self._ordinary_limit is None
                or len(self._ordinary) < self._ordinary_limit)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._ordinary:
                self._ordinary.discard(key)
                self._cond.notify_all()     # a slot for an ordinary key
            if key in self._dirty and self._held_locked(key):
                # Added while it was processed, then held back: its hold's
                # delayed entry queues it.
                self._dirty.discard(key)
                self._dirty_urgent.discard(key)
            elif key in self._dirty:
                (self._urgent if key in self._dirty_urgent
                 else self._queue).append(key)
                self._cond.notify_all()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._urgent)

    def settled(self) -> bool:
        """True while no key is waiting or being processed (keys held back
        until a later time aside)."""
        with self._cond:
            return not (self._queue or self._urgent or self._processing)

    def busy(self) -> bool:
        """True while any key is waiting, processing or delayed."""
        with self._cond:
            return bool(self._queue or self._urgent or self._processing
                        or self._delayed)
