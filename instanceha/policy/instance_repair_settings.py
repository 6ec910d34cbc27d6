"""Instance repair's settings and its actions; pure.

:class:`Settings` (from the ``[instance_repair]`` group), the actions by
risk (:data:`ACTIONS`) and the repair level each needs (:data:`NEEDS`),
the vm_states Nova accepts each in (:data:`ACCEPTS`). The rules are in
:mod:`instanceha.policy.instance_repair`.
"""

import dataclasses
from typing import Any, FrozenSet, Iterable, Mapping, Tuple

from instanceha.policy.repair_values import Ladder

START = "start"
HARD_REBOOT = "hard_reboot"
COLD_MIGRATE = "cold_migrate"
REBUILD = "rebuild"
#: by risk, lowest first
ACTIONS: Tuple[str, ...] = (START, HARD_REBOOT, COLD_MIGRATE, REBUILD)

#: the lowest repair level that allows each action
NEEDS: Mapping[str, Ladder] = {
    START: Ladder.RESTART,
    HARD_REBOOT: Ladder.REBOOT,
    COLD_MIGRATE: Ladder.MIGRATE,
    REBUILD: Ladder.REBUILD,
}

#: the vm_states Nova's API accepts each action in (nova/compute/api.py:
#: start: stopped; reboot HARD: vm_states.ALLOW_HARD_REBOOT; migrate and
#: resize: active, stopped; rebuild: active, stopped, error)
ACCEPTS: Mapping[str, FrozenSet[str]] = {
    START: frozenset(["stopped"]),
    HARD_REBOOT: frozenset(["active", "stopped", "paused", "suspended",
                            "error"]),
    COLD_MIGRATE: frozenset(["active", "stopped"]),
    REBUILD: frozenset(["active", "stopped", "error"]),
}

#: what each action does, for reasons and markers
DOES: Mapping[str, str] = {
    START: "start it",
    HARD_REBOOT: "hard-reboot it",
    COLD_MIGRATE: "cold-migrate it to another host and start it",
    REBUILD: "rebuild it from its image (its local disks are lost)",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    enabled: bool = False
    #: the ladder, a subsequence of ACTIONS
    actions: Tuple[str, ...] = (START, HARD_REBOOT, COLD_MIGRATE)
    #: actions per server within ``window`` seconds
    max_repairs: int = 3
    window: float = 3600.0
    #: seconds ACTIVE before an action counts as a success
    min_uptime: float = 60.0
    #: seconds for an action to bring the server ACTIVE
    action_timeout: float = 300.0
    #: cloud-wide hold: servers breaking within ``hold_window`` (0: off)
    hold_count: int = 20
    #: cloud-wide hold: percent of the servers watched (0: off), counted
    #: only with at least ``hold_min_failures`` breaking
    hold_percent: float = 5.0
    hold_min_failures: int = 3
    hold_window: float = 600.0
    allow_rebuild: bool = False
    excluded_projects: FrozenSet[str] = frozenset()
    excluded_tags: FrozenSet[str] = frozenset()
    restart_group_key: str = "instanceha:restart_group"

    def __post_init__(self) -> None:
        actions = tuple(self.actions)
        unknown = [a for a in actions if a not in ACTIONS]
        if unknown:
            raise ValueError("unknown repair action(s) %s (known: %s)" % (
                ", ".join(map(repr, unknown)), ", ".join(ACTIONS)))
        ranks = [ACTIONS.index(a) for a in actions]
        if ranks != sorted(set(ranks)):
            raise ValueError("repair actions %s: each once, in the order "
                             "of risk (%s)" % (", ".join(actions),
                                               ", ".join(ACTIONS)))
        if REBUILD in actions and not self.allow_rebuild:
            raise ValueError("the rebuild action needs allow_rebuild")
        if self.max_repairs < 1:
            raise ValueError("max_repairs must be 1 or more")
        for name in ("window", "min_uptime", "action_timeout",
                     "hold_window"):
            if getattr(self, name) < 0:
                raise ValueError("%s must not be negative" % name)
        if not 0 <= self.hold_percent <= 100:
            raise ValueError("hold_percent must be within 0..100")
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "excluded_projects",
                           frozenset(self.excluded_projects))
        object.__setattr__(self, "excluded_tags",
                           frozenset(self.excluded_tags))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        g = conf.instance_repair
        return cls(enabled=g.enabled, actions=tuple(g.actions),
                   max_repairs=g.max_repairs, window=float(g.window),
                   min_uptime=float(g.min_uptime),
                   action_timeout=float(g.action_timeout),
                   hold_count=g.hold_count,
                   hold_percent=float(g.hold_percent),
                   hold_min_failures=g.hold_min_failures,
                   hold_window=float(g.hold_window),
                   allow_rebuild=g.allow_rebuild,
                   excluded_projects=_names(g.excluded_projects),
                   excluded_tags=_names(g.excluded_tags),
                   restart_group_key=g.restart_group_key)

    @classmethod
    def host_path_from_conf(cls, conf: Any) -> "Settings":
        """What the host path (evacuation) reads of ``[instance_repair]``
        whether instance repair is enabled or not: the exclusions and the
        restart group key. The ladder's options keep their defaults."""
        g = conf.instance_repair
        return cls(excluded_projects=_names(g.excluded_projects),
                   excluded_tags=_names(g.excluded_tags),
                   restart_group_key=g.restart_group_key)


def _names(values: Iterable[str]) -> FrozenSet[str]:
    """A list option's non-blank entries, stripped."""
    return frozenset(v.strip() for v in values if v.strip())
