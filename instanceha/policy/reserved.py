"""Reserved hosts: spare compute capacity brought in for a lost host; pure.

An operator keeps spare hosts out of scheduling as *disabled* compute
services. When a host is lost, instanceha enables the reserved hosts that
match it so that its servers have somewhere to go, and (optionally) aims
its evacuations at them and returns them to the reserve once the lost host
is back. This module only decides; the engine enables, disables and
journals.

Which services are reserved (:func:`is_reserved`), exactly:

* a ``nova-compute`` service that is disabled, ``up`` and not forced down
  (a down or forced-down spare could not take anything);
* and either its ``disabled_reason`` starts with ``reason_prefix``
  (default ``reserved``), case-sensitive, immediately followed by the end
  of the reason, ``:`` or a blank: ``reserved``, ``reserved: rack 4``,
  ``reserved for az1`` match; ``Reserved``, ``reservedX``,
  ``reserved-spare``, `` reserved`` (leading blank) do not;
* or its host is listed in ``hosts`` (whatever its reason: listing a host
  says it is a spare; take it out of the list before working on it);
* never a service instanceha itself disabled (reason starting
  ``instanceha:``), listed or not.

Which reserved hosts replace a lost host (:func:`choose`):

* candidates are reserved hosts that match the lost host: with ``zone`` in
  ``match``, the same availability zone (a lost host whose zone is unknown
  matches every zone; a candidate with no zone matches no known zone);
  with ``aggregate``, at least one shared host aggregate, those in
  ``exclude_aggregates`` ignored (a lost host in no other aggregate falls
  back to the zone rule);
* a reserved host already in use for another lost host is skipped; those
  already in use for this one are kept (a resumed recovery chooses the
  same hosts again) and counted first;
* candidates are taken by host name until the shortfall is covered (each
  counted with its free capacity) or, without a shortfall or without
  capacities, until ``per_failed_host`` hosts are in use; never more than
  ``max_per_failed_host`` when it is set.

Returning them (:func:`release`): only with ``return_to_reserve`` on, once
the lost host is back; each is disabled again with the reason the journal
kept from before it was brought in, else ``"<prefix>: returned by
instanceha"``. Servers that landed on it stay there.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

from instanceha.policy import capacity as cap
from instanceha.policy.facts import (AggregateRecord, CapacityRecord,
                                     ServiceRecord)
from instanceha.util.marker import MARKER, is_ours

ZONE = "zone"
AGGREGATE = "aggregate"
MATCHES = (ZONE, AGGREGATE)

DEFAULT_PREFIX = "reserved"
_BLANKS = (" ", "\t")


@dataclasses.dataclass(frozen=True)
class Settings:
    #: bring reserved hosts in for a lost host
    enabled: bool = False
    reason_prefix: str = DEFAULT_PREFIX
    #: hosts that are reserved whenever they are disabled
    hosts: Tuple[str, ...] = ()
    #: what a reserved host must share with the lost host
    match: Tuple[str, ...] = (ZONE,)
    #: hosts per lost host when no shortfall or capacities are given
    per_failed_host: int = 1
    #: never more per lost host; 0: no cap
    max_per_failed_host: int = 0
    #: aim the lost host's evacuations at the chosen hosts (the scheduler
    #: still validates; instanceha never forces)
    target: bool = False
    #: disable them again, back in the reserve, once the lost host is back
    return_to_reserve: bool = False
    exclude_aggregates: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        p = self.reason_prefix
        if not isinstance(p, str) or not p or p != p.strip():
            raise ValueError("reason_prefix must be a non-empty word without "
                             "blanks around it, not %r" % (p,))
        if p.startswith(MARKER) or MARKER.startswith(p):
            raise ValueError("reason_prefix %r would match the reasons "
                             "instanceha writes (%s...)" % (p, MARKER))
        unknown = [m for m in self.match if m not in MATCHES]
        if unknown:
            raise ValueError("unknown match rule(s) %s; known: %s" % (
                ", ".join(map(repr, unknown)), ", ".join(MATCHES)))
        object.__setattr__(self, "match", tuple(
            m for m in MATCHES if m in self.match))
        for name, low in (("per_failed_host", 1), ("max_per_failed_host", 0)):
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, int) or n < low:
                raise ValueError("%s must be an integer >= %d, not %r" % (
                    name, low, n))
        if self.max_per_failed_host and \
                self.max_per_failed_host < self.per_failed_host:
            raise ValueError("max_per_failed_host (%d) is below "
                             "per_failed_host (%d)" % (
                                 self.max_per_failed_host,
                                 self.per_failed_host))
        bad = [h for h in self.hosts if not isinstance(h, str) or not h
               or h != h.strip()]
        if bad:
            raise ValueError("reserved host names must be names, not %s"
                             % ", ".join(map(repr, bad)))
        object.__setattr__(self, "hosts", tuple(sorted(set(self.hosts))))
        object.__setattr__(self, "exclude_aggregates", tuple(
            sorted(set(self.exclude_aggregates))))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        """From ``[reserved_hosts]``; ``[recovery] global_aggregate``,
        when set, is excluded from aggregate matching too."""
        r = conf.reserved_hosts
        exclude = list(r.exclude_aggregates or ())
        if conf.recovery.global_aggregate:
            exclude.append(conf.recovery.global_aggregate)
        return cls(enabled=r.enabled, reason_prefix=r.reason_prefix,
                   hosts=tuple(r.hosts), match=tuple(r.match),
                   per_failed_host=r.per_failed_host,
                   max_per_failed_host=r.max_per_failed_host,
                   target=r.target, return_to_reserve=r.return_to_reserve,
                   exclude_aggregates=tuple(exclude))

    @property
    def returned_reason(self) -> str:
        return "%s: returned by instanceha" % self.reason_prefix


# -- which services are reserved ----------------------------------------------

def prefix_matches(reason: Optional[str], prefix: str) -> bool:
    """``reason`` is ``prefix``, or starts with it followed by ':' or a
    blank (case-sensitive)."""
    if not isinstance(reason, str) or not reason.startswith(prefix):
        return False
    rest = reason[len(prefix):]
    return rest == "" or rest[0] == ":" or rest[0] in _BLANKS


def reserved_because(service: ServiceRecord, settings: Settings = Settings()
                     ) -> Tuple[bool, str]:
    """(reserved?, why): the rule of the module docstring, with the reason
    for status and ``policy explain``."""
    host = service.host
    if getattr(service, "binary", "nova-compute") != "nova-compute":
        return False, "%s is not a nova-compute service" % host
    if service.status != "disabled":
        return False, "%s is enabled" % host
    reason = service.disabled_reason
    if is_ours(reason):
        return False, "%s was disabled by instanceha (%r)" % (host, reason)
    if service.forced_down:
        return False, "%s is forced down" % host
    if service.state != "up":
        return False, "%s is not up (state %s)" % (host, service.state)
    listed = host in settings.hosts
    tagged = prefix_matches(reason, settings.reason_prefix)
    if listed and tagged:
        return True, "%s is listed in reserved hosts and disabled with " \
            "reason %r" % (host, reason)
    if listed:
        return True, "%s is listed in reserved hosts" % host
    if tagged:
        return True, "%s is disabled with reason %r" % (host, reason)
    return False, "%s is disabled with reason %r, not starting %r" % (
        host, reason, settings.reason_prefix)


def is_reserved(service: ServiceRecord,
                settings: Settings = Settings()) -> bool:
    """Whether the compute service ``service`` (a ComputeService) is a
    reserved host: see the module docstring."""
    return reserved_because(service, settings)[0]


def reserved_hosts(services: Iterable[ServiceRecord],
                   settings: Settings = Settings()
                   ) -> Tuple[str, ...]:
    """Hosts of ``services`` that are reserved, sorted (a host with several
    records must be reserved in each)."""
    verdict: Dict[str, bool] = {}
    for svc in services:
        if getattr(svc, "binary", "nova-compute") != "nova-compute":
            continue
        ok = is_reserved(svc, settings)
        verdict[svc.host] = verdict.get(svc.host, True) and ok
    return tuple(sorted(h for h, ok in verdict.items() if ok))


# -- choosing -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Choice:
    #: reserved hosts for the lost host, those already in use first, then
    #: by name
    hosts: Tuple[str, ...]
    #: why these: for status and the journal
    reason: str
    #: what could not be covered ('4 vCPU, 8192 MB RAM', 'no reserved host
    #: matches zone az1'), None when nothing is missing
    missing: Optional[str] = None
    #: of ``hosts``, those already in use for this lost host (enabled
    #: before); the others are to be enabled now
    already: Tuple[str, ...] = ()

    @property
    def to_enable(self) -> Tuple[str, ...]:
        return tuple(h for h in self.hosts if h not in self.already)


def _service_of(host: str, services: Iterable[ServiceRecord]
                ) -> Optional[ServiceRecord]:
    for s in services:
        if s.host == host and getattr(s, "binary",
                                      "nova-compute") == "nova-compute":
            return s
    return None


def choose(failed: ServiceRecord, services: Sequence[ServiceRecord],
           aggregates: Optional[Sequence[AggregateRecord]],
           in_use: Mapping[str, str],
           settings: Settings = Settings(),
           shortfall: Optional["cap.Need"] = None,
           capacities: Optional[Mapping[str, CapacityRecord]] = None
           ) -> Choice:
    """Which reserved hosts to bring in for ``failed`` (the lost host's
    ComputeService). ``services``: [ComputeService]; ``aggregates``:
    [Aggregate] or [AggregateFacts]; ``in_use``: {reserved host: lost
    host} from the journal; ``shortfall``: a
    :class:`~instanceha.policy.capacity.Need` to cover (a preflight's
    ``pending_need``, or its ``shortfall`` for the least); ``capacities``:
    {host: HostCapacity} giving each candidate's size."""
    if not settings.enabled:
        return Choice((), "reserved hosts are off")
    in_use = dict(in_use or {})
    already = tuple(sorted(h for h, f in in_use.items()
                           if f == failed.host and h != failed.host))
    match = settings.match
    if AGGREGATE in match:
        scope = cap.AGGREGATE
    elif ZONE in match:
        scope = cap.ZONE
    else:
        scope = cap.CLOUD
    zone = failed.zone or None
    test, where = cap.neighbours(failed.host, zone, scope, aggregates,
                                 settings.exclude_aggregates)
    if AGGREGATE in match and ZONE in match and scope == cap.AGGREGATE \
            and zone is not None:
        agg_test, agg_where = test, where

        def test(other: str, other_zone: Optional[str]) -> Optional[str]:
            return agg_test(other, other_zone) or (
                None if other_zone == zone else "in zone %s, not %s" % (
                    other_zone or "(none)", zone))
        where = "%s in zone %s" % (agg_where, zone) \
            if agg_where.startswith("aggregate") else agg_where
    candidates, refused = [], []
    for host in reserved_hosts(services, settings):
        if host == failed.host or host in already:
            continue
        if host in in_use:
            refused.append("%s is in use for %s" % (host, in_use[host]))
            continue
        svc = _service_of(host, services)
        assert svc is not None      # reserved_hosts named a host of services
        why = test(host, svc.zone)
        if why is not None:
            refused.append("%s %s" % (host, why))
            continue
        candidates.append(host)
    cap_n = settings.max_per_failed_host or None
    if shortfall is not None and capacities is not None:    # sizing
        return _by_shortfall(already, candidates, refused, shortfall,
                             capacities, cap_n, where)
    want = settings.per_failed_host
    if cap_n is not None:
        want = min(want, cap_n)
    new = candidates[:max(0, want - len(already))]
    hosts = already + tuple(new)
    missing = None
    if len(hosts) < want:
        missing = "%d reserved host(s) wanted, %d matching %s" % (
            want, len(hosts), where)
    why = "%d reserved host(s) per lost host%s" % (
        want, "" if shortfall is None else " (no capacities to size them)")
    return Choice(hosts, _reason(why, hosts, already, refused, where),
                  missing, already)


