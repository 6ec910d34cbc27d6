"""Nova's clock, estimated from the updated_at values os-services shows.

A service row's ``updated_at`` is stamped by the clock of the process that
wrote it: nova-conductor for a compute's heartbeat (one of several
conductors), the service itself for a conductor, nova-api for an
operator's (or instanceha's) change. So one answer mixes several clocks.
Taking the newest ``updated_at`` as Nova's "now" lets the fastest writer
set it: one conductor 25 s fast makes every row written by the others look
25 s stale, and the hosts behind them suspect.

What a row tells: when its ``updated_at`` changed between two reads, the
write happened after the earlier read started and before the later read
ended. So the writer's offset from this node's monotonic clock lies
between ``updated_at - read_end`` and that plus the time between the two
reads (the sample's *window*), plus the resolution of Nova's timestamps:
with MySQL, Nova keeps whole seconds (``...:34.000000``), so a heartbeat
written at .67 shows the second before it. The resolution is taken as one
second until an ``updated_at`` with a fraction is seen. Each row keeps the
intersection of its samples' intervals: its low end rises towards the
truth as reads happen to fall closer after writes, so in a few reads (the
reconciler varies its read times) the row's offset is known to a small
part of a poll, even when every compute reports in step.

Across rows: the lower median of the rows' low ends, then the highest low
end no more than the median row's uncertainty (its interval's width) above
it. Every row written on the majority's clock lies in that band; a writer
further ahead is left out, however many rows it writes, as long as it
writes fewer than half. A row's low end still lags by the time its answer
took to come back; half its interval's width is added, but never more than
a read's round trip (the median of the last reads'). So the estimate never
runs ahead of the majority's clock by more than the band plus one round
trip. It lags it by a small part of a poll, plus, with whole-second
timestamps, the fraction of a second after a whole second at which the
writes of every row in the band fall: when every compute reports in step
at .67, no estimator can see those 0.67 s; with computes out of step, the
row whose writes fall just after a whole second sets the estimate.

Nova's now is this node's monotonic now plus that offset: it goes on
advancing while nothing reports (every compute dead, a host forced down),
and a step of this node's wall clock does not move it.

Only rows Nova itself calls up (and not forced down) give samples: a row
written while a writer's clock was far ahead is down to Nova, and must not
become everybody's "now". A sample whose interval misses the row's (the
writer's clock stepped, or the row moved to another writer) starts the
row afresh from it.

Pure: no I/O, no clock reads; callers pass their monotonic times. Thread
safe: the reconciler and the control-plane monitor feed one estimator.
"""

import collections
import dataclasses
import threading
from typing import Optional

INF = float("inf")
#: Reads whose durations give the round trip (their median).
TRIPS = 16


