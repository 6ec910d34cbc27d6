"""Which hosts the reconciler reads again before its next pass, and when.

A compute that dies stops heartbeating; a pass calls its row lost only
once the heartbeat's age on Nova's clock passes [detection] delta. When
that moment falls between two passes, waiting for the next pass loses up
to a whole poll_interval, and the estimate of Nova's clock lagging a
little behind the truth makes it a whole poll even when a pass comes a
fraction of a second after the moment (issue 37 part 0). So after each
pass, every host judged heartbeating whose heartbeat may go stale before
the next pass is given a deadline: the earliest moment its ``updated_at``
may be older than delta on Nova's clock, the estimate's uncertainty
allowed for (:func:`first_moment`). At that moment the reconciler reads
that one host's row again (one small call) and judges it exactly as a
pass would, on the estimate as it is then (the control-plane monitor's
reads may have sharpened it meanwhile). Still fresh on that estimate, it
is read again at the moment the estimate calls it stale
(:func:`stale_moment`, plus a small margin): its death is seen there, a
fraction of a second after the estimate allows, and not at the next
pass.

A host that is alive heartbeats meanwhile and is found fresh; only a host
whose heartbeat is late is read this way, so reads stay few; at most
``limit`` are planned at once (the earliest), the others wait for the
next pass as before.

Pure: no I/O, no clock reads; times are the caller's monotonic seconds.
"""

import dataclasses
import heapq
from typing import Dict, List, Optional

#: Seconds after the moment the estimate calls the row stale: the read
#: must judge it strictly older than delta.
MARGIN = 0.05
#: Reads of one host before the next pass, at most: a row still fresh at
#: its deadline is planned again at the moment the estimate then gives.
TRIES = 3
#: The estimate's uncertainty allowed for when planning the first read, at
#: most (s): with Nova's report_interval (10 s) and delta (30 s), a live
#: host's heartbeat is never within this of going stale at a pass, so
#: live hosts are not read alone.
EARLY = 5.0


@dataclasses.dataclass(frozen=True)
class Reread:
    """One planned read of one host's row."""
    at: float               # monotonic moment to read it
    host_id: str
    host: str
    updated_at: float       # the heartbeat that goes stale then
    tries: int = 1


def stale_moment(updated_at: float, delta: float, offset: float) -> float:
    """The monotonic moment (this node's) at which a heartbeat written at
    ``updated_at`` (Nova's clock) is older than ``delta`` on Nova's clock
    as estimated (``offset``: Nova's now minus this node's monotonic
    now), plus :data:`MARGIN`."""
    return updated_at + delta - offset + MARGIN


def first_moment(updated_at: float, delta: float, offset: float,
                 uncertainty: float) -> float:
    """The earliest monotonic moment at which the heartbeat may be older
    than ``delta`` on Nova's clock: Nova's now may be ahead of the
    estimate by ``uncertainty`` (at most :data:`EARLY` counted)."""
    return stale_moment(updated_at, delta,
                        offset + min(max(uncertainty, 0.0), EARLY))


class Plan:
    """The planned re-reads: one per host, at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_host: Dict[str, Reread] = {}
        #: hosts left for the next pass because the limit was reached, at
        #: the last planning
        self.left_out = 0

    def __len__(self) -> int:
        return len(self._by_host)

    def replace(self, candidates: List[Reread]) -> None:
        """A pass judged every row afresh: plan the earliest ``limit`` of
        ``candidates`` (each due before the next pass), drop the rest."""
        kept = heapq.nsmallest(self.limit, candidates, key=lambda r: r.at)
        self.left_out = len(candidates) - len(kept)
        self._by_host = {r.host_id: r for r in kept}

    def add(self, reread: Reread) -> None:
        """Plan ``reread`` (replacing one of its host), within the limit."""
        if reread.host_id in self._by_host or len(self) < self.limit:
            self._by_host[reread.host_id] = reread

    def next_at(self) -> Optional[float]:
        """When the next planned read is due, or None."""
        if not self._by_host:
            return None
        return min(r.at for r in self._by_host.values())

    def take_due(self, now: float) -> List[Reread]:
        """The reads due at ``now``, earliest first, removed from the
        plan."""
        due = sorted((r for r in self._by_host.values() if r.at <= now),
                     key=lambda r: r.at)
        for r in due:
            del self._by_host[r.host_id]
        return due

    def clear(self) -> None:
        self._by_host.clear()
