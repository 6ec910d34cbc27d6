"""Fence a host through its inventory entry's levels, in order.

Pacemaker's fencing topology: an entry lists levels (``levels:`` in the
inventory), each one method or a set of methods that must all succeed
(e.g. Redfish first, then a watchdog together with a Ceph blocklist).
``methods:`` is the older form of the same: each method a level of its
own. :func:`fence` asks each method of a level to fence the host (a power
driver powers it off and confirms Off); the first level whose methods all
succeed proves the host dead, a level that fails hands over to the next,
and when all fail the FenceError names every level's reason. An entry with
one method behaves exactly as one ``power_off`` call.

A level whose methods are all storage fencing (``proves`` STORAGE: the
host may still run, but can no longer write to that storage) proves only
that: its outcome's ``scope`` says so, and ``protects`` what lives on the
storage (the engine evacuates only those servers).

``fencer`` is a callable: driver name -> FencingDriver (the engine's
``Context.fencer``).
"""

import dataclasses

import structlog

from instanceha.drivers.fencing import base
from instanceha.drivers.fencing.inventory_entry import NO_BMC
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
    kind: str = "method"        # "level" in the levels: form

    def label(self):
        return _label(self.index, self.driver, self.address, self.kind)

    def as_dict(self):
        out = dataclasses.asdict(self)
        if self.kind == "method":
            del out["kind"]
        return out


@dataclasses.dataclass(frozen=True)
class FenceOutcome:
    """The level that fenced the host, and the failures before it.
    ``index``, ``driver`` and ``address`` are its first method's."""

    host: str
    index: int
    driver: str
    address: str
    failures: tuple = ()
    methods: int = 1            # how many methods the entry has
    level: int = 0              # the level, from 1 (0: as index)
    levels: int = 0             # how many levels the entry has
    #: "driver address" of each method of the level (a set: several)
    level_methods: tuple = ()
    #: base.HOST: the host is down; base.STORAGE: cut off its storage only
    scope: str = base.HOST
    #: with STORAGE: what of its servers lives on that storage
    protects: tuple = ()
    leveled: bool = False       # the entry uses the levels: form
    #: what the level's methods say their fencing proved, in their own
    #: words (FencingDriver.fenced_text: "self-fenced by watchdog, assumed
    #: at ..."); empty: a power-off confirmed
    how: tuple = ()

    def level_label(self):
        if self.leveled:
            return _label(self.level or self.index,
                          " + ".join(self.level_methods) or self.driver,
                          "", "level")
        return _label(self.index, self.driver, self.address)

    def describe(self):
        """One line for the FENCE_OK event, the journal and status:
        ``redfish BMC https://10.0.0.5 reports power off`` for the first
        method, else ``fenced by method 2 (ipmi 10.0.0.6) after method 1
        (redfish https://10.0.0.5) failed: <reason>``; with levels,
        ``fenced by level 2 (watchdog + ceph_blocklist 10.0.0.5) after
        level 1 (...) failed: <reason>``. Storage-only fencing says what
        it allows. A method that fences otherwise than by power says
        what proved it (``self-fenced by watchdog, assumed at <time>``),
        not a BMC's Off."""
        how = "; ".join(self.how)
        if self.index == 1 and not self.failures and not self.leveled \
                and self.scope == base.HOST:
            return how or "%s BMC %s reports power off" % (
                self.driver, self.address or self.host)
        text = "fenced by %s" % self.level_label()
        if how:
            text += ": " + how
        if self.failures:
            text += " after %s" % "; ".join(
                "%s failed: %s" % (f.label(), f.reason)
                for f in self.failures)
        if self.scope == base.STORAGE:
            text += ("; storage fencing only (the host may still run): "
                     "only servers whose disks are on the fenced storage "
                     "(%s) may be evacuated" % ", ".join(self.protects))
        return text

    def detail(self):
        """Fields for the event's detail / the journal."""
        out = {"method": self.index, "method_driver": self.driver,
               "method_address": self.address, "methods": self.methods,
               "failed_methods": [f.as_dict() for f in self.failures]}
        if self.how:
            out["how"] = list(self.how)
        if self.leveled or self.scope != base.HOST:
            out.update(level=self.level or self.index,
                       levels=self.levels or self.methods,
                       level_methods=list(self.level_methods),
                       scope=self.scope, protects=list(self.protects))
        return out


class FenceChainError(base.FenceError):
    """Every method failed. ``attempts`` holds each method's failure."""

    def __init__(self, message, host, attempts):
        super().__init__(message)
        self.host = host
        self.attempts = tuple(attempts)


