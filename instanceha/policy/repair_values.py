"""What a repair level or a suspension may say, and the keys that say it; pure.

:class:`Level` and :func:`parse_level` (a metadata value to a level;
:class:`Ladder`, the longer ladder of levels once instance repair is on),
:func:`parse_until` and :func:`format_time` (a suspension's time), and
:class:`Settings` (the metadata keys, the default level, the global
aggregate). The rules are in :mod:`instanceha.policy.repair`.
"""

import dataclasses
import datetime
import enum
import re
from typing import Any, Optional, Tuple, Type, Union

from instanceha.util import timeparse

DEFAULT_REPAIR_KEY = "instanceha:repair"
DEFAULT_SUSPEND_KEY = "instanceha:suspended_until"
FOREVER = "forever"


class Level(enum.IntEnum):
    """Repair levels by rank; gaps keep room for reboot and rebuild."""
    NONE = 0
    EVACUATE = 20

    @property
    def label(self) -> str:
        return self.name.lower()


#: levels planned but not implemented: named in errors, never returned
RESERVED = {"reboot": 10, "rebuild": 30}


class Ladder(enum.IntEnum):
    """Every repair level once instance repair is on ([instance_repair]
    enabled): :class:`Level`'s two at the same ranks, and the levels of
    instance repair between and above them. Each allows every lower one
    (see :mod:`instanceha.policy.instance_repair`)."""
    NONE = 0
    #: start a server that stopped by itself
    RESTART = 5
    #: hard-reboot it in place
    REBOOT = 10
    #: cold-migrate it to another host and start it there
    MIGRATE = 15
    EVACUATE = 20
    #: rebuild it from its image, losing its local disks
    REBUILD = 30

    @property
    def label(self) -> str:
        return self.name.lower()


#: what a level setting holds: :class:`Level` while instance repair is
#: off, :class:`Ladder` while it is on; both compare by rank
AnyLevel = Union[Level, Ladder]


#: the levels in force: :class:`Level` or :class:`Ladder`
Levels = Union[Type[Level], Type[Ladder]]


def parse_level(value: object, levels: Levels = Level
                ) -> Tuple[Optional[AnyLevel], Optional[str]]:
    """(level, None) or (None, why not) for a metadata value. ``levels``:
    :class:`Level` (the default) or, with instance repair on,
    :class:`Ladder`."""
    if not isinstance(value, str):
        return None, "is not a level name"
    text = value.strip().lower()
    for level in levels:
        if level.name.lower() == text:
            return level, None
    if text in RESERVED or text in (x.label for x in Ladder):
        return None, ("is a level not supported yet while instance repair "
                      "is off ([instance_repair] enabled = false)")
    return None, "is not a level (%s)" % " or ".join(
        level.name.lower() for level in levels)


_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})"
    r"(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"\s*(Z|z|UTC|[+-]\d{2}:?\d{2})?$")


def parse_until(value: object) -> Tuple[bool, Optional[float], Optional[str]]:
    """(ok, until, why not) for a suspension value: until is seconds
    since the epoch, None for ``forever``. A time without an offset is
    UTC; a date without a time is refused (which end of the day?)."""
    if not isinstance(value, str):
        return False, None, "is not a time"
    text = value.strip()
    if text.lower() == FOREVER:
        return True, None, None
    m = _TIME.match(text)
    if not m:
        return False, None, ("is neither 'forever' nor an ISO-8601 time "
                             "such as 2030-01-31T18:00:00Z")
    # The pattern is what an operator may write; the conversion is the
    # one parser's (util.timeparse), given the canonical separator and
    # offset.
    zone = m.group(8)
    offset = "+00:00"
    if zone and zone.upper() not in ("Z", "UTC"):
        digits = zone[1:].replace(":", "")
        if int(digits[:2]) > 23 or int(digits[2:]) > 59:
            return False, None, "has an impossible UTC offset"
        offset = "%s%s:%s" % (zone[0], digits[:2], digits[2:])
    stamp = text[:m.start(8)].rstrip() if zone else text
    try:
        until = timeparse.epoch("%sT%s%s" % (stamp[:10], stamp[11:], offset))
    except ValueError as e:
        return False, None, "is not a valid time (%s)" % e
    return True, until, None


def format_time(epoch: Optional[float]) -> str:
    """'2030-01-31T18:00:00Z', or 'forever' for None."""
    if epoch is None:
        return FOREVER
    t = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Settings:
    repair_key: str = DEFAULT_REPAIR_KEY
    suspend_key: str = DEFAULT_SUSPEND_KEY
    #: the level when no scope sets one
    default_level: AnyLevel = Level.EVACUATE
    #: name of the aggregate whose metadata is the global scope
    global_aggregate: Optional[str] = None
    #: False: a server's own level may lower, never raise, the level its
    #: aggregates or the global scope give (server metadata is writable
    #: by the server's owner)
    server_may_raise: bool = True
    #: other metadata keys in use (priority, evacuable): never reported
    #: as looking like a misspelt repair or suspension key
    known_keys: Tuple[str, ...] = ()
    #: instance repair is on: the levels are :class:`Ladder`'s (restart,
    #: reboot, migrate and rebuild besides none and evacuate)
    instance_levels: bool = False

    @property
    def levels(self) -> Levels:
        return Ladder if self.instance_levels else Level

    def __post_init__(self) -> None:
        for name in ("repair_key", "suspend_key"):
            key = getattr(self, name)
            if not isinstance(key, str) or not key.strip() \
                    or key != key.strip():
                raise ValueError("%s must be a non-empty name without "
                                 "blanks around it, not %r" % (name, key))
        if self.repair_key == self.suspend_key:
            raise ValueError("repair_key and suspend_key must differ")
        object.__setattr__(self, "default_level",
                           self.levels(int(self.default_level)))

    @classmethod
    def from_conf(cls, conf: Any) -> "Settings":  # conf: oslo.config
        r = conf.recovery
        # [instance_repair] is registered with every other group; a conf
        # built without it (some tests) means instance repair off.
        group = getattr(conf, "instance_repair", None)
        instance_levels = bool(getattr(group, "enabled", False))
        level, why = parse_level(r.repair_level,
                                 Ladder if instance_levels else Level)
        if level is None:
            raise ValueError("[recovery] repair_level %r %s" % (
                r.repair_level, why))
        known: Tuple[str, ...] = (r.priority_key, r.evacuable_key)
        if group is not None:
            known += (group.restart_group_key,)
        return cls(repair_key=r.repair_key, suspend_key=r.suspend_key,
                   default_level=level,
                   global_aggregate=r.global_aggregate or None,
                   server_may_raise=r.server_may_raise_level,
                   known_keys=known, instance_levels=instance_levels)