def _by_shortfall(already: Tuple[str, ...], candidates: Sequence[str],
                  refused: List[str], shortfall: "cap.Need",
                  capacities: Mapping[str, CapacityRecord],
                  cap_n: Optional[int], where: str) -> Choice:
    left = shortfall
    for host in already:
        if host in capacities:
            left = left.minus(cap.free_of(capacities[host]))
    chosen: List[str] = []
    unknown: List[str] = []
    for host in candidates:
        if not left:
            break
        if cap_n is not None and len(already) + len(chosen) >= cap_n:
            break
        if host not in capacities:
            unknown.append(host)
            continue
        f = cap.free_of(capacities[host])
        gives = left.minus(f)
        if gives == left:
            refused.append("%s has none of what is missing free" % host)
            continue
        left = gives
        chosen.append(host)
    refused.extend("%s: size unknown" % h for h in unknown)
    hosts = tuple(already) + tuple(chosen)
    if not shortfall:
        why = "nothing is missing"
    else:
        why = "to cover %s" % shortfall.describe()
    missing = None
    if left:
        missing = "%s not covered by reserved hosts matching %s" % (
            left.describe(), where)
        if cap_n is not None and len(hosts) >= cap_n:
            missing += " (at most %d per lost host)" % cap_n
    return Choice(hosts, _reason(why, hosts, already, refused, where),
                  missing, tuple(already))


