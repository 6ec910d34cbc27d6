"""Failover capacity: how many hosts of a scope can fail at once with every
server the recovery policy would evacuate still placed; pure.

For each scope (each availability zone, each host aggregate, each pool of
reserved hosts, and the whole cloud) :func:`measure` answers: *how many of
the largest hosts of the scope can be lost now, together, with every
server of theirs that the recovery policy would evacuate rebuilt on the
scope's remaining hosts*. The answer is a number of hosts, ``k``; below 1,
the loss of the scope's largest host would leave servers waiting for
capacity.

Inputs (:class:`HostLoad`, one per compute host, built by :func:`loads`
from the same records the capacity preflight reads):

* what each host has free: Placement's usable amount (inventory minus
  reserved, times the allocation ratio) minus its allocations, minus
  ``[capacity] headroom_percent`` (:func:`~instanceha.policy.
  capacity_free.free_of`);
* what each host would have to evacuate if lost: the sizes
  (:class:`~instanceha.policy.capacity_need.Need`) and priorities of the
  servers the recovery policy selects (the caller applies the selection:
  the engine's :func:`~instanceha.engine.selection.decide`), counted per
  host and size. A server whose size is unknown is never held back by the
  preflight, so it is not counted here either (its number is reported).

Rules (exact):

* Resources: those of ``[capacity] resources``; a host reporting no disk
  (shared storage) is not checked for disk.
* Priorities: servers below ``min_priority`` (when set) are not counted:
  their loss may leave them waiting without lowering the answer.
* Which hosts may fail (the scope's *members*): its compute hosts that are
  not reserved hosts, whatever their service's state (a disabled host's
  servers are counted only when the caller counts them: ``[policy]
  recover_disabled_hosts``).
* Which hosts take the servers (the scope's *destinations*): its members
  that are enabled, ``up``, not forced down and known to Placement, and
  not among the lost ones; and, while reserved hosts are on, the scope's
  reserved hosts (they are brought in for a lost host): at most
  ``max_per_failed_host`` of them per lost host when that cap is set,
  taken by name as the reserve chooses them.
* Scopes: ``zone:NAME`` (its members and reserved hosts in that zone),
  ``aggregate:NAME`` (each host aggregate not excluded: ``[capacity]
  exclude_aggregates`` and ``[recovery] global_aggregate``; an aggregate
  that sets an availability zone is that zone's scope, not one more),
  ``reserved:WHERE`` (the reserved hosts alone, grouped as ``[reserved_hosts]
  match`` groups them: per zone, per aggregate, both, or one pool; its
  members are the other hosts of the group) and ``cloud``. A scope's answer
  is about its own hosts: servers that the capacity scope would let go
  elsewhere are still counted in their host's zone.
* The lost hosts, for ``k``: the ``k`` largest members, largest by what
  their counted servers need (each resource as a share of the cloud's
  free and needed amount, summed), then by room, then by name. That is
  the worst case among likely losses, not among every ``k`` hosts: two
  smaller hosts whose servers pack badly may leave less room than the
  largest two.
* Placement on paper, per ``k``: the lost hosts' servers, grouped by size,
  largest first (first-fit decreasing on the multi-resource need: each
  size as a share as above, then by vCPU, RAM, disk), each group on the
  destinations in order of room (largest first, then by name), as many on
  each as fit. ``k`` hosts can fail when every server finds room.
* The answer: the largest ``k`` found placing everything, searched from
  the ``k`` the scope's totals allow (what the lost hosts need at most
  what the others have free, per resource) downwards, in steps doubling
  until one fits, then by bisection; never above ``limit``. First-fit decreasing is a sound greedy: each
  placement it finds is a real one, so every ``k`` at or below the answer
  fits too; but bin packing is hard, so where it fails a better packing
  may exist, and the answer is then a lower bound. Nova's scheduler is not
  bound to this placement; its filters (affinity, traits, NUMA) may refuse
  what Placement's counts allow.
* A scope whose members lose nothing (no counted server) can lose them
  all: the answer is its member count (at most ``limit``). A scope with
  no member (only reserved hosts) is not reported.

Speed: servers are counted once per host and size (no per-server work in
the search); a check of ``k`` touches only the lost hosts' size groups and
the destinations it fills, with the free amounts copied on write.
"""