class FenceChainUnreachable(FenceChainError, base.BmcUnreachable):
    """Every method failed because its BMC did not answer: nothing was
    refused; a later attempt may get through."""


def _label(index, driver, address, kind="method"):
    return "%s %d (%s)" % (kind, index, "%s %s" % (driver, address)
                           if address else driver)


def _name(method):
    return "%s %s" % (method.driver, method.address) if method.address \
        else method.driver


def _scrub(text, method):
    """Drivers never put a password in an error; this makes sure."""
    return mask_known(text, [method.password])


def _methods(bmc):
    return getattr(bmc, "methods", None) or (bmc,)


def _levels(bmc):
    return getattr(bmc, "levels", None) or ((bmc,),)


def protects_of(method):
    """What a storage method's storage holds (its inventory's
    ``protects``)."""
    return tuple(str(p) for p in
                 (getattr(method, "options", None) or {}).get("protects")
                 or ())


def _summary(bmc, what, attempts):
    return "host %s: %s: %s" % (
        bmc.host, what, "; ".join("%s: %s" % (a.label(), a.reason)
                                  for a in attempts))


class Progress:
    """Where one fencing attempt stands between the passes of the fence
    action (its carry): the level and the method of it that waits, that
    method's mark (base.Pending), and what failed before."""

    __slots__ = ("level", "pos", "mark", "attempts", "unreachable",
                 "unexpected", "started", "early")

    def __init__(self):
        self.level = 0              # index into the entry's levels
        self.pos = 0                # index of the waiting method in it
        self.mark = None            # the waiting method's mark
        self.attempts = []          # Attempt of each level failed so far
        self.unreachable = True     # every failure so far: no answer
        self.unexpected = None      # the first unexpected exception
        self.started = False        # the first pass ran
        #: (level index, method index) -> the mark of a method of a later
        #: level started early (a watchdog condemned at the attempt's
        #: start): reached, it goes on from that mark
        self.early = {}

    def close(self):
        """Nothing held: a condemnation stands until the host is back
        and cleaned up (unfence)."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A method of the level being tried can only be waited for (a
    watchdog's deadline): call :func:`fence` again with ``progress``
    after ``after`` seconds."""

    after: float
    progress: Progress
    why: str


