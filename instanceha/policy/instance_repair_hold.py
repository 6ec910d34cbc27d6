"""The cloud-wide hold on instance repair; pure.

Many servers breaking at once point to a common cause (storage, network,
the control plane) that no reboot fixes: a storage outage must not turn
into hundreds of reboots. :func:`hold` counts the servers that broke
within ``hold_window`` seconds and holds every repair when they reach
``hold_count``, or ``hold_percent`` of the servers watched (with at least
``hold_min_failures`` of them). Like the storm hold on hosts
(:mod:`instanceha.policy.storm`), an operator may acknowledge it: the hold
stays lifted while no more servers are broken than when they did.
``now`` is an argument; nothing reads a clock.

Not shared with :mod:`~instanceha.policy.storm`: a storm counts hosts by
state and holds on a percentage of a minimum total, this counts breakages
by time and holds on an absolute count or a percentage; what is common is
a share of a total, one line.
"""

import dataclasses
from typing import Iterable, Iterator, Mapping, Optional, Tuple, Union

from instanceha.policy.instance_repair_settings import Settings

#: (server id, when it broke: seconds since the epoch)
Failure = Tuple[str, float]


@dataclasses.dataclass(frozen=True)
class Hold:
    held: bool
    why: str
    #: the servers broken within the window, sorted
    failing: Tuple[str, ...]
    #: the servers watched (the percentage's base)
    total: int
    pct: float
    #: the count an operator accepted (None: none)
    acknowledged: Optional[int] = None

    def __iter__(self) -> Iterator:
        """``held, why = hold(...)``."""
        return iter((self.held, self.why))

    def as_dict(self) -> dict:
        """What status and metrics show."""
        return {"held": self.held, "why": self.why,
                "failing": len(self.failing), "total": self.total,
                "pct": round(self.pct, 1), "servers": list(self.failing),
                "acknowledged": self.acknowledged}


def hold(recent_failures: Union[Iterable[Failure], Mapping[str, float]],
         now: float, settings: Settings, total_servers: int = 0,
         acknowledged: Optional[int] = None) -> Hold:
    """Whether the cloud-wide hold is on at ``now``. ``recent_failures``:
    (server id, when it broke) of the repairable verdicts (crashed,
    stopped by itself, error; a server may appear more than once), or
    {server id: when}; ``total_servers``: the servers watched;
    ``acknowledged``: the failing count an operator accepted."""
    s = settings
    pairs = (recent_failures.items()
             if isinstance(recent_failures, Mapping) else recent_failures)
    since = now - s.hold_window
    failing = tuple(sorted({sid for sid, at in pairs if since < at <= now}))
    n = len(failing)
    total = max(int(total_servers), 0)
    pct = 100.0 * n / total if total else 0.0
    by_count = s.hold_count > 0 and n >= s.hold_count
    by_pct = (s.hold_percent > 0 and total > 0 and
              n >= s.hold_min_failures and pct >= s.hold_percent)
    names = ", ".join(failing[:10])
    if n > 10:
        names += ", ... (%d more)" % (n - 10)
    base = "%d server(s) broke within %.0f s" % (n, s.hold_window)
    if total:
        base += " (%.1f%% of %d)" % (pct, total)
    limits = []
    if s.hold_count > 0:
        limits.append("%d servers ([instance_repair] hold_count)"
                      % s.hold_count)
    if s.hold_percent > 0:
        limits.append("%g%% with at least %d ([instance_repair] "
                      "hold_percent)" % (s.hold_percent,
                                         s.hold_min_failures))
    limit = " or ".join(limits) or "no limit (hold off)"
    if not (by_count or by_pct):
        return Hold(False, "%s; the hold engages at %s" % (base, limit),
                    failing, total, pct, acknowledged)
    if acknowledged is not None and n <= acknowledged:
        return Hold(False, "%s, at or over %s, but an operator accepted %d: "
                    "repairs go on" % (base, limit, acknowledged),
                    failing, total, pct, acknowledged)
    return Hold(True, "instance repair hold: %s, at or over %s: suspected "
                "storage, network or control-plane fault; no repair starts "
                "until fewer break or an operator accepts it (%s)"
                % (base, limit, names), failing, total, pct, acknowledged)
