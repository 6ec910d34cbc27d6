"""Room for a drained host's servers, and HA admission after the drain;
pure.

Room (:func:`room`), exact: the servers that move (``live``, ``cold``,
``confirm``) with a known size are placed on paper with
:func:`~instanceha.policy.capacity.preflight` (most free RAM first, the
free amounts of :func:`~instanceha.policy.capacity_free.free_of`, no
headroom), in the drain's order: first those pinned to an availability
zone, zone by zone (by name), on the destinations of that zone only;
then those pinned to none on every destination, with what the zones left.
A server no destination has room for is one refusal; so is a group whose
total need exceeds what it has free. The drained host's zone is always
reported, with nothing to move too.

HA admission (:func:`admission`), exact, per resource (vCPU, RAM, disk;
disk only when every host of the group reports disk): a group of hosts
passes when ``capacity - reserve >= load``, where ``capacity`` is the sum
of the hosts' usable amounts, ``reserve`` the sum of the ``N`` largest
(``ha_reserve_hosts``; the largest in each resource, possibly different
hosts) and ``load`` what the hosts use now plus what the drain brings
them. Groups: the source host's zone and each zone servers are pinned to
(hosts of that zone, the servers pinned to it), and the whole cloud
(every destination, every moving server) when some server is pinned to
no zone or the source's zone is unknown. A group of ``N`` hosts or fewer
fails. Placement of the drained servers does not matter to this rule:
whatever host fails, its servers must fit in what the others have left.
"""

import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from instanceha.policy import capacity as cap
from instanceha.policy.capacity_free import Free, free_of
from instanceha.policy.capacity_need import Need, int_or_none
from instanceha.policy.facts import CapacityRecord, HostFacts

#: resource -> (Need field, unit)
_UNITS = ((cap.VCPUS, "vcpus", "vCPU"), (cap.RAM, "ram_mb", "MB RAM"),
          (cap.DISK, "disk_gb", "GB disk"))


def _capacity(h: HostFacts) -> CapacityRecord:
    """A destination's capacity: known (drain_hosts.host_why refuses a
    host without one when capacities are counted, and room and admission
    run only then)."""
    assert h.capacity is not None, h.host
    return h.capacity


def where(zone: Optional[str]) -> str:
    return "zone %s" % zone if zone is not None else "any zone"


def _sum(frees: Iterable[Free]) -> Tuple[Need, bool]:
    """(the free amounts added up, whether every host reports disk)."""
    frees = list(frees)
    return (Need(sum(f.vcpus for f in frees), sum(f.ram_mb for f in frees),
                 sum(f.disk_gb or 0 for f in frees)),
            all(f.disk_gb is not None for f in frees))


@dataclasses.dataclass(frozen=True)
class ZoneRoom:
    """Room for the servers of one group: those pinned to ``zone``, or to
    none (``zone`` None: every destination)."""
    zone: Optional[str]
    hosts: Tuple[str, ...]
    #: the counted servers of the group, in the drain's order
    servers: Tuple[str, ...]
    needed: Need
    #: free on ``hosts`` when the group's turn comes
    free: Need
    #: False: some host reports no disk, disk is not checked
    disk_checked: bool
    #: server id -> why no destination has room for it
    pending: Mapping[str, str]
    #: needed beyond what is free (0 where disk is not checked)
    shortfall: Need
    text: str

    @property
    def fits(self) -> bool:
        return not self.pending and not self.shortfall


def room(ordered: Sequence[Tuple[str, Optional[str], Need]],
         destinations: Sequence[HostFacts],
         source_zone: Optional[str] = None) -> Tuple[ZoneRoom, ...]:
    """``ordered``: (server id, zone or None, Need) of the moving servers
    of known size, in the drain's order; ``destinations``: the hosts that
    may take them (capacity known). One ZoneRoom per group with servers,
    and one for ``source_zone`` (the drained host's: what its zone has
    free, even with nothing to move; None when unknown: every
    destination); pinned zones by name first, then zone None."""
    frees: Dict[str, Free] = {h.host: free_of(_capacity(h))
                              for h in destinations}
    zone_of = {h.host: h.zone for h in destinations}
    zones = {z for _, z, _ in ordered if z is not None}
    if source_zone is not None:
        zones.add(source_zone)
    groups: List[Optional[str]] = list(sorted(zones))
    if source_zone is None or any(z is None for _, z, _ in ordered):
        groups.append(None)
    out = []
    for zone in groups:
        members = [(sid, need) for sid, z, need in ordered if z == zone]
        hosts = tuple(sorted(h for h in frees
                             if zone is None or zone_of[h] == zone))
        free, disk_checked = _sum(frees[h] for h in hosts)
        needed = Need()
        for _, need in members:
            needed = needed + need
        pre = cap.preflight(members, [frees[h] for h in hosts],
                            cap.Settings(), where(zone))
        for sid, host in pre.placed.items():
            frees[host] = frees[host].take(dict(members)[sid])
        shortfall = needed.minus(free)
        if not disk_checked:
            shortfall = Need(shortfall.vcpus, shortfall.ram_mb, 0)
        text = "%s: %d server(s) need %s; %d host(s) have %s free%s" % (
            where(zone), len(members), needed.describe(), len(hosts),
            free.describe(), "" if disk_checked else " (disk unchecked)")
        if shortfall:
            text += ": short of %s" % shortfall.describe()
        elif pre.pending:
            text += ": %d server(s) fit on no single host" % len(pre.pending)
        out.append(ZoneRoom(zone, hosts, tuple(s for s, _ in members),
                            needed, free, disk_checked, dict(pre.pending),
                            shortfall, text))
    return tuple(out)


