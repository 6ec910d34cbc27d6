"""Capacity preflight before a fenced host's servers are evacuated; pure.

Before instanceha asks Nova to rebuild the servers of a lost host, it can
check, with Placement's own counts, whether the hosts that could take them
have room. A server that no destination can take *waits for capacity*
(the host's ``pending`` state) instead of being sent into a certain
NoValidHost; the others go as usual. Nova's scheduler stays the authority:
the preflight never picks a host, it only holds servers back.

The pieces, each usable alone:

* :func:`need_of`: what one server takes (its embedded flavor, compute
  microversion 2.47 or later), or no answer and a :class:`Problem` when the
  flavor is missing, malformed, or asks for what is not counted here
  (dedicated CPUs). A server without an answer is never held back
  (:mod:`~instanceha.policy.capacity_need`).
* :func:`free_of` / :class:`Free`: what a host still has (usable minus
  used, never negative), less the configured headroom
  (:mod:`~instanceha.policy.capacity_free`).
* :func:`destinations`: which hosts could take the servers of the lost
  host, within the configured scope (``zone``, ``aggregate``, ``cloud``)
  (:mod:`~instanceha.policy.capacity_scope`).
* :func:`preflight`: places the servers in priority order on a copy of the
  free capacity and says which fit, which wait and what is missing.
* :func:`check`: the three above in one call, for the engine.

Rules (exact):

* Need, Free, Destinations: in the modules named above; the settings in
  :mod:`~instanceha.policy.capacity_settings`. Their public names stay
  importable from here.
* Placement simulation: servers in the given order; each goes to the
  destination with the most free RAM among those where it fits (ties by
  host name) and its need is deducted there. A server that fits nowhere
  waits and never blocks later, smaller ones (work-conserving). A server
  without a Need is admitted and deducts nothing. A server listed twice
  counts once.
"""

import dataclasses
from typing import (Dict, Iterable, Mapping, Optional, Sequence, Tuple,
                    Union)

from instanceha.policy.capacity_free import Free, free_on
from instanceha.policy.capacity_need import DISK, Need
from instanceha.policy.capacity_scope import Destinations, destinations
from instanceha.policy.capacity_settings import Settings
from instanceha.policy.facts import (AggregateRecord, CapacityRecord,
                                     ServiceRecord)
# Re-exported: the engine, reserved.py, benchmarks and tests use them as
# capacity.<name>.
from instanceha.policy.capacity_free import free_of  # noqa: F401
from instanceha.policy.capacity_need import (  # noqa: F401
    RAM, RESOURCES, VCPUS, need_of)
from instanceha.policy.capacity_scope import (  # noqa: F401
    aggregates_with, neighbours, source_zone)
from instanceha.policy.capacity_settings import (  # noqa: F401
    AGGREGATE, CLOUD, SCOPES, ZONE)


@dataclasses.dataclass(frozen=True)
class Preflight:
    #: server ids that may be sent, in the given order
    fits: Tuple[str, ...]
    #: server id -> why it waits, naming what it lacks
    pending: Dict[str, str]
    #: per resource, what the pending servers need beyond every free
    #: amount left in scope (at least this much must appear); all 0 with
    #: servers pending means the free capacity is fragmented
    shortfall: Need
    #: one line for status
    text: str
    #: what the pending servers need in all (enough for each of them on
    #: fresh hosts: what reserved hosts should cover)
    pending_need: Need = Need()
    #: server id -> host of the simulation (a prediction, never a target)
    placed: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: ids admitted without a known need
    unknown: Tuple[str, ...] = ()

    @property
    def fragmented(self) -> bool:
        return bool(self.pending) and not self.shortfall


def _as_frees(free: Union[Mapping[str, Free], Iterable[Free], None]
              ) -> Dict[str, Free]:
    if isinstance(free, Mapping):
        items = list(free.values())
    else:
        items = list(free or ())
    out: Dict[str, Free] = {}
    for f in items:
        if f.host in out:
            raise ValueError("host %r is given twice" % f.host)
        out[f.host] = f
    return out


