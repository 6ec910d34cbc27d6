"""What a destination host can still take (:class:`Free`); pure.

Rules (exact): per resource ``max(0, total - used - headroom)``, where
headroom is ``ceil(total * headroom_percent / 100)``; negative or
non-integer numbers count as 0. A host reporting no disk at all (total and
used 0: its disk is on a shared storage provider) has its disk not checked.
"""

import dataclasses
from typing import Iterable, Mapping, Optional, Tuple

from instanceha.policy.capacity_need import Need, int_or_none
from instanceha.policy.capacity_settings import Settings
from instanceha.policy.facts import CapacityRecord


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
    def from_capacity(cls, capacity: CapacityRecord,
                      headroom_percent: int = 0) -> "Free":
        return free_of(capacity, headroom_percent)


def _count(value: object) -> int:
    n = int_or_none(value)
    return n if n is not None and n > 0 else 0


def _left(total: object, used: object, headroom_percent: int) -> int:
    total, used = _count(total), _count(used)
    keep = -(-total * headroom_percent // 100)      # ceil, integers only
    return max(0, total - used - keep)


def free_of(capacity: CapacityRecord, headroom_percent: int = 0) -> Free:
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


def free_on(hosts: Iterable[str], capacities: Mapping[str, CapacityRecord],
            settings: "Settings" = Settings()) -> Tuple[Free, ...]:
    """The Free of each of ``hosts`` known in ``capacities``, with the
    headroom taken off, sorted by host."""
    return tuple(free_of(capacities[h], settings.headroom_percent)
                 for h in sorted(set(hosts)) if h in capacities)