def fence(bmc, fencer, log=LOG, check=None, progress=None):
    """Fence ``bmc.host`` through the first level whose methods all
    succeed.

    ``check(method)``, when given, runs before each method's fencing: it
    returns None to go on, or why this method may not prove the host dead
    (its Off would prove nothing: a BMC never seen On that reports Off
    already); the method, and so its level, then fails with that reason,
    without a power-off.

    Returns a :class:`FenceOutcome`. A method fails on FenceError, or on
    ValueError from ``fencer`` (a driver that refuses to load, e.g. noop
    without ``allow_unfenced``); its level fails (the methods of a set
    after it are not run; the storage fencing of those before it is
    undone) and the next level is tried. When no level succeeded,
    raises :class:`FenceChainError` (a FenceError) naming the host and
    each level's reason, except that if a method raised anything else (a
    driver bug, trouble the driver did not translate) that first exception
    is re-raised after every level was tried, so the caller retries as it
    would for one method.

    Run in passes (``progress`` given: a new :class:`Progress` for the
    first pass, the one of the last :class:`Waiting` after), each method
    is run through its driver's ``fence_pass``: a method that can only be
    waited for (base.Pending) makes this return :class:`Waiting` instead
    of waiting, and the next pass goes on with that method (without its
    ``check`` again: it was done) from the same mark. Without
    ``progress``, each method's ``fence`` runs to its end.
    """
    levels = _levels(bmc)
    every = getattr(bmc, "all_methods", None) or (bmc,)
    leveled = bool(getattr(bmc, "grouping", ()))
    kind = "level" if leveled else "method"
    passes = progress is not None
    p = progress if passes else Progress()
    attempts = p.attempts
    if passes and not p.started:
        _start_early(levels, fencer, check, p, log)
        p.started = True
    if p.level >= len(levels) or p.pos >= len(levels[p.level]):
        raise FenceChainError(
            "host %s: the fencing levels changed in the inventory while "
            "level %d was waited for" % (bmc.host, p.level + 1),
            bmc.host, attempts)
    for lindex in range(p.level, len(levels)):
        level = levels[lindex]
        index = 1 + sum(len(lv) for lv in levels[:lindex])
        number = lindex + 1 if leveled else index
        scope, protects = base.STORAGE, set()
        failed = None
        fenced = []
        start = p.pos if lindex == p.level else 0
        for method in level[:start]:        # fenced in earlier passes
            driver = fencer(method.driver)
            fenced.append((driver, method))
            if getattr(driver, "proves", base.HOST) == base.STORAGE:
                protects.update(protects_of(method))
            else:
                scope = base.HOST
        for pos in range(start, len(level)):
            method = level[pos]
            where = ("" if len(level) == 1 else
                     "method %d of the level (%s): " % (pos + 1,
                                                        _name(method)))
            mark = p.mark if passes and lindex == p.level \
                and pos == p.pos else None
            if mark is None and passes:
                # Started at the attempt's start (its checks done then):
                # go on from there; its deadline does not start over.
                mark = p.early.pop((lindex, pos), None)
            resumed = mark is not None
            p.mark = None
            try:
                why = check(method) if check is not None and not resumed \
                    else None
                if why:
                    raise base.FenceError(why)
                driver = fencer(method.driver)
                step = getattr(driver, "fence_pass", None) if passes \
                    else None
                if step is not None:
                    pending = step(method, mark)
                    if pending is not None:
                        p.level, p.pos, p.mark = lindex, pos, pending.mark
                        return Waiting(pending.after, p, pending.why)
                else:
                    # (a driver older than fence() powers off)
                    (getattr(driver, "fence", None)
                     or driver.power_off)(method)
            except (base.FenceError, ValueError) as e:
                p.unreachable = p.unreachable and isinstance(
                    e, base.BmcUnreachable)
                failed = where + (_scrub(str(e), method)
                                  or type(e).__name__)
            except Exception as e:   # noqa: BLE001 - try the next level
                p.unexpected = p.unexpected or e
                failed = where + "unexpected %s from driver %s" % (
                    type(e).__name__, method.driver)
            if failed is not None:
                _undo(level[:pos], fencer, log, failed)
                break
            fenced.append((driver, method))
            if getattr(driver, "proves", base.HOST) == base.STORAGE:
                protects.update(protects_of(method))
            else:
                scope = base.HOST
        if failed is None:
            outcome = FenceOutcome(
                host=bmc.host, index=index, driver=level[0].driver,
                address=level[0].address, failures=tuple(attempts),
                methods=len(every), level=lindex + 1, levels=len(levels),
                level_methods=tuple(_name(m) for m in level),
                scope=scope, leveled=leveled,
                protects=tuple(sorted(protects)) if scope == base.STORAGE
                else (), how=_how(fenced, log))
            if attempts:
                log.warning("fenced_by_fallback", host=bmc.host,
                            method=index, level=lindex + 1,
                            driver=outcome.level_label(),
                            address=level[0].address, scope=scope,
                            failed=len(attempts), reason=outcome.describe())
            return outcome
        attempt = Attempt(number, " + ".join(_name(m) for m in level)
                          if leveled else level[0].driver,
                          "" if leveled else level[0].address, failed,
                          kind)
        attempts.append(attempt)
        if len(levels) > 1:
            log.warning("fence_method_failed", host=bmc.host, method=index,
                        level=lindex + 1, driver=attempt.driver,
                        address=attempt.address, reason=failed,
                        next=(lindex + 2 if lindex + 1 < len(levels)
                              else None))
    if p.unexpected is not None:
        raise p.unexpected
    if len(levels) == 1 and not leveled:
        message = attempts[0].reason
    else:
        message = _summary(bmc, "no fencing %s succeeded" % kind
                           if leveled else
                           "no fencing method confirmed power off",
                           attempts)
    error = FenceChainUnreachable if p.unreachable else FenceChainError
    raise error(message, bmc.host, attempts)


def _start_early(levels, fencer, check, p, log):
    """At an attempt's first pass, start each method of a later level
    whose driver says it ``starts_early`` (the watchdog: its condemnation
    starts a deadline that only time ends), after ``check``, so that its
    deadline runs while the levels before it are tried (doc/safety.md
    rule 25). A method whose driver refuses it (``early_refusal``), whose
    check fails or whose first pass fails is left alone: its level runs
    it as usual when reached. A method whose first pass already proves
    the host fenced is run again then (a read)."""
    for lindex in range(p.level + 1, len(levels)):
        for pos, method in enumerate(levels[lindex]):
            try:
                driver = fencer(method.driver)
            except ValueError:
                continue
            if not getattr(driver, "starts_early", False):
                continue
            try:
                refusal = driver.early_refusal(method)
            except Exception as e:   # noqa: BLE001 - its level says why
                refusal = _scrub(str(e), method) or type(e).__name__
            if refusal:
                log.info("fence_early_skipped", host=method.host,
                         driver=method.driver, level=lindex + 1,
                         reason=refusal)
                continue
            why = check(method) if check is not None else None
            if why:
                log.info("fence_early_skipped", host=method.host,
                         driver=method.driver, level=lindex + 1, reason=why)
                continue
            try:
                pending = driver.fence_pass(method, None)
            except Exception as e:   # noqa: BLE001 - its level tries again
                log.warning("fence_early_failed", host=method.host,
                            driver=method.driver, level=lindex + 1,
                            reason=_scrub(str(e), method)
                            or type(e).__name__)
                continue
            if pending is not None:
                p.early[(lindex, pos)] = pending.mark
            log.warning("fence_started_early", host=method.host,
                        driver=method.driver, level=lindex + 1,
                        reason="the host is being fenced and a later level "
                               "proves it dead by time: started now, so "
                               "its deadline runs while the levels before "
                               "it are tried")


