"""One host's fencing entry (:class:`BMC`), and :class:`InventoryError`.

What :mod:`instanceha.drivers.fencing.inventory` makes of each host of the
inventory file; :func:`entry_for` finds a host's entry.
"""

import dataclasses
from typing import Any, Mapping

#: fencing drivers that have no BMC: they read no power state, so they are
#: not among an entry's ``methods`` (the power methods the audit, the
#: evidence and the identity checks read), only among its ``levels``.
#: ``ceph_blocklist`` cuts the host off its storage; a method that proves
#: death by time (a watchdog's deadline) belongs here too.
NO_BMC = frozenset({"ceph_blocklist", "watchdog"})


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
    the methods after it (empty for an entry with one method).
    ``all_methods`` lists every method in order, each a plain BMC whose own
    ``methods`` is ``(itself,)``; for a one-method entry ``bmc.methods ==
    (bmc,)``. Drivers are always given one of them.

    Fencing levels (Pacemaker's topology): ``grouping`` holds how many of
    ``all_methods``, in order, make each level (empty: one method per
    level, the ``methods:`` form); ``levels`` is the methods grouped so.
    A level fences the host when every method of it succeeds.

    ``methods`` is the methods that have a BMC (every method whose driver
    is not in :data:`NO_BMC`): what power reads, evidence and identity
    checks look at. Storage fencing is only in ``levels``.
    """

    host: str
    driver: str
    address: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fallbacks: tuple = dataclasses.field(default=(), repr=False)
    grouping: tuple = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        if self.fallbacks or self.grouping:
            first = dataclasses.replace(self, fallbacks=(), grouping=())
            every = (first,) + tuple(self.fallbacks)
        else:
            every = (self,)
        sizes = tuple(self.grouping) or (1,) * len(every)
        if sum(sizes) != len(every) or not all(n > 0 for n in sizes):
            raise ValueError("grouping %r does not split %d methods"
                             % (sizes, len(every)))
        levels, start = [], 0
        for n in sizes:
            levels.append(every[start:start + n])
            start += n
        object.__setattr__(self, "_all", every)
        object.__setattr__(self, "_levels", tuple(levels))
        object.__setattr__(self, "_methods", tuple(
            m for m in every if m.driver not in NO_BMC))

    @property
    def methods(self):
        """The methods with a BMC, in order."""
        return self._methods

    @property
    def all_methods(self):
        """Every method, power and storage, in order."""
        return self._all

    @property
    def levels(self):
        """The fencing levels, in order: each a tuple of methods that must
        all succeed."""
        return self._levels

    def __str__(self):
        text = "BMC(host=%s, driver=%s, address=%s" % (
            self.host, self.driver, self.address)
        if self.grouping and len(self.levels) < len(self.all_methods):
            return "BMC(host=%s, levels: %s)" % (self.host, "; ".join(
                " + ".join(_name(m) for m in level)
                for level in self.levels))
        if self.fallbacks:
            text += ", then %s" % ", ".join(map(_name, self.fallbacks))
        return text + ")"


def _name(m):
    return "%s %s" % (m.driver, m.address) if m.address else m.driver


def entry_for(inventory, host, default_driver=None):
    """The host's entry, else one for ``[fencing] default_driver`` (when
    set), else None: the host cannot be fenced."""
    bmc = inventory.get(host)
    if bmc is None and default_driver:
        bmc = BMC(host=host, driver=default_driver)
    return bmc