import collections
import dataclasses
import heapq
from typing import (Callable, Collection, Dict, Iterable, List, Mapping,
                    Optional, Sequence, Set, Tuple, Union)

from instanceha.policy.capacity_free import Free, free_of
from instanceha.policy.capacity_need import DISK, RAM, VCPUS, Need
from instanceha.policy.capacity_settings import Settings as CapacitySettings
from instanceha.policy.facts import (AggregateRecord, CapacityRecord,
                                     ServiceRecord)
from instanceha.policy import reserved as reserved_mod

ZONE = "zone"
AGGREGATE = "aggregate"
RESERVED = "reserved"
CLOUD = "cloud"

#: an answer is never searched above this many hosts by default
DEFAULT_LIMIT = 100

#: disk on a host that reports none (shared storage): never short
_UNBOUNDED = 1 << 62

#: (vCPU, MB RAM, GB disk)
Vec = Tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class HostLoad:
    """One compute host as failover capacity sees it."""
    host: str
    #: what it has free (headroom taken off); None: unknown to Placement
    #: (it takes nothing)
    free: Optional[Free] = None
    #: (size, priority, how many) of the servers the recovery policy
    #: would evacuate if it were lost, their size known
    servers: Tuple[Tuple[Need, int, int], ...] = ()
    zone: Optional[str] = None
    aggregates: Tuple[str, ...] = ()
    #: enabled, up, not forced down: it may take servers
    destination: bool = True
    #: a reserved host (brought in when a host is lost)
    reserved: bool = False
    #: servers the policy would evacuate whose size is unknown
    unknown: int = 0


@dataclasses.dataclass(frozen=True)
class Settings:
    resources: Tuple[str, ...] = (VCPUS, RAM, DISK)
    #: reserved hosts are brought in for lost hosts
    reserved: bool = False
    #: how reserved pools are grouped ([reserved_hosts] match)
    reserved_match: Tuple[str, ...] = (ZONE,)
    #: reserved hosts per lost host (0: no cap)
    max_per_failed_host: int = 0
    exclude_aggregates: Tuple[str, ...] = ()
    #: servers below this priority are not counted (None: all)
    min_priority: Optional[int] = None
    #: never search above this many hosts
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) \
                or self.limit < 1:
            raise ValueError("limit must be an integer >= 1, not %r"
                             % (self.limit,))

    @classmethod
    def of(cls, capacity: CapacitySettings,
           reserved: Optional[reserved_mod.Settings] = None,
           min_priority: Optional[int] = None,
           limit: int = DEFAULT_LIMIT) -> "Settings":
        """From the capacity preflight's and the reserve's settings."""
        rs = reserved or reserved_mod.Settings()
        return cls(resources=capacity.resources, reserved=rs.enabled,
                   reserved_match=rs.match,
                   max_per_failed_host=rs.max_per_failed_host,
                   exclude_aggregates=tuple(sorted(
                       set(capacity.exclude_aggregates)
                       | set(rs.exclude_aggregates))),
                   min_priority=min_priority, limit=limit)


@dataclasses.dataclass(frozen=True)
class ScopeCapacity:
    #: 'zone:az1', 'aggregate:agg1', 'reserved:zone az1', 'cloud'
    scope: str
    #: how many of its largest hosts can fail at once (see the module)
    hosts: int
    #: hosts that may fail, and hosts that would take their servers
    members: int
    destinations: int
    #: the searched answer reached ``limit``: at least that many
    capped: bool
    #: the largest members, in the order they are lost (at most hosts + 1)
    largest: Tuple[str, ...]
    #: one line for status
    text: str

    def as_dict(self) -> Dict[str, object]:
        """For status: the largest members cut to the first five."""
        d = dataclasses.asdict(self)
        d["largest"] = list(self.largest[:5])
        return d


