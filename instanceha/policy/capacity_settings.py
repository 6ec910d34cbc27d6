"""The capacity preflight's settings (:class:`Settings`, from
``[capacity]``) and its scopes; pure."""

import dataclasses
from typing import Any, Tuple

from instanceha.policy.capacity_need import RESOURCES, int_or_none

ZONE = "zone"
AGGREGATE = "aggregate"
CLOUD = "cloud"
SCOPES = (ZONE, AGGREGATE, CLOUD)


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

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError("capacity scope must be one of %s, not %r" % (
                ", ".join(SCOPES), self.scope))
        h = int_or_none(self.headroom_percent)
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
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
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
