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
  (dedicated CPUs). A server without an answer is never held back.
* :func:`free_of` / :class:`Free`: what a host still has (usable minus
  used, never negative), less the configured headroom.
* :func:`destinations`: which hosts could take the servers of the lost
  host, within the configured scope (``zone``, ``aggregate``, ``cloud``).
* :func:`preflight`: places the servers in priority order on a copy of the
  free capacity and says which fit, which wait and what is missing.
* :func:`check`: the three above in one call, for the engine.

Rules (exact):

* Need: ``vcpus`` and ``ram`` (MB) must be positive integers, ``disk``
  (GB) a non-negative integer; ``ephemeral`` (GB) and ``swap`` (MB) are
  non-negative integers, 0 when missing (``swap`` is ``""`` when 0 before
  microversion 2.75). Disk = root (0 when the server boots from a volume:
  its ``image`` is ``""``, None or missing) + ephemeral + swap rounded up to
  whole GB, as Nova asks Placement for it. Extra specs
  ``resources:VCPU``, ``resources:MEMORY_MB`` and ``resources:DISK_GB``
  override the flavor's amount as they do in Nova; a malformed override,
  ``resources:PCPU`` or ``hw:cpu_policy`` ``dedicated``/``mixed`` give no
  Need (Placement counts those CPUs as PCPU, which :class:`HostCapacity`
  does not report).
* Free: per resource ``max(0, total - used - headroom)``, where headroom is
  ``ceil(total * headroom_percent / 100)``; negative or non-integer numbers
  count as 0. A host reporting no disk at all (total and used 0: its disk
  is on a shared storage provider) has its disk not checked.
* Destinations: compute services that are enabled, ``up``, not forced
  down, not the source, and present in the capacities; a host with several
  service records must pass with each. Scope ``cloud``: every such host.
  ``zone``: the source's availability zone (from its compute service); a
  source whose zone is unknown matches every host; a host with no zone
  does not match a known one. ``aggregate``: hosts sharing at least one
  aggregate with the source, aggregates named in ``exclude_aggregates``
  ignored; a source in no other aggregate falls back to ``zone``.
* Placement simulation: servers in the given order; each goes to the
  destination with the most free RAM among those where it fits (ties by
  host name) and its need is deducted there. A server that fits nowhere
  waits and never blocks later, smaller ones (work-conserving). A server
  without a Need is admitted and deducts nothing. A server listed twice
  counts once.
