"""Fence a host through its inventory entry's methods, in order.

Like Pacemaker's fencing levels: an entry may list several methods
(``methods:`` in the inventory, e.g. Redfish first, IPMI on another network
second). :func:`fence` asks each method's driver to power the host off; the
first that confirms Off proves the host dead, a method that fails hands over
to the next, and when all fail the FenceError names every method's reason.
An entry with one method behaves exactly as one ``power_off`` call.

``fencer`` is a callable: driver name -> FencingDriver (the engine's
``Context.fencer``).
"""

import dataclasses

import structlog

from instanceha.drivers.fencing import base
from instanceha.log import mask_known

LOG = structlog.get_logger("instanceha.fencing")


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One method's failure. ``index`` counts from 1, as in the inventory
    and its error messages."""

    index: int
    driver: str
    address: str
    reason: str

    def label(self):
        return _label(self.index, self.driver, self.address)

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FenceOutcome:
    """The method that powered the host off, and the failures before it."""

    host: str
    index: int
    driver: str
    address: str
    failures: tuple = ()
    methods: int = 1            # how many methods the entry has

    def describe(self):
        """One line for the FENCE_OK event, the journal and status:
        ``redfish BMC https://10.0.0.5 reports power off`` for the first
        method, else ``fenced by method 2 (ipmi 10.0.0.6) after method 1
        (redfish https://10.0.0.5) failed: <reason>``."""
        if self.index == 1 and not self.failures:
            return "%s BMC %s reports power off" % (
                self.driver, self.address or self.host)
        before = "; ".join("%s failed: %s" % (f.label(), f.reason)
                           for f in self.failures)
        return "fenced by %s after %s" % (
            _label(self.index, self.driver, self.address), before)

    def detail(self):
        """Fields for the event's detail / the journal."""
        return {"method": self.index, "method_driver": self.driver,
                "method_address": self.address, "methods": self.methods,
                "failed_methods": [f.as_dict() for f in self.failures]}


class FenceChainError(base.FenceError):
    """Every method failed. ``attempts`` holds each method's failure."""

    def __init__(self, message, host, attempts):
        super().__init__(message)
        self.host = host
        self.attempts = tuple(attempts)


class FenceChainUnreachable(FenceChainError, base.BmcUnreachable):
    """Every method failed because its BMC did not answer: nothing was
    refused; a later attempt may get through."""


def _label(index, driver, address):
    return "method %d (%s)" % (index, "%s %s" % (driver, address)
                               if address else driver)


def _scrub(text, method):
    """Drivers never put a password in an error; this makes sure."""
    return mask_known(text, [method.password])


def _methods(bmc):
    return getattr(bmc, "methods", None) or (bmc,)


def _summary(bmc, what, attempts):
    return "host %s: %s: %s" % (
        bmc.host, what, "; ".join("%s: %s" % (a.label(), a.reason)
                                  for a in attempts))


def fence(bmc, fencer, log=LOG, check=None):
    """Power ``bmc.host`` off through the first method that confirms Off.

    ``check(method)``, when given, runs before a method's power-off: it
    returns None to go on, or why this method may not prove the host dead
    (its Off would prove nothing: a BMC never seen On that reports Off
    already); the method then fails with that reason, without a power-off.

    Returns a :class:`FenceOutcome`. A method fails on FenceError, or on
    ValueError from ``fencer`` (a driver that refuses to load, e.g. noop
    without ``allow_unfenced``); the next method is then tried. When no
    method confirmed Off, raises :class:`FenceChainError` (a FenceError)
    naming the host and each method's reason, except that if a method
    raised anything else (a driver bug, trouble the driver did not
    translate) that first exception is re-raised after every method was
    tried, so the caller retries as it would for one method.
    """
    methods = _methods(bmc)
    attempts = []
    unexpected = None
    unreachable = True
    for index, method in enumerate(methods, 1):
        try:
            why = check(method) if check is not None else None
            if why:
                raise base.FenceError(why)
            fencer(method.driver).power_off(method)
        except (base.FenceError, ValueError) as e:
            unreachable = unreachable and isinstance(e, base.BmcUnreachable)
            reason = _scrub(str(e), method) or type(e).__name__
        except Exception as e:   # noqa: BLE001 - try the next method first
            unexpected = unexpected or e
            reason = "unexpected %s from driver %s" % (type(e).__name__,
                                                       method.driver)
        else:
            outcome = FenceOutcome(host=bmc.host, index=index,
                                   driver=method.driver,
                                   address=method.address,
                                   failures=tuple(attempts),
                                   methods=len(methods))
            if attempts:
                log.warning("fenced_by_fallback", host=bmc.host,
                            method=index, driver=method.driver,
                            address=method.address,
                            failed=len(attempts), reason=outcome.describe())
            return outcome
        attempt = Attempt(index, method.driver, method.address, reason)
        attempts.append(attempt)
        if len(methods) > 1:
            log.warning("fence_method_failed", host=bmc.host, method=index,
                        driver=method.driver, address=method.address,
                        reason=reason,
                        next=(index + 1 if index < len(methods) else None))
    if unexpected is not None:
        raise unexpected
    if len(methods) == 1:
        message = attempts[0].reason
    else:
        message = _summary(bmc, "no fencing method confirmed power off",
                           attempts)
    kind = FenceChainUnreachable if unreachable else FenceChainError
    raise kind(message, bmc.host, attempts)


def power_state(bmc, fencer, log=LOG):
    """The power state reported by the first method that answers.

    A method whose driver raises FenceError (or refuses to load) is skipped.
    An answer of UNKNOWN is kept only if no later method answers ON or OFF.
    Raises :class:`FenceChainError` when no method answers at all.
    """
    methods = _methods(bmc)
    attempts = []
    unknown = False
    for index, method in enumerate(methods, 1):
        try:
            state = fencer(method.driver).power_state(method)
        except (base.FenceError, ValueError) as e:
            attempt = Attempt(index, method.driver, method.address,
                              _scrub(str(e), method) or type(e).__name__)
            attempts.append(attempt)
            if len(methods) > 1:
                log.info("power_state_method_failed", host=bmc.host,
                         method=index, driver=method.driver,
                         address=method.address, reason=attempt.reason)
            continue
        if state in (base.PowerState.ON, base.PowerState.OFF):
            return base.PowerState(state)
        unknown = True
    if unknown:
        return base.PowerState.UNKNOWN
    if len(methods) == 1:
        message = attempts[0].reason
    else:
        message = _summary(bmc, "no fencing method reports the power state",
                           attempts)
    raise FenceChainError(message, bmc.host, attempts)


def first_reading(bmc, fencer, log=LOG):
    """(method, ON or OFF) from the first method that knows, for reads
    that only observe; (None, None) when no method says (no entry, noop,
    no answer, a driver error)."""
    if bmc is None:
        return None, None
    for method in _methods(bmc):
        try:
            state = fencer(method.driver).power_state(method)
        except Exception as e:   # noqa: BLE001 - an observation, never fatal
            log.info("power_state_unknown", host=bmc.host,
                     driver=method.driver,
                     reason=_scrub(str(e), method) or type(e).__name__)
            continue
        if state in (base.PowerState.ON, base.PowerState.OFF):
            return method, base.PowerState(state)
    return None, None


def known_power_state(bmc, fencer, log=LOG):
    """ON or OFF as the first method that knows says, for reads that only
    observe (the engine when a heartbeat is lost, the power watch); None
    when no method says (no entry, noop, no answer, a driver error)."""
    if bmc is None:
        return None
    try:
        state = power_state(bmc, fencer, log)
    except Exception as e:   # noqa: BLE001 - an observation, never fatal
        log.info("power_state_unknown", host=bmc.host, reason=str(e))
        return None
    return None if state is base.PowerState.UNKNOWN else state
