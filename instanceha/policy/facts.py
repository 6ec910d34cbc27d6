"""The plain records every policy module reads, and the Problems they report.

:class:`ServerFacts`, :class:`ImageFacts`, :class:`FlavorFacts` and
:class:`AggregateFacts` hold what the policies need of a server (its
metadata and tags, the image's properties and tags, the flavor's extra
specs, the metadata of the host aggregates the server's host belongs
to); :class:`HostFacts` what a host that could take servers has and is;
:class:`Problem` is a malformed or doubtful value on one of them,
named with :func:`describe` and :func:`short`. The caller fills them
(:mod:`instanceha.policy.facts_nova` from Nova's and Glance's answers);
nothing here does I/O.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Protocol,
                    Set, Tuple)

SERVER = "server"
IMAGE = "image"
FLAVOR = "flavor"
AGGREGATE = "aggregate"
GLOBAL = "global"

ERROR = "error"
WARNING = "warning"


class ServiceRecord(Protocol):
    """A Nova service row as the policies read it: the compute driver's
    ComputeService (the policies import no driver). Its ``binary`` is read
    with ``getattr`` (``nova-compute`` when missing)."""

    @property
    def host(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def forced_down(self) -> bool: ...

    @property
    def disabled_reason(self) -> Optional[str]: ...

    @property
    def zone(self) -> Optional[str]: ...


class CapacityRecord(Protocol):
    """What a compute host can still take, as the policies read it: the
    compute driver's HostCapacity."""

    @property
    def host(self) -> str: ...

    @property
    def vcpus(self) -> int: ...

    @property
    def vcpus_used(self) -> int: ...

    @property
    def ram_mb(self) -> int: ...

    @property
    def ram_mb_used(self) -> int: ...

    @property
    def disk_gb(self) -> int: ...

    @property
    def disk_gb_used(self) -> int: ...


class AggregateRecord(Protocol):
    """A host aggregate as the policies read it: the compute driver's
    Aggregate or an :class:`AggregateFacts`."""

    @property
    def name(self) -> str: ...

    @property
    def hosts(self) -> Tuple[str, ...]: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """A Glance image: its custom properties and its tags. For a
    volume-backed server, the boot volume's ``volume_image_metadata``."""
    id: str = ""
    name: str = ""
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tags: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FlavorFacts:
    """A flavor and its extra specs (embedded in the server from compute
    microversion 2.47, where only ``original_name`` is given: id may be
    empty)."""
    id: str = ""
    name: str = ""
    extra_specs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: the sizes as Nova gives them (None: not given); read by
    #: :func:`~instanceha.policy.capacity_need.need_of` through
    #: :func:`flavor_body`: vCPUs, RAM in MB, root disk, ephemeral in GB,
    #: swap in MB
    vcpus: Any = None
    ram_mb: Any = None
    disk_gb: Any = None
    ephemeral_gb: Any = None
    swap_mb: Any = None


@dataclasses.dataclass(frozen=True)
class AggregateFacts:
    """A host aggregate and its metadata."""
    name: str
    id: str = ""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    hosts: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ServerFacts:
    """One server as the policies see it. ``aggregates``: those of the
    server's host (see :func:`aggregates_of`). ``created_at``: seconds
    since the epoch, None if unknown."""
    id: str
    name: str = ""
    host: Optional[str] = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tags: Tuple[str, ...] = ()
    created_at: Optional[float] = None
    image: Optional[ImageFacts] = None
    flavor: Optional[FlavorFacts] = None
    aggregates: Tuple[AggregateFacts, ...] = ()
    #: Nova's status (ACTIVE, SHUTOFF, VERIFY_RESIZE...), vm_state and
    #: task_state; None when not read
    status: Optional[str] = None
    vm_state: Optional[str] = None
    task_state: Optional[str] = None
    #: the availability zone the server must stay in (None: any)
    zone: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """A compute host as a place servers could go: its compute service's
    state, zone and aggregates, and its capacity. ``capacity``: anything
    with :class:`~instanceha.drivers.compute.base.HostCapacity`'s fields
    (read by :func:`~instanceha.policy.capacity_free.free_of`), None when
    unknown."""
    host: str
    zone: Optional[str] = None
    aggregates: Tuple[AggregateFacts, ...] = ()
    enabled: bool = True
    up: bool = True
    forced_down: bool = False
    capacity: Optional[CapacityRecord] = None


@dataclasses.dataclass(frozen=True)
class Problem:
    """A malformed or doubtful value on one object. Hashable: a caller
    keeps a set of those already reported to report each once."""
    level: str              # ERROR | WARNING
    scope: str              # server, image, flavor, aggregate, global
    object_id: str
    object_name: str
    key: str
    value: Optional[str]
    message: str

    def __str__(self) -> str:
        return self.message


def flavor_body(flavor: FlavorFacts) -> Mapping[str, Any]:
    """``flavor`` as Nova embeds it in a server (microversion 2.47 or
    later): the sizes given, under Nova's names."""
    body: Dict[str, Any] = {"original_name": flavor.name,
                  "extra_specs": dict(flavor.extra_specs or {})}
    for key, value in (("vcpus", flavor.vcpus), ("ram", flavor.ram_mb),
                       ("disk", flavor.disk_gb),
                       ("ephemeral", flavor.ephemeral_gb),
                       ("swap", flavor.swap_mb)):
        if value is not None:
            body[key] = value
    return body


def _kind(scope: str) -> str:
    return "global aggregate" if scope == GLOBAL else scope


def describe(scope: str, name: Optional[str], obj_id: str = "") -> str:
    """'flavor m1.pinned (42)', 'server web-1 (5f0c...)', 'image 8d3e...'."""
    if name and obj_id and name != obj_id:
        return "%s %s (%s)" % (_kind(scope), name, obj_id)
    return "%s %s" % (_kind(scope), name or obj_id or "?")


def short(scope: str, name: Optional[str], obj_id: str = "") -> str:
    """'flavor m1.pinned': the name only, for reasons."""
    return "%s %s" % (_kind(scope), name or obj_id or "?")


def unique(problems: Iterable[Problem]) -> List[Problem]:
    """``problems`` without repeats, first-seen order kept."""
    seen: Set[Problem] = set()
    out: List[Problem] = []
    for p in problems:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out