def _lacks(need: Need, frees: Sequence[Free]) -> str:
    """Why ``need`` fits on none of ``frees``."""
    if not frees:
        return "no destination host"
    short = []
    if need.vcpus > max(f.vcpus for f in frees):
        short.append("%d vCPU" % need.vcpus)
    if need.ram_mb > max(f.ram_mb for f in frees):
        short.append("%d MB RAM" % need.ram_mb)
    disks = [f.disk_gb for f in frees if f.disk_gb is not None]
    if disks and len(disks) == len(frees) and need.disk_gb > max(disks):
        short.append("%d GB disk" % need.disk_gb)
    if short:
        return "no destination has %s free" % " and ".join(short)
    return "no single destination has %s free at once" % need.describe()


def preflight(ordered: Sequence[Tuple[str, Optional[Need]]],
              free: Union[Mapping[str, Free], Iterable[Free]],
              settings: "Settings" = Settings(), where: str = "") -> Preflight:
    """Simulate placing ``ordered`` ((server id, Need or None), in
    priority order) on ``free`` (the destinations' Free, see
    :func:`free_on`). ``where``: the scope for the text ('zone az1', see
    :attr:`Destinations.where`). With the preflight off, every server
    fits."""
    seen, ids = set(), []
    for sid, need in ordered:
        if sid not in seen:
            seen.add(sid)
            ids.append((sid, need))
    if not settings.enabled:
        return Preflight(tuple(s for s, _ in ids), {}, Need(),
                         "capacity preflight off",
                         unknown=tuple(s for s, n in ids if n is None))
    frees = _as_frees(free)
    fits, pending, placed, unknown = [], {}, {}, []
    pending_need = Need()
    for sid, need in ids:
        if need is None:
            fits.append(sid)
            unknown.append(sid)
            continue
        counted = need.only(settings.resources)
        room = [f for f in frees.values() if f.fits(counted)]
        if not room:
            pending[sid] = "needs %s; %s%s" % (
                counted.describe(), _lacks(counted, list(frees.values())),
                " in " + where if where else "")
            pending_need = pending_need + counted
            continue
        best = min(room, key=lambda f: (-f.ram_mb, f.host))
        frees[best.host] = best.take(counted)
        placed[sid] = best.host
        fits.append(sid)
    left = Need(sum(f.vcpus for f in frees.values()),
                sum(f.ram_mb for f in frees.values()),
                sum(f.disk_gb or 0 for f in frees.values()))
    shortfall = pending_need.minus(left)
    if DISK in settings.resources and any(
            f.disk_gb is None for f in frees.values()):
        # some destination does not report its disk: none is missing
        shortfall = Need(shortfall.vcpus, shortfall.ram_mb, 0)
    text = _text(len(ids), pending, shortfall, frees, where)
    return Preflight(tuple(fits), pending, shortfall, text, pending_need,
                     placed, tuple(unknown))


def _text(total: int, pending: Mapping[str, str], shortfall: Need,
          frees: Mapping[str, Free], where: str) -> str:
    at = " in " + where if where else ""
    if not pending:
        return "all %d server(s) fit%s" % (total, at)
    head = "%d of %d servers wait for capacity: " % (len(pending), total)
    if not frees:
        return head + "no destination host" + at
    if shortfall:
        return head + "short of " + shortfall.describe() + at
    return head + "free capacity%s is split across hosts, none has " \
        "room for them" % at


def check(source_host: str, ordered: Sequence[Tuple[str, Optional[Need]]],
          services: Sequence[ServiceRecord],
          capacities: Mapping[str, CapacityRecord],
          aggregates: Optional[Sequence[AggregateRecord]],
          settings: "Settings" = Settings()) -> Tuple[Destinations, Preflight]:
    """:func:`destinations`, :func:`free_on` and :func:`preflight` in one
    call: (Destinations, Preflight)."""
    dest = destinations(source_host, services, capacities, aggregates,
                        settings)
    return dest, preflight(ordered, free_on(dest.hosts, capacities,
                                            settings), settings, dest.where)
