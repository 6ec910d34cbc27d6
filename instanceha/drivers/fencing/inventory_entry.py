"""One host's fencing entry (:class:`BMC`), and :class:`InventoryError`.

What :mod:`instanceha.drivers.fencing.inventory` makes of each host of the
inventory file; :func:`entry_for` finds a host's entry.
"""

import dataclasses
from typing import Any, Mapping


class InventoryError(ValueError):
    """What is wrong with the inventory: ``errors``, one line each (every
    error found in one reading); its text joins them with "; "."""

    def __init__(self, *errors):
        if len(errors) == 1 and isinstance(errors[0], (list, tuple)):
            errors = tuple(errors[0])
        self.errors = [str(e) for e in errors]
        super().__init__("; ".join(self.errors))


@dataclasses.dataclass(frozen=True)
class BMC:
    """One host's fencing entry.

    The entry's own fields are its first fencing method; ``fallbacks`` holds
    the methods tried after it (empty for an entry with one method).
    ``methods`` lists every method in order, each a plain BMC whose own
    ``methods`` is ``(itself,)``; for a one-method entry ``bmc.methods ==
    (bmc,)``. Drivers are always given one of ``methods``.
    """

    host: str
    driver: str
    address: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fallbacks: tuple = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        if self.fallbacks:
            first = dataclasses.replace(self, fallbacks=())
            methods = (first,) + tuple(self.fallbacks)
        else:
            methods = (self,)
        object.__setattr__(self, "_methods", methods)

    @property
    def methods(self):
        return self._methods

    def __str__(self):
        text = "BMC(host=%s, driver=%s, address=%s" % (
            self.host, self.driver, self.address)
        if self.fallbacks:
            text += ", then %s" % ", ".join(
                "%s %s" % (m.driver, m.address) if m.address else m.driver
                for m in self.fallbacks)
        return text + ")"


def entry_for(inventory, host, default_driver=None):
    """The host's entry, else one for ``[fencing] default_driver`` (when
    set), else None: the host cannot be fenced."""
    bmc = inventory.get(host)
    if bmc is None and default_driver:
        bmc = BMC(host=host, driver=default_driver)
    return bmc
