"""A machine's hardware health as its BMC reports it: the small typed
record the fencing drivers' ``health()`` returns (the readers are in
:mod:`instanceha.drivers.fencing.health`), which the audit hands to
proactive HA's pure policy."""

import dataclasses
import enum
from typing import Any, Iterable, Mapping, Optional, Tuple


class Severity(str, enum.Enum):
    OK = "OK"
    WARNING = "Warning"
    CRITICAL = "Critical"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, text: Any) -> Optional["Severity"]:
        """A Redfish ``Health`` value (any case), or None for anything
        else (absent, null, a word Redfish does not define)."""
        if not isinstance(text, str):
            return None
        for s in cls:
            if s.value.lower() == text.strip().lower():
                return s
        return None


_RANK = {Severity.OK: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


@dataclasses.dataclass(frozen=True)
class Component:
    """One degraded part: ``name`` (``system``, ``power supply PS1``,
    ``fan Fan3``, ``memory DIMM A2`` ...), its severity, and why (what
    the BMC reported)."""

    name: str
    severity: Severity
    reason: str

    def text(self) -> str:
        return "%s %s (%s)" % (self.name, self.severity.value, self.reason)


@dataclasses.dataclass(frozen=True)
class Health:
    """A machine's hardware health as its BMC reports it: the worst
    severity, and every component found degraded (Warning or Critical)."""

    severity: Severity
    components: Tuple[Component, ...] = ()

    @classmethod
    def of(cls, components: Iterable[Component]) -> "Health":
        bad = tuple(c for c in components if c.severity is not Severity.OK)
        worst = max((c.severity for c in bad), key=lambda s: s.rank,
                    default=Severity.OK)
        return cls(worst, bad)

    def at_least(self, severity: Severity) -> bool:
        return self.severity.rank >= severity.rank

    def why(self) -> str:
        """One line: the worst severity and each degraded component."""
        if not self.components:
            return "hardware health %s" % self.severity.value
        return "hardware health %s: %s" % (
            self.severity.value, "; ".join(c.text() for c in self.components))

    def to_json(self) -> Mapping[str, Any]:
        return {"severity": self.severity.value,
                "components": [{"name": c.name,
                                "severity": c.severity.value,
                                "reason": c.reason}
                               for c in self.components]}
