"""What one server takes on its host (:class:`Need`, :func:`need_of`); pure.

Rules (exact): ``vcpus`` and ``ram`` (MB) must be positive integers,
``disk`` (GB) a non-negative integer; ``ephemeral`` (GB) and ``swap`` (MB)
are non-negative integers, 0 when missing (``swap`` is ``""`` when 0 before
microversion 2.75). Disk = root (0 when the server boots from a volume: its
``image`` is ``""``, None or missing) + ephemeral + swap rounded up to
whole GB, as Nova asks Placement for it. Extra specs ``resources:VCPU``,
``resources:MEMORY_MB`` and ``resources:DISK_GB`` override the flavor's
amount as they do in Nova; a malformed override, ``resources:PCPU`` or
``hw:cpu_policy`` ``dedicated``/``mixed`` give no Need (Placement counts
those CPUs as PCPU, which :class:`HostCapacity` does not report).
"""

import dataclasses
import math
from typing import Any, Dict, Iterable, Mapping, Optional, Protocol, Tuple

from instanceha.policy.facts import ERROR, FLAVOR, SERVER, WARNING, Problem

VCPUS = "vcpus"
RAM = "ram"
DISK = "disk"
RESOURCES = (VCPUS, RAM, DISK)

#: extra specs that override a flavor's amount, as Nova reads them
_OVERRIDES = {"resources:VCPU": "vcpus", "resources:MEMORY_MB": "ram_mb",
              "resources:DISK_GB": "disk_gb"}


def int_or_none(value: object) -> Optional[int]:
    """A Python int (not a bool), or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _spec_int(value: object) -> Optional[int]:
    """An extra spec's integer ('2', 2), or None."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and len(text) <= 18:
            return int(text)
        return None
    n = int_or_none(value)
    return n if n is not None and n >= 0 else None


class Amounts(Protocol):
    """vCPUs, RAM in MB and disk in GB: a :class:`Need`, or a
    :class:`~instanceha.policy.capacity_free.Free` (whose disk is None on
    a host reporting none: shared storage, disk not counted)."""

    @property
    def vcpus(self) -> int: ...

    @property
    def ram_mb(self) -> int: ...

    @property
    def disk_gb(self) -> Optional[int]: ...


@dataclasses.dataclass(frozen=True)
class Need:
    """What a server takes on its host: vCPUs, RAM in MB, disk in GB."""
    vcpus: int = 0
    ram_mb: int = 0
    disk_gb: int = 0

    def __post_init__(self) -> None:
        for name in ("vcpus", "ram_mb", "disk_gb"):
            n = int_or_none(getattr(self, name))
            if n is None or n < 0:
                raise ValueError("Need.%s must be a non-negative integer, "
                                 "not %r" % (name, getattr(self, name)))

    def __add__(self, other: "Need") -> "Need":
        return Need(self.vcpus + other.vcpus, self.ram_mb + other.ram_mb,
                    self.disk_gb + other.disk_gb)

    def minus(self, other: "Amounts") -> "Need":
        """What is left of ``self`` once ``other`` (a Need or a Free) is
        taken away, each resource floored at 0. A Free whose disk is not
        counted (None: shared storage) covers any disk."""
        return Need(max(0, self.vcpus - other.vcpus),
                    max(0, self.ram_mb - other.ram_mb),
                    0 if other.disk_gb is None
                    else max(0, self.disk_gb - other.disk_gb))

    def only(self, resources: Iterable[str]) -> "Need":
        """This need with the resources not in ``resources`` set to 0."""
        r = set(resources)
        return Need(self.vcpus if VCPUS in r else 0,
                    self.ram_mb if RAM in r else 0,
                    self.disk_gb if DISK in r else 0)

    def __bool__(self) -> bool:
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

    def __str__(self) -> str:
        return self.describe()


def _server_label(body: Mapping[str, Any]) -> Tuple[str, str]:
    sid, name = body.get("id"), body.get("name")
    return (sid if isinstance(sid, str) else "",
            name if isinstance(name, str) else "")


def _label(sid: str, name: str) -> str:
    if name and sid and name != sid:
        return "server %s (%s)" % (name, sid)
    return "server %s" % (name or sid or "?")


def need_of(server_body: object
            ) -> Tuple[Optional[Need], Optional[Problem]]:
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

    def problem(message: str, value: object = None, level: str = ERROR,
                scope: str = SERVER, key: str = "flavor"
                ) -> Tuple[None, Problem]:
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
    amounts: Dict[str, int] = {}
    for key, minimum in (("vcpus", 1), ("ram", 1), ("disk", 0)):
        if key not in flavor:
            return problem("%s has no %r" % (fl, key))
        n = int_or_none(flavor[key])
        if n is None or n < minimum:
            return problem("%s has %s=%r, not an integer >= %d" % (
                fl, key, flavor[key], minimum), flavor[key],
                scope=FLAVOR, key=key)
        amounts[key] = n
    for key in ("ephemeral", "swap"):
        raw = flavor.get(key, 0)
        if raw is None or (key == "swap" and raw == ""):
            raw = 0
        n = int_or_none(raw)
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