# -- HA admission --------------------------------------------------------------

def _n(value: object) -> int:
    n = int_or_none(value)
    return n if n is not None and n > 0 else 0


def _totals(host: HostFacts) -> Tuple[Need, Need, bool]:
    """(usable, used, reports disk) of ``host``'s capacity."""
    c = _capacity(host)
    disk = bool(_n(c.disk_gb) or _n(c.disk_gb_used))
    return (Need(_n(c.vcpus), _n(c.ram_mb), _n(c.disk_gb)),
            Need(_n(c.vcpus_used), _n(c.ram_mb_used), _n(c.disk_gb_used)),
            disk)


@dataclasses.dataclass(frozen=True)
class AdmissionCheck:
    #: the group: a zone, or None for every destination
    zone: Optional[str]
    hosts: Tuple[str, ...]
    #: resource (vcpus, ram, disk) -> the N largest hosts in it
    largest: Mapping[str, Tuple[str, ...]]
    #: usable in all
    capacity: Need
    #: the N largest hosts' usable amounts, per resource
    reserve: Need
    #: used now plus what the drain brings
    load: Need
    disk_checked: bool
    ok: bool
    #: one line per failing resource (empty when ok)
    failures: Tuple[str, ...]
    text: str


@dataclasses.dataclass(frozen=True)
class Admission:
    #: ha_reserve_hosts: N; 0: the check is off
    reserve_hosts: int
    checks: Tuple[AdmissionCheck, ...]
    ok: bool
    text: str


def _check(zone: Optional[str], hosts: Sequence[HostFacts], brought: Need,
           n: int
           ) -> AdmissionCheck:
    names = tuple(sorted(h.host for h in hosts))
    totals = {h.host: _totals(h) for h in hosts}
    capacity, used = Need(), Need()
    for usable, busy, _ in totals.values():
        capacity, used = capacity + usable, used + busy
    disk_checked = bool(hosts) and all(d for _, _, d in totals.values())
    load = used + brought
    largest: Dict[str, Tuple[str, ...]] = {}
    reserve: Dict[str, int] = {}
    for resource, field, _ in _UNITS:
        top = sorted(names, key=lambda h: (-getattr(totals[h][0], field),
                                           h))[:n]
        largest[resource] = tuple(top)
        reserve[field] = sum(getattr(totals[h][0], field) for h in top)
    reserve_need = Need(**reserve)
    at = where(zone) if zone is not None else "the cloud"
    failures = []
    if len(hosts) <= n:
        failures.append(
            "HA admission in %s: %d host(s) would be left (%s), which "
            "cannot absorb the loss of %d" % (
                at, len(hosts), ", ".join(names) or "none", n))
    else:
        for resource, field, unit in _UNITS:
            if resource == cap.DISK and not disk_checked:
                continue
            left = getattr(capacity, field) - getattr(reserve_need, field)
            need = getattr(load, field)
            if need > left:
                failures.append(
                    "HA admission in %s: after the drain %d host(s) would "
                    "use %d of %d %s; without the largest %d (%s: %d) %d "
                    "remain, short of %d %s" % (
                        at, len(hosts), need, getattr(capacity, field),
                        unit, n, ", ".join(largest[resource]),
                        getattr(reserve_need, field), left, need - left,
                        unit))
    if failures:
        text = "; ".join(failures)
    else:
        text = "%s: %d host(s) absorb the loss of their largest %d: %s" % (
            at, len(hosts), n, ", ".join(
                "%d of %d %s" % (getattr(load, f),
                                 getattr(capacity, f) - getattr(
                                     reserve_need, f), u)
                for r, f, u in _UNITS
                if r != cap.DISK or disk_checked))
    return AdmissionCheck(zone, names, largest, capacity, reserve_need, load,
                          disk_checked, not failures, tuple(failures), text)


def admission(moving: Sequence[Tuple[str, Optional[str], Need]],
              destinations: Sequence[HostFacts], source_zone: Optional[str],
              reserve_hosts: int) -> Admission:
    """The HA admission verdict: see the module docstring. ``moving``:
    (server id, zone or None, Need) of the servers that move, of known
    size; ``destinations``: the hosts they may go to (capacity known)."""
    if reserve_hosts <= 0:
        return Admission(0, (), True, "HA admission off (ha_reserve_hosts "
                         "= 0)")
    zones = {z for _, z, _ in moving if z is not None}
    if source_zone is not None:
        zones.add(source_zone)
    groups: List[Optional[str]] = list(sorted(zones))
    if source_zone is None or any(z is None for _, z, _ in moving):
        groups.append(None)
    checks = []
    for zone in groups:
        hosts = [h for h in destinations if zone is None or h.zone == zone]
        brought = Need()
        for _, z, need in moving:
            if zone is None or z == zone:
                brought = brought + need
        checks.append(_check(zone, hosts, brought, reserve_hosts))
    ok = all(c.ok for c in checks)
    return Admission(reserve_hosts, tuple(checks), ok,
                     "; ".join(c.text for c in checks))
