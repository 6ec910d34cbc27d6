"""Fencing driver interface.

A fencing driver proves a host dead by powering it off through its BMC and
confirming that the BMC reports Off. Each driver is the only module that
imports its library (sushy, ipmitool, kubernetes) and translates that
library's exceptions into :class:`FenceError`.
"""

import abc
import enum
import uuid
from typing import Any, NamedTuple

import tenacity

from instanceha.util.writes import write


class PowerState(str, enum.Enum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


class FenceError(Exception):
    """Fencing could not be proven: BMC unreachable, refused, or timed out.

    The message names the host and the reason; it never holds a secret.
    """


class BmcUnreachable(FenceError):
    """No answer from the BMC after the driver's own retries (connection
    refused or timed out, name not resolved): nothing was refused, and a
    later attempt may get through. The fence action is then retried with
    the engine's back-off instead of failing the host at once."""


class Pending(NamedTuple):
    """A fencing not proven yet, with nothing to do but wait
    (:meth:`FencingDriver.fence_pass`): ask again in ``after`` seconds,
    handing back ``mark``; ``why``: one line."""
    after: float
    mark: Any
    why: str


#: what a method's success proves (FencingDriver.proves)
HOST = "host"          # the host is down: powered off, or reset itself
STORAGE = "storage"    # the host is cut off from a shared storage only


class FencingDriver(abc.ABC):
    """Powers one kind of BMC. ``bmc`` is an inventory.BMC entry.

    Fencing levels call :meth:`fence` (a power driver's is its
    :meth:`power_off`), :meth:`still_fenced` before an evacuation sends
    anything, and :meth:`unfence` once the host is back and its service
    cleaned up. A method that proves death otherwise than by power (storage
    fencing; a watchdog's deadline, by time) overrides the three and says
    what it proves in :attr:`proves`.
    """

    #: name used in the inventory's ``driver`` field
    name = None
    #: HOST: success means the host runs nothing any more (every server
    #: may be evacuated); STORAGE: the host may still run, but can no
    #: longer write to a shared storage (only servers whose disks are all
    #: on it may be evacuated)
    proves = HOST

    @write
    @abc.abstractmethod
    def power_off(self, bmc):
        """Power the host off and return once the BMC confirms Off.

        Idempotent: a host already Off returns at once. Raises FenceError.
        """

    @abc.abstractmethod
    def power_state(self, bmc):
        """Return the PowerState the BMC reports. Raises FenceError."""

    def system_identity(self, bmc):
        """What the BMC says about the machine behind it (a read, no
        action): ``{"uuids": [...], "hostname": ...}`` (lower-case UUID
        strings, the host name it reports, either may be missing), or None
        when the driver cannot tell. Used to find two inventory entries
        that reach one machine by different addresses (Redfish and IPMI,
        IP and DNS name), and an entry reaching another compute host's
        machine. Raises FenceError."""
        return None

    def read_machine(self, bmc):
        """(PowerState, identity): :meth:`power_state` and
        :meth:`system_identity` in one look where the driver can (the
        fencing audit reads both of every BMC at each sweep). ``identity``
        is what system_identity returns, or the exception that kept it
        from being read (the power state stands). Raises FenceError as
        power_state does. The identity is read first, so that the power
        state is the last thing read (the audit asks at once whether an
        Off is the engine's own fencing); a BMC that cannot be reached
        for it is not asked again."""
        try:
            identity = self.system_identity(bmc)
        except BmcUnreachable:
            raise
        except Exception as e:   # noqa: BLE001 - handed to the caller
            identity = e
        return self.power_state(bmc), identity

    @write
    def fence(self, bmc):
        """Fence the host through this method and return once the fencing
        is confirmed (for a power driver: Off). Raises FenceError."""
        self.power_off(bmc)

    @write
    def fence_pass(self, bmc, mark=None):
        """One pass of :meth:`fence` for the engine's work queue, which
        never waits: None once the fencing is confirmed, or
        :class:`Pending` when it can only be waited for (a watchdog's
        deadline): the engine calls again after ``Pending.after`` seconds
        with ``Pending.mark`` (``mark`` None: the first pass, which does
        the fencing; later passes only read). Raises FenceError. A power
        driver's: :meth:`fence`, at once."""
        self.fence(bmc)
        return None

    def still_fenced(self, bmc):
        """None when the fencing still holds now (a read, no action: the
        re-proof before an evacuation sends anything), else why not. A
        power driver's: the BMC reports Off. Raises FenceError."""
        state = self.power_state(bmc)
        if state is PowerState.OFF:
            return None
        return "%s BMC %s reports power %s" % (
            self.name, bmc.address or bmc.host,
            getattr(state, "value", state))

    def health(self, bmc):
        """The machine's hardware health as its BMC reports it (a read,
        never an action): a :class:`instanceha.drivers.fencing.health.
        Health` (the worst severity, OK, Warning or Critical, and each
        degraded component with why), or None when the driver cannot
        tell. Raises FenceError like :meth:`power_state`. Proactive HA
        drains a host degraded at its configured severity; it never
        fences for it."""
        return None

    def fenced_text(self, bmc):
        """What this method's fencing of the host proved, in a few words
        for status and history (``self-fenced by watchdog, assumed at
        ...``), or None: the level's own wording is used (a power
        driver's: its BMC reports power off). A read, no action."""
        return None

    def ready(self, bmc):
        """None when this method could prove the host dead now, else why
        not (a read, never an action): the fencing audit's look at a
        method without a BMC (a power method is judged by its power-state
        read instead). Raises FenceError like :meth:`power_state`."""
        state = self.power_state(bmc)
        return None if state in (PowerState.ON, PowerState.OFF) else (
            "%s reports power %s" % (self.name,
                                     getattr(state, "value", state)))

    @write
    def unfence(self, bmc):
        """Undo :meth:`fence` once the host is back and its service cleaned
        up (its servers evacuated and its compute restarted). Nothing for
        a power driver: the host powered on is what brought it back.
        Idempotent. Raises FenceError."""
        return None

    @write
    def power_on(self, bmc):
        """Power the host on (used by operators and tests). Raises FenceError."""
        raise FenceError("%s: driver %s cannot power on" % (bmc.host, self.name))


def wait_until_off(read, timeout, poll_interval, sleep, clock):
    """Call ``read()`` (a PowerState) every ``poll_interval`` seconds until
    it reports Off, for at most ``timeout`` seconds of ``clock``. Returns
    None once Off, else the last state read (the caller's FenceError says
    which)."""
    start = clock()
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda s: s is not PowerState.OFF),
        stop=lambda retry_state: clock() - start >= timeout,
        wait=tenacity.wait_fixed(poll_interval),
        sleep=sleep)
    try:
        retrying(read)
    except tenacity.RetryError as e:
        return e.last_attempt.result()
    return None