@dataclasses.dataclass(frozen=True)
class Report:
    scopes: Tuple[ScopeCapacity, ...]
    #: servers the policy would evacuate whose size is unknown (not
    #: counted)
    unknown: int = 0
    #: servers counted
    counted: int = 0

    def as_dict(self) -> Dict[str, object]:
        return {"scopes": [s.as_dict() for s in self.scopes],
                "unknown": self.unknown, "counted": self.counted}

    def lowest(self) -> Optional[ScopeCapacity]:
        return min(self.scopes, key=lambda s: (s.hosts, s.scope),
                   default=None)


# -- building the inputs ------------------------------------------------------

def loads(services: Iterable[ServiceRecord],
          capacities: Mapping[str, CapacityRecord],
          aggregates: Optional[Iterable[AggregateRecord]],
          servers: Union[Iterable[Tuple[str, Optional[Need], int]],
                         Mapping[Tuple[str, Optional[Need], int], int]],
          capacity: CapacitySettings = CapacitySettings(),
          reserved: Optional[reserved_mod.Settings] = None
          ) -> List[HostLoad]:
    """One :class:`HostLoad` per compute host of ``services`` (or of
    ``capacities``), sorted by host. ``servers``: (host, size or None,
    priority) of each server the recovery policy would evacuate if its
    host were lost, or those tuples counted ({tuple: how many}). A host with several service records is a destination
    only when each says so, and reserved only when each does."""
    rs = reserved or reserved_mod.Settings()
    zone: Dict[str, Optional[str]] = {}
    dest: Dict[str, bool] = {}
    res: Dict[str, bool] = {}
    for svc in services:
        if getattr(svc, "binary", "nova-compute") != "nova-compute":
            continue
        h = svc.host
        zone[h] = svc.zone if zone.get(h, svc.zone) == svc.zone else None
        ok = (svc.status == "enabled" and not svc.forced_down
              and svc.state == "up")
        dest[h] = dest.get(h, True) and ok
        is_res = rs.enabled and reserved_mod.is_reserved(svc, rs)
        res[h] = res.get(h, True) and is_res
    for h in capacities:
        zone.setdefault(h, None)
        dest.setdefault(h, False)
        res.setdefault(h, False)
    member: Dict[str, List[str]] = {}
    for agg in aggregates or ():
        if getattr(agg, "zone", None) or \
                (agg.metadata or {}).get("availability_zone"):
            continue                # an availability zone: its own scope
        for h in agg.hosts or ():
            member.setdefault(h, []).append(agg.name)
    # Counted in C (one tuple per server, no Python work per server),
    # unless the caller counted them while reading.
    tally: Mapping[Tuple[str, Optional[Need], int], int] = \
        servers if isinstance(servers, Mapping) \
        else collections.Counter(servers)
    counts: Dict[str, List[Tuple[Need, int, int]]] = {}
    unknown: Dict[str, int] = {}
    for (host, need, priority), n in tally.items():
        if need is None:
            unknown[host] = unknown.get(host, 0) + n
        else:
            counts.setdefault(host, []).append((need, priority, n))
    out = []
    for h in sorted(zone):
        cap = capacities.get(h)
        free = free_of(cap, capacity.headroom_percent) \
            if cap is not None else None
        out.append(HostLoad(
            host=h, free=free,
            servers=tuple(counts.get(h, ())),
            zone=zone[h], aggregates=tuple(sorted(set(member.get(h, ())))),
            destination=dest[h] and free is not None,
            reserved=res[h] and free is not None, unknown=unknown.get(h, 0)))
    return out


# -- the measure --------------------------------------------------------------

