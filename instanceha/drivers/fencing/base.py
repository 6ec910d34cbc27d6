"""Fencing driver interface.

A fencing driver proves a host dead by powering it off through its BMC and
confirming that the BMC reports Off. Each driver is the only module that
imports its library (sushy, ipmitool, kubernetes) and translates that
library's exceptions into :class:`FenceError`.
"""

import abc
import enum


class PowerState(str, enum.Enum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


class FenceError(Exception):
    """Fencing could not be proven: BMC unreachable, refused, or timed out.

    The message names the host and the reason; it never holds a secret.
    """


class FencingDriver(abc.ABC):
    """Powers one kind of BMC. ``bmc`` is an inventory.BMC entry."""

    #: name used in the inventory's ``driver`` field
    name = None

    @abc.abstractmethod
    def power_off(self, bmc):
        """Power the host off and return once the BMC confirms Off.

        Idempotent: a host already Off returns at once. Raises FenceError.
        """

    @abc.abstractmethod
    def power_state(self, bmc):
        """Return the PowerState the BMC reports. Raises FenceError."""

    def power_on(self, bmc):
        """Power the host on (used by operators and tests). Raises FenceError."""
        raise FenceError("%s: driver %s cannot power on" % (bmc.host, self.name))