@dataclasses.dataclass
class _Row:
    binary: str
    updated_at: float
    read_start: float               # start of the read that saw it last
    usable: bool                    # Nova calls it up, not forced down
    low: Optional[float] = None     # the writer's offset lies in
    high: float = INF               # [low, high]; None: no sample yet

    def sample(self, low, high):
        if self.low is None or high < self.low or low > self.high:
            # First sample, or one that cannot be the same clock.
            self.low, self.high = low, high
        else:
            self.low, self.high = max(self.low, low), min(self.high, high)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One reading of the estimator.

    ``offset``: Nova's now minus this node's monotonic now. ``tolerance``:
    the band above the median row within which rows count as the majority's
    clock (the median row's uncertainty). ``ahead`` / ``behind``: how far
    the furthest row's writer is ahead of, or behind, that clock beyond the
    band (0: none), and ``rows_off``: how many rows are."""
    offset: float
    tolerance: float
    ahead: float
    behind: float
    rows_off: int
    rows: int


class NovaClock:
    """Nova's "now" from the os-services rows read so far (see the module
    docstring); one per Nova, fed by every source that reads services."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rows = {}             # service id -> _Row
        self._trips = collections.deque(maxlen=TRIPS)  # read durations
        self.resolution = 1.0       # of Nova's updated_at, s (see above)
        #: the Estimate of the rows as they stand, until the next answer
        #: (made on demand: sorting 20,000 rows for every reader of
        #: Nova's clock cost the engine more than reading them)
        self._estimate = None

    def observe(self, services, read_start, read_end):
        """Take one os-services answer, read between ``read_start`` and
        ``read_end`` (monotonic, this node). Rows of the binaries present
        in the answer that it no longer lists are forgotten."""
        with self._lock:
            self._estimate = None
            self._trips.append(max(0.0, read_end - read_start))
            listed = set()
            for s in services:
                if s.updated_at is None:
                    continue
                if s.updated_at % 1.0:
                    self.resolution = 0.0
                listed.add(s.id)
                usable = s.state == "up" and not s.forced_down
                row = self._rows.get(s.id)
                if row is None:
                    row = self._rows[s.id] = _Row(
                        s.binary, s.updated_at, read_start, usable)
                    if usable:
                        # First sight: written at some time before.
                        row.sample(s.updated_at - read_end, INF)
                elif s.updated_at != row.updated_at and usable:
                    low = s.updated_at - read_end
                    row.sample(low, s.updated_at + self.resolution
                               - row.read_start)
                row.updated_at, row.read_start = s.updated_at, read_start
                row.usable = usable
            binaries = {s.binary for s in services}
            for sid in [sid for sid, row in self._rows.items()
                        if row.binary in binaries and sid not in listed]:
                del self._rows[sid]

    def estimate(self):
        """The Estimate now, or None before any row gave a sample."""
        with self._lock:
            if self._estimate is None \
                    or self._estimate[0] != self.resolution:
                self._estimate = (self.resolution, self._estimate_rows())
            return self._estimate[1]

    def _estimate_rows(self):
        """The Estimate of the rows now (the lock held)."""
        rows = [r for r in self._rows.values()
                if r.usable and r.low is not None]
        if not rows:
            # Nothing up now (every service dead or forced down): the
            # last offsets seen still map the clocks.
            rows = [r for r in self._rows.values() if r.low is not None]
        if not rows:
            return None
        spans = sorted(((r.low, r.high) for r in rows),
                       key=lambda span: span[0])
        trip = sorted(self._trips)[(len(self._trips) - 1) // 2] \
            if self._trips else 0.0
        median_low, median_high = spans[(len(spans) - 1) // 2]
        tolerance = median_high - median_low
        if tolerance == INF:
            tolerance = 0.0         # unknown yet: the median itself
        low, high = max((span for span in spans
                         if span[0] <= median_low + tolerance),
                        key=lambda span: span[0])
        offset = low + min((high - low) / 2, trip)
        ahead = behind = 0.0
        off = 0
        for low, high in spans:
            if low > offset + trip + self.resolution:
                ahead, off = max(ahead, low - offset), off + 1
            elif high < offset - tolerance - trip:
                # Surely behind the band, whatever the reads' timing.
                behind, off = max(behind, offset - high), off + 1
        return Estimate(offset, tolerance, ahead, behind, off, len(spans))

    def now(self, mono_now):
        """Nova's estimated now at monotonic ``mono_now``, or None."""
        est = self.estimate()
        return None if est is None else mono_now + est.offset


def newest_heartbeat(services) -> Optional[float]:
    """Nova's now from one os-services answer alone (no history): the
    lower median of the ``updated_at`` of the rows Nova calls up (and not
    forced down), so a minority of writers whose clock runs ahead cannot
    age the others: while fewer than half the rows are written by a clock
    running ahead, ages measured against it are never overestimated. It
    lags Nova by up to about a report interval. None when no such row has
    an updated_at. The reconciler itself uses the shared NovaClock, which
    also follows the rows over time."""
    values = sorted(s.updated_at for s in services
                    if s.updated_at is not None and s.state == "up"
                    and not s.forced_down)
    if not values:
        return None
    return values[(len(values) - 1) // 2]