class _Cloud:
    """The hosts as flat lists, indexed: what every scope reads."""

    def __init__(self, hosts: Sequence[HostLoad], settings: Settings) -> None:
        r = set(settings.resources)
        use_v, use_r, use_d = VCPUS in r, RAM in r, DISK in r
        self.names = [h.host for h in hosts]
        if len(set(self.names)) != len(self.names):
            raise ValueError("a host is given twice")
        self.fv: List[int] = []
        self.fr: List[int] = []
        self.fd: List[int] = []
        #: per host: [(size index, count)] counted
        self.load: List[List[Tuple[int, int]]] = []
        self.total: List[Vec] = []
        self.sizes: List[Vec] = []
        index: Dict[Vec, int] = {}
        self.counted = 0
        self.unknown = sum(h.unknown for h in hosts)
        floor = settings.min_priority
        #: id(Need) -> its amounts (the Needs live as long as ``hosts``)
        seen: Dict[int, Vec] = {}
        for h in hosts:
            f = h.free
            self.fv.append(f.vcpus if f is not None else 0)
            self.fr.append(f.ram_mb if f is not None else 0)
            self.fd.append(_UNBOUNDED if f is None or f.disk_gb is None
                           else f.disk_gb)
            per: Dict[int, int] = {}
            tv = tr = td = 0
            for need, priority, count in h.servers:
                if floor is not None and priority < floor:
                    continue
                vec = seen.get(id(need))
                if vec is None:
                    vec = seen[id(need)] = (
                        need.vcpus if use_v else 0,
                        need.ram_mb if use_r else 0,
                        need.disk_gb if use_d else 0)
                self.counted += count
                if vec == (0, 0, 0):
                    continue
                j = index.get(vec)
                if j is None:
                    j = index[vec] = len(self.sizes)
                    self.sizes.append(vec)
                per[j] = per.get(j, 0) + count
                tv += vec[0] * count
                tr += vec[1] * count
                td += vec[2] * count
            self.load.append(list(per.items()))
            self.total.append((tv, tr, td))
        # Shares: each resource against the cloud's free plus needed
        # amount (disk on shared storage left out).
        sv = sum(self.fv) + sum(t[0] for t in self.total)
        sr = sum(self.fr) + sum(t[1] for t in self.total)
        sd = sum(d for d in self.fd if d != _UNBOUNDED) \
            + sum(t[2] for t in self.total)
        self.w = (1.0 / sv if sv else 0.0, 1.0 / sr if sr else 0.0,
                  1.0 / sd if sd else 0.0)
        self.size_key = [self._share(v) for v in self.sizes]
        self.load_share = [self._share(t) for t in self.total]
        self.room_share = [
            self._share((self.fv[i], self.fr[i],
                         0 if self.fd[i] == _UNBOUNDED else self.fd[i]))
            for i in range(len(self.names))]
        every = range(len(self.names))
        neg_load = [-x for x in self.load_share]
        neg_room = [-x for x in self.room_share]
        #: each host's place in the order of loss (largest load, then
        #: most room, then name) and in the order of destinations (most
        #: room, then name): sorted once, every scope sorts by these
        self.loss_rank = _ranks(sorted(every, key=list(zip(
            neg_load, neg_room, self.names)).__getitem__))
        self.room_rank = _ranks(sorted(every, key=list(zip(
            neg_room, self.names)).__getitem__))

    def _share(self, vec: Vec) -> float:
        w = self.w
        return vec[0] * w[0] + vec[1] * w[1] + vec[2] * w[2]


def _ranks(order: Sequence[int]) -> List[int]:
    rank = [0] * len(order)
    for r, i in enumerate(order):
        rank[i] = r
    return rank


@dataclasses.dataclass
class _Scope:
    name: str
    members: List[int]
    destinations: List[int]
    #: reserved hosts, by name
    spares: List[int]


def _fits(cloud: _Cloud, lost: Sequence[int], dests: Sequence[int],
          spares: Sequence[int]) -> bool:
    """Do the servers of ``lost`` all find room on ``dests`` (in order)
    then ``spares`` (both without the lost hosts)? First-fit decreasing,
    sizes grouped."""
    want: Dict[int, int] = {}
    for i in lost:
        for j, c in cloud.load[i]:
            want[j] = want.get(j, 0) + c
    if not want:
        return True
    gone = set(lost)
    order = [i for i in dests if i not in gone]
    order.extend(i for i in spares if i not in gone)
    sizes, key = cloud.sizes, cloud.size_key
    fv, fr, fd = cloud.fv, cloud.fr, cloud.fd
    over: Dict[int, List[int]] = {}
    start, end = 0, len(order)
    # the smallest amount any of the sizes needs, per resource: a host
    # with less of one is full for all of them
    mv = min(sizes[j][0] for j in want)
    mr = min(sizes[j][1] for j in want)
    md = min(sizes[j][2] for j in want)
    for j in sorted(want, key=lambda j: (-key[j], sizes[j])):
        count = want[j]
        nv, nr, nd = sizes[j]
        i = start
        while count and i < end:
            h = order[i]
            i += 1
            cur = over.get(h)
            if cur is None:
                cur = [fv[h], fr[h], fd[h]]
            fit = count
            if nv:
                a = cur[0] // nv
                if a < fit:
                    fit = a
            if nr:
                a = cur[1] // nr
                if a < fit:
                    fit = a
            if nd:
                a = cur[2] // nd
                if a < fit:
                    fit = a
            if fit <= 0:
                continue
            cur[0] -= fit * nv
            cur[1] -= fit * nr
            cur[2] -= fit * nd
            over[h] = cur
            count -= fit
        if count:
            return False
        # hosts at the front with nothing left are skipped from now on
        while start < end:
            cur = over.get(order[start])
            if cur is None or (cur[0] >= mv and cur[1] >= mr
                               and cur[2] >= md):
                break
            start += 1
    return True