def _reason(why: str, hosts: Sequence[str], already: Sequence[str],
            refused: Sequence[str], where: str) -> str:
    parts = [why + ", matching " + where]
    if hosts:
        new = [h for h in hosts if h not in already]
        if already:
            parts.append("already in use: " + ", ".join(already))
        if new:
            parts.append("bring in: " + ", ".join(new))
    else:
        parts.append("none chosen")
    if refused:
        parts.append("passed over: " + "; ".join(refused))
    return "; ".join(parts)


def targets(choice: Choice, settings: Settings = Settings()
            ) -> Tuple[str, ...]:
    """The hosts to aim the lost host's evacuations at: the chosen ones
    with ``target`` on, else none (the scheduler picks)."""
    return choice.hosts if settings.enabled and settings.target else ()


# -- returning ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Release:
    #: reserved hosts to disable again, by name
    hosts: Tuple[str, ...]
    #: host -> the disabled_reason to write
    reasons: Dict[str, str]
    #: why, for status and the journal
    reason: str


def release(failed_host: str, in_use: Mapping[str, str],
            settings: Settings = Settings(),
            original_reasons: Optional[Mapping[str, Optional[str]]] = None
            ) -> Release:
    """Once ``failed_host`` is back: which of the reserved hosts brought in
    for it (``in_use``: {reserved host: lost host}) return to the reserve,
    and the reason each is disabled with: the one in
    ``original_reasons`` ({reserved host: its disabled_reason before it
    was brought in}, from the journal) unless empty or one of
    instanceha's own, else ``"<prefix>: returned by instanceha"``."""
    mine = tuple(sorted(h for h, f in (in_use or {}).items()
                        if f == failed_host))
    if not mine:
        return Release((), {}, "no reserved host was brought in for %s"
                       % failed_host)
    if not settings.return_to_reserve:
        return Release((), {}, "return_to_reserve is off: %s stay(s) in "
                       "service" % ", ".join(mine))
    originals = original_reasons or {}
    reasons = {}
    for host in mine:
        old = originals.get(host)
        if isinstance(old, str) and old.strip() \
                and not is_ours(old):
            reasons[host] = old
        else:
            reasons[host] = settings.returned_reason
    return Release(mine, reasons, "%s is back: %s return(s) to the reserve"
                   % (failed_host, ", ".join(mine)))