def _how(fenced, log):
    """Each fenced method's own words for what its fencing proved
    (FencingDriver.fenced_text), where it has some: a read, and a
    failure to read them changes nothing of the fencing."""
    out = []
    for driver, method in fenced:
        text = getattr(driver, "fenced_text", None)
        try:
            said = text(method) if text is not None else None
        except Exception as e:   # noqa: BLE001 - wording only
            log.warning("fenced_text_failed", host=method.host,
                        driver=method.driver,
                        reason=_scrub(str(e), method) or type(e).__name__)
            continue
        if isinstance(said, str) and said:
            out.append(said)
    return tuple(out)


def _undo(done, fencer, log, why):
    """A set failed after some of its methods succeeded: undo those that
    leave something behind (a blocklist entry). The level proved nothing,
    so nothing is evacuated on it, and a live host must not keep losing
    its storage for it. A later level that fences the same way does it
    again. Failures are logged: the entry is then removed at unfence."""
    for method in done:
        if method.driver not in NO_BMC:
            continue
        try:
            fencer(method.driver).unfence(method)
        except Exception as e:   # noqa: BLE001 - best effort, logged
            log.warning("fence_set_undo_failed", host=method.host,
                        driver=method.driver,
                        reason=_scrub(str(e), method) or type(e).__name__)
            continue
        log.warning("fence_set_undone", host=method.host,
                    driver=method.driver,
                    reason="its level failed (%s): undone, the level "
                           "proved nothing" % why)


def level_of(bmc, number):
    """The methods of level ``number`` (from 1) of ``bmc``, or None."""
    levels = _levels(bmc) if bmc is not None else ()
    if number is None or not 1 <= number <= len(levels):
        return None
    return levels[number - 1]


def powerless(level):
    """Whether a level fences without any power method (storage fencing,
    a watchdog's deadline): its fencing is re-read with
    :func:`still_fenced`, not with a power-state read."""
    return bool(level) and all(m.driver in NO_BMC for m in level)


def still_fenced(bmc, number, fencer, log=LOG):
    """None when every method of level ``number`` that fences without a
    BMC (storage fencing; a method proving death by time) still holds,
    else why not: the re-proof of a host fenced by such a level (a read,
    no action)."""
    level = level_of(bmc, number)
    if level is None:
        return ("fencing level %s of host %s is no longer in the inventory"
                % (number, getattr(bmc, "host", "?")))
    held = False
    for method in level:
        if method.driver not in NO_BMC:
            continue
        try:
            why = fencer(method.driver).still_fenced(method)
        except Exception as e:   # noqa: BLE001 - not proven: the reason
            why = "%s: %s" % (_name(method),
                              _scrub(str(e), method) or type(e).__name__)
        if why:
            log.warning("fence_not_holding", host=method.host,
                        driver=method.driver, reason=why)
            return why
        held = True
    if not held:
        return ("fencing level %d of host %s has no fencing without power "
                "any more (the inventory changed)" % (number, bmc.host))
    return None


def unfence(bmc, fencer, log=LOG):
    """Undo every method of the entry that fences without power (a Ceph
    blocklist entry), whatever level fenced: a set that failed halfway
    may have left one. Each method is tried; raises FenceError naming
    every one that failed (the caller tries again later)."""
    failed = []
    for method in (getattr(bmc, "all_methods", None) or ()):
        if method.driver not in NO_BMC:
            continue
        try:
            fencer(method.driver).unfence(method)
        except Exception as e:   # noqa: BLE001 - each is tried
            failed.append("%s: %s" % (_name(method), _scrub(str(e), method)
                                      or type(e).__name__))
            continue
        log.info("unfenced", host=method.host, driver=method.driver,
                 reason="the host is back and its service cleaned up")
    if failed:
        raise base.FenceError("host %s: unfence failed: %s"
                              % (bmc.host, "; ".join(failed)))


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
