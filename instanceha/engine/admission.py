"""Which ready servers may be sent now, across every host being evacuated.

Each host's evacuation runs on a thread of its own (the engine's evacuation
threads). Before a run sends servers it asks the :class:`Gate`, shared by
all runs: the gate keeps every run's ready servers and its evacuations in
flight, and lets :func:`instanceha.policy.order.admit` decide over all of
them in one global order (priority, then age, then id), under
``[evacuation] concurrency`` per host, ``[recovery] max_inflight`` across
hosts and ``[recovery] strict_priority``. Only the bookkeeping is here; the
decision is the pure policy's.
"""

import threading
from typing import (Callable, Dict, Iterable, List, Mapping, NamedTuple,
                    Optional, Tuple)

from instanceha.policy import order

class Item(NamedTuple):
    """One ready server: ``key`` is order.sort_key's (priority first)."""
    id: str
    host: str
    priority: int
    key: order.SortKey


class Gate:

    def __init__(self, limits: Callable[[], order.Limits]) -> None:
        """``limits``: a callable returning the current order.Limits (read
        at each request, so a reloaded configuration applies at once)."""
        self._limits = limits
        self._lock = threading.Lock()
        self._ready: Dict[str, List[Item]] = {}   # host -> [Item]
        #: host -> evacuations in flight
        self._busy: Dict[str, int] = {}

    def request(self, host: str, ready: Iterable[Item], busy: int
                ) -> Tuple[List[str], Dict[str, str]]:
        """``ready``: the host's servers that could be sent now ([Item]);
        ``busy``: its evacuations in flight. Returns (ids to send now, in
        order; {id: why it waits} for the others). What is granted counts
        as in flight until the host's next request or :meth:`release`."""
        with self._lock:
            self._ready[host] = list(ready)
            self._busy[host] = int(busy)
            everyone = sorted((i for items in self._ready.values()
                               for i in items), key=lambda i: i.key)
            inflight: Dict[Optional[str], int] = dict(self._busy.items())
            verdict = order.admit(everyone, self._limits(),
                                  inflight=inflight)
            mine = {i.id for i in ready}
            send = [sid for sid in verdict.send if sid in mine]
            self._busy[host] += len(send)
            granted = set(send)
            self._ready[host] = [i for i in ready if i.id not in granted]
            held = {i.id: verdict.held[i.id] for i in ready
                    if i.id in verdict.held}
            return send, held

    def release(self, host: str) -> None:
        """The host's run is over: it neither waits nor holds a slot."""
        with self._lock:
            self._ready.pop(host, None)
            self._busy.pop(host, None)

    def snapshot(self) -> Mapping[str, Tuple[int, int]]:
        """{host: (in flight, waiting)} for status."""
        with self._lock:
            return {h: (self._busy.get(h, 0), len(self._ready.get(h, ())))
                    for h in set(self._ready) | set(self._busy)}