def retrying(attempt, transient, attempts, interval, sleep, log_fields):
    """Run ``attempt()``; while it raises ``transient`` (the request did not
    reach the BMC), log a ``bmc_retry`` line with ``log_fields`` and try
    again, ``attempts`` tries in all, ``interval`` seconds apart. The last
    ``transient`` error is raised; any other error at once."""
    log = log_fields.pop("log")

    def log_retry(rs):
        log.warning("bmc_retry", attempt=rs.attempt_number,
                    reason=str(rs.outcome.exception()), **log_fields)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(transient),
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_fixed(interval),
        sleep=sleep, before_sleep=log_retry, reraise=True)(attempt)


def uuid_forms(raw):
    """The UUID strings a BMC's 16 system-GUID bytes may stand for: IPMI's
    Get System GUID is sent least significant byte first by some BMCs and
    in SMBIOS order (first three fields little-endian) by others, while
    Redfish shows the SMBIOS UUID as text: every reading is returned, so
    that one machine read both ways matches."""
    raw = bytes(raw)
    if len(raw) != 16:
        return []
    forms = {str(uuid.UUID(bytes=raw)), str(uuid.UUID(bytes_le=raw)),
             str(uuid.UUID(bytes=raw[::-1])),
             str(uuid.UUID(bytes_le=raw[::-1]))}
    return sorted(forms)