def _spares_for(spares: Sequence[int], k: int, cap: int) -> Sequence[int]:
    return spares if not cap else spares[:k * cap]


def _bound(cloud: _Cloud, lost: Sequence[int], dests: Sequence[int],
           spares: Sequence[int], cap: int, limit: int) -> int:
    """The largest k (at most ``limit`` and the members) that the scope's
    totals allow: what the k first of ``lost`` need, per resource, at most
    what the other destinations and the usable spares have free."""
    fv, fr, fd = cloud.fv, cloud.fr, cloud.fd
    shared = any(fd[i] == _UNBOUNDED for i in dests) or any(
        fd[i] == _UNBOUNDED for i in spares)
    dv = sum(fv[i] for i in dests)
    dr = sum(fr[i] for i in dests)
    dd = 0 if shared else sum(fd[i] for i in dests)
    is_dest = set(dests)
    spare_pre = [(0, 0, 0)]
    for i in spares:
        a, b, c = spare_pre[-1]
        spare_pre.append((a + fv[i], b + fr[i],
                          0 if shared else c + fd[i]))
    nv = nr = nd = 0
    best = 0
    for k, i in enumerate(lost[:limit], 1):
        t = cloud.total[i]
        nv += t[0]
        nr += t[1]
        nd += t[2]
        if i in is_dest:
            dv -= fv[i]
            dr -= fr[i]
            if not shared:
                dd -= fd[i]
        s = spare_pre[min(len(spares), k * cap) if cap else len(spares)]
        if nv > dv + s[0] or nr > dr + s[1] or (
                not shared and nd > dd + s[2]):
            break
        best = k
    return best


def _search(cloud: _Cloud, scope: _Scope, limit: int, cap: int
            ) -> Tuple[int, bool, Tuple[str, ...]]:
    """(k, capped, the largest members in loss order) of one scope."""
    names = cloud.names
    members = scope.members
    if not members:
        return 0, False, ()
    take = min(len(members), limit + 1)
    lost = heapq.nsmallest(take, members, key=cloud.loss_rank.__getitem__)
    if not any(cloud.load[i] for i in members):
        k = min(len(members), limit)
        return k, k == limit and len(members) > limit, \
            tuple(names[i] for i in lost[:k])
    dests = sorted(scope.destinations, key=cloud.room_rank.__getitem__)
    spares = scope.spares

    def ok(k: int) -> bool:
        return _fits(cloud, lost[:k], dests, _spares_for(spares, k, cap))

    high = _bound(cloud, lost, dests, spares, cap, limit)
    # First-fit decreasing usually places nearly what the totals allow:
    # the bound first, then steps down doubling (1, 2, 4... below it)
    # until a k fits, then bisection between that k and the last that
    # did not.
    low, top = 0, high + 1          # low fits; top does not (or past)
    step = 0
    while top - low > 1:
        k = top - max(1, step)
        if k <= low:
            break
        if ok(k):
            low = k
            break
        top, step = k, step * 2 or 1
    while top - low > 1:
        mid = (low + top) // 2
        if ok(mid):
            low = mid
        else:
            top = mid
    capped = low == limit and len(members) > limit
    return low, capped, tuple(names[i] for i in lost[:low + 1])


