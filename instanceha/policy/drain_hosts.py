"""The hosts and services a drain needs; pure.

Rules (exact):

* a destination is a host of ``capacities`` other than the drained one
  whose compute service is enabled, up and not forced down (so says its
  HostFacts, and each ``nova-compute`` record of ``services`` for it when
  there are any), with a known capacity (:func:`host_why`; when no
  capacity could be read at all, every such host, and the room and HA
  admission checks refuse, softly, as not checked);
* ``nova-conductor`` and ``nova-scheduler``: at least one service of each
  must be up and not forced down, whatever the host holds;
* the drained host's own ``nova-compute`` must be up and not forced down
  (disabled is fine: the drain disables it) when anything is to move or
  be waited for: Nova migrates only from a running compute service.

Each failure is a hard :class:`Refusal`: force cannot override it.
"""

import dataclasses
from typing import (Collection, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union, cast)

from instanceha.policy.capacity_free import free_of
from instanceha.policy.facts import CapacityRecord, HostFacts, ServiceRecord
from instanceha.policy.facts_nova import host_facts

#: refusal kinds of this module
SERVICE = "service"
DESTINATION = "destination"

CONDUCTOR = "nova-conductor"
SCHEDULER = "nova-scheduler"
COMPUTE = "nova-compute"


@dataclasses.dataclass(frozen=True)
class Refusal:
    #: SERVICE, DESTINATION, or drain.KINDS' others
    kind: str
    #: the server id, host, service binary or zone it is about
    subject: str
    text: str
    #: force cannot override it: no migration could run
    hard: bool = False

    def __str__(self) -> str:
        return self.text


def service_why(svc: ServiceRecord) -> Optional[str]:
    """Why a service record is not usable, None when it is up."""
    if getattr(svc, "forced_down", False):
        return "forced down"
    if svc.state != "up":
        return "down (state %s)" % svc.state
    return None


def as_hosts(capacities: Union[None, Mapping[str, HostFacts],
                              Mapping[str, CapacityRecord],
                              Iterable[HostFacts]],
             services: Sequence[ServiceRecord]
             ) -> Tuple[Dict[str, HostFacts], bool]:
    """({host: HostFacts}, whether capacities are known) from what
    :func:`~instanceha.policy.drain.plan` was given: HostFacts (a mapping
    or a list); or {host: HostCapacity}, made HostFacts with
    ``services`` (:func:`~instanceha.policy.facts_nova.host_facts`); or
    None (Placement could not be read): every compute service of
    ``services``, capacity unknown."""
    if capacities is None:
        return host_facts({}, services), False
    items = list(capacities.values() if isinstance(capacities, Mapping)
                 else capacities)
    if isinstance(capacities, Mapping) and not any(
            isinstance(h, HostFacts) for h in items):
        # no HostFacts among them: {host: HostCapacity}
        return host_facts(cast(Mapping[str, CapacityRecord], capacities),
                          services), True
    out: Dict[str, HostFacts] = {}
    for h in items:
        if not isinstance(h, HostFacts):
            raise TypeError("capacities must hold HostFacts (see "
                            "facts_nova.host_facts) or be {host: "
                            "HostCapacity}, not hold %s" % type(h).__name__)
        if h.host in out:
            raise ValueError("host %r is given twice" % h.host)
        out[h.host] = h
    return out, True


def host_why(h: HostFacts, services: Iterable[ServiceRecord],
             counted: bool = True
             ) -> Optional[str]:
    """Why ``h`` is not a destination, None when it is. ``counted``
    False: capacities are unknown altogether, a host is not held to
    having one."""
    if not h.enabled:
        return "disabled"
    if h.forced_down:
        return "forced down"
    if not h.up:
        return "not up"
    for svc in services:
        if svc.host == h.host and getattr(svc, "binary", COMPUTE) == COMPUTE:
            if svc.status != "enabled":
                return "disabled"
            why = service_why(svc)
            if why is not None:
                return why
    if counted and h.capacity is None:
        return "no capacity known"
    return None


