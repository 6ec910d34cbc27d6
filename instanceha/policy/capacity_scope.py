"""Which hosts could take a lost host's servers (:func:`destinations`); pure.

Rules (exact): compute services that are enabled, ``up``, not forced down,
not the source, and present in the capacities; a host with several service
records must pass with each. Scope ``cloud``: every such host. ``zone``:
the source's availability zone (from its compute service); a source whose
zone is unknown matches every host; a host with no zone does not match a
known one. ``aggregate``: hosts sharing at least one aggregate with the
source, aggregates named in ``exclude_aggregates`` ignored; a source in no
other aggregate falls back to ``zone``.
"""

import dataclasses
from typing import (Callable, Collection, Dict, Iterable, Iterator, List,
                    Mapping, Optional, Sequence, Set, Tuple)

from instanceha.policy.capacity_settings import AGGREGATE, ZONE, Settings
from instanceha.policy.facts import (AggregateRecord, CapacityRecord,
                                     ServiceRecord)

#: test(other_host, other_zone) -> why it is out of scope, None when in
ScopeTest = Callable[[str, Optional[str]], Optional[str]]


@dataclasses.dataclass(frozen=True)
class Destinations:
    """The hosts that could take a lost host's servers, sorted by name.
    Iterating, ``len`` and ``in`` see the hosts."""
    hosts: Tuple[str, ...]
    #: 'zone az1', 'aggregates agg1, agg2', 'the cloud': for status lines
    where: str
    #: the other compute hosts and why each is not a destination
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __iter__(self) -> Iterator[str]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __contains__(self, host: object) -> bool:
        return host in self.hosts


def _computes(services: Iterable[ServiceRecord]) -> List[ServiceRecord]:
    return [s for s in services
            if getattr(s, "binary", "nova-compute") == "nova-compute"]


def _why_not(service: ServiceRecord) -> Optional[str]:
    if service.status != "enabled":
        return "disabled"
    if service.forced_down:
        return "forced down"
    if service.state != "up":
        return "not up (state %s)" % service.state
    return None


def source_zone(source_host: str, services: Iterable[ServiceRecord]
                ) -> Optional[str]:
    """The availability zone of ``source_host``'s compute service; None
    when unknown (no record, no zone, or records that disagree)."""
    zones = {s.zone for s in _computes(services) if s.host == source_host}
    if len(zones) != 1:
        return None
    return next(iter(zones)) or None


def aggregates_with(host: str,
                    aggregates: Optional[Iterable[AggregateRecord]],
                    exclude: Collection[str] = ()) -> Tuple[str, ...]:
    """Names of the aggregates holding ``host``, those in ``exclude``
    left out, sorted."""
    ex = set(exclude)
    return tuple(sorted({a.name for a in aggregates or ()
                         if host in tuple(a.hosts or ())
                         and a.name not in ex}))


def neighbours(host: str, zone: Optional[str], scope: str,
               aggregates: Optional[Sequence[AggregateRecord]],
               exclude: Collection[str] = ()) -> Tuple[ScopeTest, str]:
    """(test(other_host, other_zone) -> reason or None, where): the scope
    rule shared with :mod:`instanceha.policy.reserved`."""
    if scope == AGGREGATE:
        mine = set(aggregates_with(host, aggregates, exclude))
        if mine:
            members: Dict[str, Set[str]] = {}
            for a in aggregates or ():
                if a.name in mine:
                    for h in a.hosts or ():
                        members.setdefault(h, set()).add(a.name)

            def in_aggregate(other: str, other_zone: Optional[str]
                             ) -> Optional[str]:
                if other in members:
                    return None
                return "shares no aggregate with %s" % host
            return in_aggregate, ("aggregate%s %s" % (
                "s" if len(mine) > 1 else "", ", ".join(sorted(mine))))
        scope = ZONE
    if scope == ZONE and zone is not None:
        def in_zone(other: str, other_zone: Optional[str]
                    ) -> Optional[str]:
            if other_zone == zone:
                return None
            return "in zone %s, not %s" % (other_zone or "(none)", zone)
        return in_zone, "zone %s" % zone
    return (lambda other, other_zone: None), "the cloud"


def destinations(source_host: str, services: Sequence[ServiceRecord],
                 capacities: Optional[Mapping[str, CapacityRecord]],
                 aggregates: Optional[Sequence[AggregateRecord]],
                 settings: "Settings" = Settings()
                 ) -> Destinations:
    """The hosts that could take ``source_host``'s servers: see the module
    docstring. ``services``: [ComputeService] (other binaries ignored);
    ``capacities``: {host: HostCapacity}; ``aggregates``: [Aggregate] or
    [AggregateFacts] (anything with ``name`` and ``hosts``)."""
    zone = source_zone(source_host, services)
    test, where = neighbours(source_host, zone, settings.scope, aggregates,
                             settings.exclude_aggregates)
    capacities = capacities or {}
    verdict: Dict[str, Optional[str]] = {}
    for svc in _computes(services):
        if svc.host == source_host:
            continue
        why = _why_not(svc)
        if why is None and svc.host not in capacities:
            why = "no capacity known"
        if why is None:
            why = test(svc.host, svc.zone)
        # a host with several records must pass with each
        if verdict.get(svc.host) is None:
            verdict[svc.host] = why
    hosts = tuple(sorted(h for h, why in verdict.items() if why is None))
    skipped = {h: why for h, why in sorted(verdict.items())
               if why is not None}
    return Destinations(hosts, where, skipped)