def _scopes(hosts: Sequence[HostLoad], settings: Settings) -> List[_Scope]:
    ex = set(settings.exclude_aggregates)
    zones: Dict[str, List[int]] = {}
    aggs: Dict[str, List[int]] = {}
    for i, h in enumerate(hosts):
        if h.zone:
            zones.setdefault(h.zone, []).append(i)
        for a in h.aggregates:
            if a not in ex:
                aggs.setdefault(a, []).append(i)
    out: List[_Scope] = []

    def scope(name: str, where: Iterable[int]) -> _Scope:
        idx = list(where)
        members = [i for i in idx if not hosts[i].reserved]
        dests = [i for i in members if hosts[i].destination]
        spares = sorted((i for i in idx if hosts[i].reserved),
                        key=lambda i: hosts[i].host) \
            if settings.reserved else []
        return _Scope(name, members, dests, spares)

    for z in sorted(zones):
        out.append(scope("%s:%s" % (ZONE, z), zones[z]))
    for a in sorted(aggs):
        out.append(scope("%s:%s" % (AGGREGATE, a), aggs[a]))
    out.append(scope(CLOUD, range(len(hosts))))
    if settings.reserved:
        out.extend(_pools(hosts, settings, ex))
    return out


def _pools(hosts: Sequence[HostLoad], settings: Settings,
           exclude: Collection[str]) -> List[_Scope]:
    """The reserved pools: the reserve's hosts alone as destinations,
    grouped as the reserve matches them to a lost host."""
    match = set(settings.reserved_match)

    def keys(h: HostLoad) -> Set[str]:
        zone = ["zone %s" % h.zone] if h.zone else []
        aggs = ["aggregate %s" % a for a in h.aggregates
                if a not in exclude]
        if ZONE in match and AGGREGATE in match:
            return {"%s, %s" % (z, a) for z in zone for a in aggs}
        if ZONE in match:
            return set(zone)
        if AGGREGATE in match:
            return set(aggs)
        return {"any"}

    groups: Dict[str, Tuple[List[int], List[int]]] = {}
    for i, h in enumerate(hosts):
        if h.reserved:
            for key in keys(h):
                groups.setdefault(key, ([], []))[1].append(i)
    for i, h in enumerate(hosts):
        if not h.reserved:
            for key in keys(h):
                if key in groups:
                    groups[key][0].append(i)
    return [_Scope("%s:%s" % (RESERVED, key), members, [],
                   sorted(spares, key=lambda i: hosts[i].host))
            for key, (members, spares) in sorted(groups.items())]


def _text(s: ScopeCapacity) -> str:
    if not s.members:
        return "%s: no host that could fail" % s.scope
    if s.capped:
        return "%s: at least %d of %d hosts can fail" % (
            s.scope, s.hosts, s.members)
    if s.hosts == 0:
        first = s.largest[0] if s.largest else "?"
        return ("%s: losing its largest host (%s) would leave servers "
                "without room" % (s.scope, first))
    nxt = s.largest[s.hosts] if len(s.largest) > s.hosts else None
    return "%s: %d of %d hosts can fail%s" % (
        s.scope, s.hosts, s.members,
        "; losing %s as well would leave servers without room" % nxt
        if nxt else "")


def measure(hosts: Sequence[HostLoad], settings: Settings = Settings(),
            scopes: Optional[Callable[[str], bool]] = None) -> Report:
    """The failover capacity of every scope (see the module docstring).
    ``scopes(name)``: which scopes to measure (all when None)."""
    cloud = _Cloud(hosts, settings)
    out = []
    cap = settings.max_per_failed_host
    for sc in _scopes(hosts, settings):
        if not sc.members or (scopes is not None and not scopes(sc.name)):
            continue
        k, capped, largest = _search(cloud, sc, settings.limit, cap)
        partial = ScopeCapacity(sc.name, k, len(sc.members),
                                len(sc.destinations) + len(sc.spares),
                                capped, largest, "")
        out.append(dataclasses.replace(partial, text=_text(partial)))
    return Report(tuple(out), cloud.unknown, cloud.counted)