def service_refusals(host: str, services: Sequence[ServiceRecord],
                     moving: bool) -> List[Refusal]:
    out: List[Refusal] = []
    for binary in (CONDUCTOR, SCHEDULER):
        recs = [s for s in services if getattr(s, "binary", None) == binary]
        up = [s for s in recs if service_why(s) is None]
        if not recs:
            out.append(Refusal(SERVICE, binary, "%s: no service known; "
                               "Nova cannot migrate without one" % binary,
                               hard=True))
        elif not up:
            out.append(Refusal(SERVICE, binary, "%s: 0 of %d service(s) up "
                               "(%s); Nova cannot migrate without one" % (
                                   binary, len(recs), ", ".join(
                                       "%s %s" % (s.host, service_why(s))
                                       for s in sorted(
                                           recs, key=lambda s: s.host))),
                               hard=True))
    if moving:
        mine = [s for s in services if s.host == host
                and getattr(s, "binary", COMPUTE) == COMPUTE]
        bad = [service_why(s) for s in mine if service_why(s)]
        if not mine:
            out.append(Refusal(SERVICE, host, "%s on %s: no service known; "
                               "Nova migrates only from a running compute "
                               "service" % (COMPUTE, host), hard=True))
        elif bad:
            out.append(Refusal(SERVICE, host, "%s on %s is %s; Nova "
                               "migrates only from a running compute "
                               "service" % (COMPUTE, host, bad[0]),
                               hard=True))
    return out


def source_zone_of(host: str, hosts: Mapping[str, HostFacts],
                   services: Iterable[ServiceRecord]) -> Optional[str]:
    if host in hosts:
        return hosts[host].zone
    zones = {getattr(s, "zone", None) for s in services
             if s.host == host and getattr(s, "binary", COMPUTE) == COMPUTE}
    return (next(iter(zones)) or None) if len(zones) == 1 else None


def destinations(host: str, hosts: Mapping[str, HostFacts],
                 services: Sequence[ServiceRecord],
                 counted: bool = True
                 ) -> Tuple[List[HostFacts], Dict[str, str]]:
    """(the destinations of ``host``'s servers, sorted by host; {other
    compute host: why it is not one}): see the module docstring. A
    compute service with no HostFacts is not one (no capacity known)."""
    dests: List[HostFacts] = []
    skipped: Dict[str, str] = {}
    for name in sorted(hosts):
        if name == host:
            continue
        why = host_why(hosts[name], services, counted)
        if why is None:
            dests.append(hosts[name])
        else:
            skipped[name] = why
    for svc in services:
        if getattr(svc, "binary", COMPUTE) == COMPUTE and \
                svc.host != host and svc.host not in hosts:
            skipped.setdefault(svc.host, "no capacity known")
    return dests, dict(sorted(skipped.items()))


def retry_destination(host: str, hosts: Mapping[str, HostFacts],
                      services: Sequence[ServiceRecord],
                      tried: Collection[str]) -> Optional[str]:
    """Where a server whose migration from ``host`` got stuck goes next:
    a destination (as :func:`destinations` says) other than those in
    ``tried``, in the source host's zone when it has one, the one with
    the most free RAM known (ties: by name); None when there is none
    left (Nova's scheduler then chooses, maybe one tried before). Nova's
    scheduler still checks the host asked for."""
    zone = source_zone_of(host, hosts, services)
    left = [h for h in destinations(host, hosts, services)[0]
            if h.host not in tried and (zone is None or h.zone == zone)]
    if not left:
        return None

    def free_ram(h: HostFacts) -> int:
        if h.capacity is None:
            return -1
        return free_of(h.capacity).ram_mb
    return min(left, key=lambda h: (-free_ram(h), h.host)).host


def no_destination(host: str, skipped: Mapping[str, str]) -> Refusal:
    """The hard refusal when servers are to move and no host can take
    them, naming each other host and why."""
    return Refusal(DESTINATION, host, "no destination host for %s: 0 of %d "
                   "other compute host(s) are enabled, up and of known "
                   "capacity%s" % (host, len(skipped), "" if not skipped
                                   else " (%s)" % ", ".join(
                                       "%s %s" % kv
                                       for kv in sorted(skipped.items()))),
                   hard=True)