"""

import dataclasses
import math
from typing import (Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple,
                    Union)

from instanceha.policy.evacuable import ERROR, FLAVOR, SERVER, WARNING, \
    Problem

ZONE = "zone"
AGGREGATE = "aggregate"
CLOUD = "cloud"
SCOPES = (ZONE, AGGREGATE, CLOUD)

VCPUS = "vcpus"
RAM = "ram"
DISK = "disk"
RESOURCES = (VCPUS, RAM, DISK)

#: extra specs that override a flavor's amount, as Nova reads them
_OVERRIDES = {"resources:VCPU": "vcpus", "resources:MEMORY_MB": "ram_mb",
              "resources:DISK_GB": "disk_gb"}


def _int(value) -> Optional[int]:
    """A Python int (not a bool), or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _spec_int(value) -> Optional[int]:
    """An extra spec's integer ('2', 2), or None."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and len(text) <= 18:
            return int(text)
        return None
    n = _int(value)
    return n if n is not None and n >= 0 else None


# -- needs --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Need:
    """What a server takes on its host: vCPUs, RAM in MB, disk in GB."""
    vcpus: int = 0
    ram_mb: int = 0
    disk_gb: int = 0

    def __post_init__(self):
        for name in ("vcpus", "ram_mb", "disk_gb"):
            n = _int(getattr(self, name))
            if n is None or n < 0:
                raise ValueError("Need.%s must be a non-negative integer, "
                                 "not %r" % (name, getattr(self, name)))

    def __add__(self, other: "Need") -> "Need":
        return Need(self.vcpus + other.vcpus, self.ram_mb + other.ram_mb,
                    self.disk_gb + other.disk_gb)

    def minus(self, other) -> "Need":
        """What is left of ``self`` once ``other`` (a Need or a Free) is
        taken away, each resource floored at 0."""
        return Need(max(0, self.vcpus - other.vcpus),
                    max(0, self.ram_mb - other.ram_mb),
                    max(0, self.disk_gb - other.disk_gb))

    def only(self, resources: Iterable[str]) -> "Need":
        """This need with the resources not in ``resources`` set to 0."""
        r = set(resources)
        return Need(self.vcpus if VCPUS in r else 0,
                    self.ram_mb if RAM in r else 0,
                    self.disk_gb if DISK in r else 0)

    def __bool__(self):
        return bool(self.vcpus or self.ram_mb or self.disk_gb)

    def describe(self) -> str:
        """'12 vCPU, 24576 MB RAM, 40 GB disk' (zero amounts left out;
        'nothing' when all are 0)."""
        parts = []
        if self.vcpus:
            parts.append("%d vCPU" % self.vcpus)
        if self.ram_mb:
            parts.append("%d MB RAM" % self.ram_mb)
        if self.disk_gb:
            parts.append("%d GB disk" % self.disk_gb)
        return ", ".join(parts) or "nothing"

    def __str__(self):
        return self.describe()


def _server_label(body) -> Tuple[str, str]:
    sid = body.get("id") if isinstance(body.get("id"), str) else ""
    name = body.get("name") if isinstance(body.get("name"), str) else ""
    return sid, name


def _label(sid, name):
    if name and sid and name != sid:
        return "server %s (%s)" % (name, sid)
    return "server %s" % (name or sid or "?")


def need_of(server_body) -> Tuple[Optional[Need], Optional[Problem]]:
    """(Need, None) for a server as Nova's GET /servers/detail gives it
    (a mapping, or a :class:`~instanceha.drivers.compute.base.Server`
    whose ``raw`` is that mapping), or (None, Problem) when its flavor
    cannot be counted: the caller then lets the scheduler decide for that
    server (it is never held back for capacity)."""
    body = getattr(server_body, "raw", server_body)
    if not isinstance(body, Mapping):
        return None, Problem(ERROR, SERVER, "", "", "flavor", None,
                             "server record is not a mapping (%s); its "
                             "size is unknown, the scheduler decides" %
                             type(body).__name__)
    sid, name = _server_label(body)
    who = _label(sid, name)
    flavor = body.get("flavor")

    def problem(message, value=None, level=ERROR, scope=SERVER,
                key="flavor"):
        return None, Problem(level, scope, sid, name, key,
                             None if value is None else str(value),
                             "%s: %s; its size is unknown, the scheduler "
                             "decides" % (who, message))

    if not isinstance(flavor, Mapping):
        return problem("no embedded flavor (compute microversion 2.47 or "
                       "later gives one)" if flavor is None else
                       "flavor is not a mapping", flavor)
    fname = flavor.get("original_name") or flavor.get("name") or ""
    fl = "flavor %s" % fname if isinstance(fname, str) and fname \
        else "its flavor"
    amounts = {}
    for key, minimum in (("vcpus", 1), ("ram", 1), ("disk", 0)):
        if key not in flavor:
            return problem("%s has no %r" % (fl, key))
        n = _int(flavor[key])
        if n is None or n < minimum:
            return problem("%s has %s=%r, not an integer >= %d" % (
                fl, key, flavor[key], minimum), flavor[key],
                scope=FLAVOR, key=key)
        amounts[key] = n
    for key in ("ephemeral", "swap"):
        raw = flavor.get(key, 0)
        if raw is None or (key == "swap" and raw == ""):
            raw = 0
        n = _int(raw)
        if n is None or n < 0:
            return problem("%s has %s=%r, not an integer >= 0" % (
                fl, key, raw), raw, scope=FLAVOR, key=key)
        amounts[key] = n
    image = body.get("image")
    from_volume = image is None or image == ""
    root = 0 if from_volume else amounts["disk"]
    need = {"vcpus": amounts["vcpus"], "ram_mb": amounts["ram"],
            "disk_gb": root + amounts["ephemeral"]
            + int(math.ceil(amounts["swap"] / 1024.0))}
    specs = flavor.get("extra_specs") or {}
    if not isinstance(specs, Mapping):
        return problem("%s has extra_specs that are not a mapping" % fl, specs, scope=FLAVOR,
                       key="extra_specs")
    policy = specs.get("hw:cpu_policy")
    if "resources:PCPU" in specs or (
            isinstance(policy, str)
            and policy.strip().lower() in ("dedicated", "mixed")):
        return problem("%s asks for dedicated CPUs (PCPU), which "
                       "capacity does not count" % fl,
                       policy if "resources:PCPU" not in specs
                       else specs["resources:PCPU"], level=WARNING,
                       scope=FLAVOR, key="resources:PCPU"
                       if "resources:PCPU" in specs else "hw:cpu_policy")
    for key, field in sorted(_OVERRIDES.items()):
        if key in specs:
            n = _spec_int(specs[key])
            if n is None:
                return problem("%s has %s=%r, not an integer >= 0"
                               % (fl, key, specs[key]),
                               specs[key], scope=FLAVOR, key=key)
            need[field] = n
    return Need(**need), None


# -- free capacity ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Free:
    """What a destination host can still take. ``disk_gb`` None: the host
    reports no disk (shared storage): disk is not checked there."""
    host: str
    vcpus: int = 0
    ram_mb: int = 0
    disk_gb: Optional[int] = 0

    def fits(self, need: Need) -> bool:
        return (need.vcpus <= self.vcpus and need.ram_mb <= self.ram_mb
                and (self.disk_gb is None or need.disk_gb <= self.disk_gb))

    def take(self, need: Need) -> "Free":
        return Free(self.host, self.vcpus - need.vcpus,
                    self.ram_mb - need.ram_mb,
                    None if self.disk_gb is None
                    else self.disk_gb - need.disk_gb)

    def describe(self) -> str:
        return "%s: %d vCPU, %d MB RAM, %s disk free" % (
            self.host, self.vcpus, self.ram_mb,
            "unchecked" if self.disk_gb is None else "%d GB" % self.disk_gb)

    @classmethod
    def from_capacity(cls, capacity, headroom_percent: int = 0) -> "Free":
        return free_of(capacity, headroom_percent)


def _count(value) -> int:
    n = _int(value)
    return n if n is not None and n > 0 else 0


def _left(total, used, headroom_percent) -> int:
    total, used = _count(total), _count(used)
    keep = -(-total * headroom_percent // 100)      # ceil, integers only
    return max(0, total - used - keep)


def free_of(capacity, headroom_percent: int = 0) -> Free:
    """A :class:`Free` from a
    :class:`~instanceha.drivers.compute.base.HostCapacity`: usable minus
    used minus headroom per resource, never negative."""
    no_disk = _count(capacity.disk_gb) == 0 \
        and _count(capacity.disk_gb_used) == 0
    return Free(capacity.host,
                _left(capacity.vcpus, capacity.vcpus_used, headroom_percent),
                _left(capacity.ram_mb, capacity.ram_mb_used,
                      headroom_percent),
                None if no_disk else _left(capacity.disk_gb,
                                           capacity.disk_gb_used,
                                           headroom_percent))


# -- settings -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Settings:
    #: hold back servers no destination has room for. On by default: it
    #: only delays servers that cannot fit by Placement's own counts, and
    #: with scope ``cloud`` it is never stricter than the scheduler.
    enabled: bool = True
    #: where a lost host's servers may go: zone | aggregate | cloud
    scope: str = CLOUD
    #: percentage of each destination's usable amounts kept free
    headroom_percent: int = 0
    #: which resources are checked (vcpus, ram, disk)
    resources: Tuple[str, ...] = RESOURCES
    #: aggregates that do not make hosts neighbours (scope aggregate)
    exclude_aggregates: Tuple[str, ...] = ()

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError("capacity scope must be one of %s, not %r" % (
                ", ".join(SCOPES), self.scope))
        h = _int(self.headroom_percent)
        if h is None or not 0 <= h <= 90:
            raise ValueError("headroom_percent must be an integer from 0 "
                             "to 90, not %r" % (self.headroom_percent,))
        unknown = [r for r in self.resources if r not in RESOURCES]
        if unknown:
            raise ValueError("unknown resource(s) %s; known: %s" % (
                ", ".join(map(repr, unknown)), ", ".join(RESOURCES)))
        object.__setattr__(self, "resources", tuple(
            r for r in RESOURCES if r in self.resources))
        object.__setattr__(self, "exclude_aggregates", tuple(
            sorted(set(self.exclude_aggregates))))

    @classmethod
    def from_conf(cls, conf):
        """From ``[capacity]``; ``[recovery] global_aggregate``, when set,
        is excluded from the aggregate scope too."""
        c = conf.capacity
        exclude = list(c.exclude_aggregates or ())
        glob = conf.recovery.global_aggregate
        if glob:
            exclude.append(glob)
        return cls(enabled=c.enabled, scope=c.scope,
                   headroom_percent=c.headroom_percent,
                   resources=tuple(c.resources),
                   exclude_aggregates=tuple(exclude))


# -- destinations -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Destinations:
    """The hosts that could take a lost host's servers, sorted by name.
    Iterating, ``len`` and ``in`` see the hosts."""
    hosts: Tuple[str, ...]
    #: 'zone az1', 'aggregates agg1, agg2', 'the cloud': for status lines
    where: str
    #: the other compute hosts and why each is not a destination
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self):
        return len(self.hosts)

    def __contains__(self, host):
        return host in self.hosts


def _computes(services):
    return [s for s in services
            if getattr(s, "binary", "nova-compute") == "nova-compute"]


def _why_not(service) -> Optional[str]:
    if service.status != "enabled":
        return "disabled"
    if service.forced_down:
        return "forced down"
    if service.state != "up":
        return "not up (state %s)" % service.state
    return None


def source_zone(source_host, services) -> Optional[str]:
    """The availability zone of ``source_host``'s compute service; None
    when unknown (no record, no zone, or records that disagree)."""
    zones = {s.zone for s in _computes(services) if s.host == source_host}
    if len(zones) != 1:
        return None
    return next(iter(zones)) or None


def aggregates_with(host, aggregates, exclude=()) -> Tuple[str, ...]:
    """Names of the aggregates holding ``host``, those in ``exclude``
    left out, sorted."""
    ex = set(exclude)
    return tuple(sorted({a.name for a in aggregates or ()
                         if host in tuple(a.hosts or ())
                         and a.name not in ex}))


def neighbours(host, zone, scope, aggregates, exclude=()):
    """(test(other_host, other_zone) -> reason or None, where): the scope
    rule shared with :mod:`instanceha.policy.reserved`."""
    if scope == AGGREGATE:
        mine = set(aggregates_with(host, aggregates, exclude))
        if mine:
            members = {}
            for a in aggregates or ():
                if a.name in mine:
                    for h in a.hosts or ():
                        members.setdefault(h, set()).add(a.name)

            def in_aggregate(other, other_zone):
                if other in members:
                    return None
                return "shares no aggregate with %s" % host
            return in_aggregate, ("aggregate%s %s" % (
                "s" if len(mine) > 1 else "", ", ".join(sorted(mine))))
        scope = ZONE
    if scope == ZONE and zone is not None:
        def in_zone(other, other_zone):
            if other_zone == zone:
                return None
            return "in zone %s, not %s" % (other_zone or "(none)", zone)
        return in_zone, "zone %s" % zone
    return (lambda other, other_zone: None), "the cloud"


def destinations(source_host: str, services, capacities: Mapping[str, Any],
                 aggregates, settings: "Settings" = Settings()
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


def free_on(hosts: Iterable[str], capacities: Mapping[str, Any],
            settings: "Settings" = Settings()) -> Tuple[Free, ...]:
    """The Free of each of ``hosts`` known in ``capacities``, with the
    headroom taken off, sorted by host."""
    return tuple(free_of(capacities[h], settings.headroom_percent)
                 for h in sorted(set(hosts)) if h in capacities)


# -- the preflight ------------------------------------------------------------

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


def _as_frees(free) -> Dict[str, Free]:
    if isinstance(free, Mapping):
        items = list(free.values())
    else:
        items = list(free or ())
    out = {}
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


def _text(total, pending, shortfall, frees, where):
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
          services, capacities: Mapping[str, Any], aggregates,
          settings: "Settings" = Settings()) -> Tuple[Destinations, Preflight]:
    """:func:`destinations`, :func:`free_on` and :func:`preflight` in one
    call: (Destinations, Preflight)."""
    dest = destinations(source_host, services, capacities, aggregates,
                        settings)
    return dest, preflight(ordered, free_on(dest.hosts, capacities,
                                            settings), settings, dest.where)
