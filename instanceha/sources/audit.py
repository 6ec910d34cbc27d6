"""The fencing readiness audit: could every compute host be fenced now?

Nobody should find out on the day of a failure that a host's BMC password
was rotated months ago. At start and every ``[audit] interval`` seconds
(jittered), for every compute host Nova lists, the audit asks each fencing
method of the host's inventory entry for its power state (a read, never an
action) and judges with :func:`judge` (pure):

* no inventory entry (and no ``[fencing] default_driver``), or the noop
  driver: unprotected;
* no method answers (BMC unreachable, credentials refused, agent missing)
  and no level that fences without power is ready: unprotected, with each
  method's and level's error. Each level is judged: a level of power
  methods protects when its BMC answers a power-state read; a level that
  fences without power (a watchdog, a Ceph blocklist) when each of its
  methods is ready (:meth:`FencingDriver.ready`: an armed watchdog its
  agent reported recently, Ceph monitors that answer); which level
  protects a host no power method protects is kept (``protected_by``);
* every method that answers reports Off while Nova reports the compute up
  and not forced down: unprotected: the entry most likely points at another
  machine, and fencing it would "succeed" while the host runs on;
* else protected (a method that fails while another answers is named in
  ``degraded``).

The third is judged against Nova's view *after* the read (the services
listed again once the reads are done) and the engine's: a host Nova shows
down or forced down then, or that instanceha is handling (being proven
dead, fenced, evacuated, in maintenance ...: ``handled``) when it was read
or after, is no mismatch. The list taken at the start of the audit may be
minutes old by the time a BMC is read (the audit waits for recoveries, and
is paced): a host fenced meanwhile would otherwise be taken for a wrong
entry, and its BMC untrusted once it reports back.

While hosts are in recovery the reads wait (``give_way``), for at most
``[audit] max_pause`` seconds in a row; then they go on, skipping only
the hosts ``handled`` names (their last verdict stands).

The result (``unprotected()``: {host: reason}) is shown in status, GET
/status and /metrics; a host is logged when it becomes unprotected, when
its reason changes, and when it is protected again, not on every pass.
"""

import concurrent.futures
import dataclasses
import random
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, \
    Optional, Sequence, Set, Tuple, Union, cast

import structlog

from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import inventory
from instanceha.util.hardware import Health
from instanceha.drivers.compute.base import ComputeDriver, ComputeService
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.events import Event, EventKind as E
from instanceha.events import PowerReading
from instanceha.log import mask_known
from instanceha.sources.base import Sink
from instanceha.util import periodic
from instanceha.util.pool import bounded_map, window_for

LOG = structlog.get_logger("instanceha.audit")

#: Seconds between two looks at whether a recovery still runs, while the
#: audit's reads wait for it.
PAUSE_POLL = 1.0

#: What a read does, once recoveries have been given way to.
READ, SKIP, STOP = "read", "skip", "stop"

#: fencer(driver name): the fencing driver of that name
Fencer = Callable[[str], fencing_base.FencingDriver]
#: a method's power state, or why it could not be read
Reading = Union[fencing_base.PowerState, str]
#: what a BMC says about its machine (FencingDriver.system_identity)
Identity = Mapping[str, Any]


def read_power(fencer: Fencer, method: BMC) -> Reading:
    """One method's power state (a read, never an action), or why it
    could not be read; a driver's error never carries the password."""
    try:
        return fencer(method.driver).power_state(method)
    except fencing_base.FenceError as e:
        text = str(e)
    except Exception as e:   # noqa: BLE001 - a driver bug is reported
        text = "%s: %s" % (type(e).__name__, e)
    return mask_known(text, [method.password])


def read_machine(fencer: Fencer,
                 method: BMC) -> Tuple[Reading, Optional[Identity]]:
    """(power state or why it could not be read, identity or None): one
    method's read_power and read_identity in one look at its BMC (the
    driver's read_machine); the identity only of a BMC whose power state
    was read."""
    try:
        state, found = fencer(method.driver).read_machine(method)
    except fencing_base.FenceError as e:
        return mask_known(str(e), [method.password]), None
    except Exception as e:   # noqa: BLE001 - a driver bug is reported
        return mask_known("%s: %s" % (type(e).__name__, e),
                          [method.password]), None
    if isinstance(found, Exception):
        LOG.info("system_identity_unknown", driver=method.driver,
                 address=method.address,
                 reason=mask_known(str(found), [method.password]))
        found = None
    return state, found


def read_identity(fencer: Fencer, method: BMC) -> Optional[Identity]:
    """What one method's BMC says about its machine (drivers'
    system_identity), or None (not supported, or an error: logged)."""
    try:
        return fencer(method.driver).system_identity(method)
    except Exception as e:   # noqa: BLE001 - identity only adds checks
        text = mask_known(str(e), [method.password])
        LOG.info("system_identity_unknown", driver=method.driver,
                 address=method.address, reason=text)
        return None


def readings(bmc: Optional[BMC],
             fencer: Fencer) -> List[Tuple[str, Reading]]:
    """[(label, PowerState or why not)] for each fencing method of a
    host's entry (the noop driver reads nothing)."""
    if bmc is None:
        return []
    return [(label(m), read_power(fencer, m)) for m in bmc.methods
            if m.driver != "noop"]


def label(method: BMC) -> str:
    return "%s %s" % (method.driver, method.address) if method.address \
        else method.driver


def reports_up(service: Optional[ComputeService]) -> bool:
    """Nova reports the compute up and not forced down (None: not
    listed)."""
    return service is not None and service.state == "up" \
        and not service.forced_down


def judge(service: Optional[ComputeService], bmc: Optional[BMC],
          readings: Sequence[Tuple[str, Reading]]
          ) -> Tuple[Optional[str], List[str]]:
    """``(reason, degraded)``: reason is None when the host can be fenced.

    ``service``: the host's ComputeService; ``bmc``: its inventory entry or
    None; ``readings``: [(method label, PowerState or error text)] in the
    entry's method order."""
    return verdict(reports_up(service), bmc, readings)


def all_off(readings: Iterable[Tuple[Optional[str], Reading]]) -> bool:
    """Every method that answered reports Off (and one did)."""
    answered = [r for _, r in readings
                if isinstance(r, fencing_base.PowerState)]
    return bool(answered) and all(r is fencing_base.PowerState.OFF
                                  for r in answered)


def verdict(nova_up: bool, bmc: Optional[BMC],
            readings: Sequence[Tuple[str, Reading]],
            levels: Sequence[Tuple[str, Optional[str]]] = ()
            ) -> Tuple[Optional[str], List[str]]:
    """As :func:`judge`; ``nova_up``: Nova reported the compute up (and
    not forced down) and instanceha leaves it running untouched;
    ``levels``: [(label, why it cannot prove the host dead now, or None)]
    for each level of the entry that fences without power
    (:func:`powerless_levels`)."""
    return judge_levels(nova_up, bmc, readings, levels)[:2]


def judge_levels(nova_up: bool, bmc: Optional[BMC],
           readings: Sequence[Tuple[str, Reading]],
           levels: Sequence[Tuple[str, Optional[str]]] = ()
           ) -> Tuple[Optional[str], List[str], Optional[str]]:
    """:func:`verdict`, and which level can prove the host dead (None
    when unprotected). Each level is judged: one of power methods whose
    BMC answers a power-state read, or one that fences without power
    whose methods are all ready (:meth:`FencingDriver.ready`: a watchdog
    its agent reported armed recently, monitors that answer). A power
    read of Off while Nova reports the compute up stays unprotected
    whatever the other levels say: the entry may reach another machine."""
    if bmc is None:
        return "no entry in the fencing inventory", [], None
    power = [m for m in bmc.methods if m.driver != "noop"]
    if not power and not levels:
        return "fencing driver noop does not power anything off", [], None
    answered = [(name, r) for name, r in readings
                if isinstance(r, fencing_base.PowerState)]
    failed = ["%s: %s" % (name, r) for name, r in readings
              if not isinstance(r, fencing_base.PowerState)]
    not_ready = ["%s: %s" % (name, why) for name, why in levels
                 if why is not None]
    ready = [name for name, why in levels if why is None]
    if nova_up and all_off(answered):
        return ("BMC reports power Off while Nova reports the compute up: "
                "the inventory entry may point at another machine (%s)"
                % ", ".join(name for name, _ in answered)), \
            failed + not_ready, None
    if answered:
        return None, failed + not_ready, "power: %s answers" % ", ".join(
            name for name, _ in answered)
    if ready:
        return None, failed + not_ready, "%s: ready" % ready[0]
    if not levels:
        return "no fencing method answers a power-state read: %s" % (
            "; ".join(failed) or "no method"), [], None
    return "no fencing level can prove the host dead now: %s" % (
        "; ".join(failed + not_ready)), [], None


def powerless_levels(bmc: Optional[BMC]) -> List[Tuple[str, List[BMC]]]:
    """[(label, methods)] of each level of ``bmc`` that fences without
    power (a watchdog, a Ceph blocklist), in order; a level mixing power
    and other methods is judged by its power reads."""
    if bmc is None:
        return []
    levels = getattr(bmc, "levels", None) or ((bmc,),)
    leveled = bool(getattr(bmc, "grouping", ()))
    out, first = [], 1
    for number, level in enumerate(levels, 1):
        if chain.powerless(level):
            out.append(("%s %d (%s)" % (
                "level" if leveled else "method",
                number if leveled else first,
                " + ".join(label(m) for m in level)), list(level)))
        first += len(level)
    return out


def read_ready(fencer: Fencer, methods: Sequence[BMC]) -> Optional[str]:
    """None when every method of a level can prove the host dead now
    (each driver's ready(): a read, never an action), else why not."""
    for method in methods:
        try:
            why = fencer(method.driver).ready(method)
        except Exception as e:   # noqa: BLE001 - FenceError and kin: why
            why = mask_known(str(e) or type(e).__name__, [method.password])
        if why:
            return why
    return None


def read_health(fencer: Fencer, methods: Sequence[BMC],
                reads: Sequence[Reading]) -> Optional[Health]:
    """The hardware health the first method whose BMC answered the power
    read can tell (the driver's ``health``: a read, never an action), or
    None (no driver can tell; an error is logged: the fencing verdict
    stands whatever the health read says)."""
    for method, read in zip(methods, reads):
        if not isinstance(read, fencing_base.PowerState):
            continue
        try:
            found = fencer(method.driver).health(method)
        except Exception as e:   # noqa: BLE001 - FenceError and kin: said
            LOG.info("hardware_health_unread", host=method.host,
                     driver=method.driver,
                     reason=mask_known(str(e) or type(e).__name__,
                                       [method.password]))
            continue
        if found is not None:
            return cast(Health, found)
    return None


@dataclasses.dataclass(frozen=True)
class HostRead:
    """What the audit read of one host's BMC, before it is judged."""

    bmc: Optional[BMC]              # the inventory entry, or None
    methods: Tuple[BMC, ...]        # its methods read (not noop)
    reads: Tuple[Reading, ...]      # PowerState or error text, per method
    #: the engine named the host handled right after an Off read
    handled: bool = False
    #: (method key, what its BMC reported about its machine)
    identities: Tuple[Tuple[str, Identity], ...] = ()
    #: (label, why it cannot prove the host dead now or None) of each
    #: level that fences without power
    levels: Tuple[Tuple[str, Optional[str]], ...] = ()
    #: the machine's hardware health (read_health), when read
    health: Optional[Health] = None

    def labelled(self) -> List[Tuple[str, Reading]]:
        return [(label(m), r) for m, r in zip(self.methods, self.reads)]

    def all_off(self) -> bool:
        return all_off(self.labelled())

    def powers(self) -> List[Tuple[str, str]]:
        # (a read in ON, OFF is a PowerState: cast, no check)
        return [(inventory.method_key(m),
                 cast(fencing_base.PowerState, r).value)
                for m, r in zip(self.methods, self.reads)
                if r in (fencing_base.PowerState.ON,
                         fencing_base.PowerState.OFF)]


#: (host, what was read, Nova reports it up, its row read after the reads)
Evidence = Tuple[str, HostRead, bool, Optional[ComputeService]]


class FencingAudit:
    """Runs the audit in its own thread; ``unprotected()`` and
    ``health()`` answer from the last audit without I/O."""

    def __init__(self, conf: Any, compute: ComputeDriver,
                 bmc_for: Callable[[str], Optional[BMC]], fencer: Fencer,
                 clock: Callable[[], float] = time.time,
                 rng: Optional[random.Random] = None,
                 sink: Optional[Sink] = None,
                 host_ids: Optional[Mapping[str, str]] = None,
                 give_way: Optional[Callable[[], Optional[str]]] = None,
                 wait: Optional[Callable[[float], bool]] = None,
                 handled: Optional[Callable[[str], bool]] = None,
                 on_health: Optional[
                     Callable[[Mapping[str, Health]], object]] = None
                 ) -> None:
        """``sink``: where the power watch sends POWER_OFF / POWER_ON
        events (the engine's submit); ``host_ids``: {host name: service
        id}, refreshed by each audit when not given; ``give_way()``: why
        the reads should wait now (hosts in recovery: the engine's
        ``urgent``), or None; ``wait(seconds)``: how a read waits before
        asking again (True when the audit is stopping); ``handled(host)``:
        True when instanceha is handling the host, or a host sharing its
        BMC (the engine's ``handled``): its BMC's Off is no mismatch, and
        its reads are skipped once a pause has lasted ``max_pause``;
        ``on_health({host: Health})``: given, the hardware health of each
        host (the drivers' ``health``) is read with its power state, and
        handed over after each audit (proactive HA), hosts whose drivers
        cannot tell left out."""
        self._conf = conf.audit
        self._compute = compute
        self._bmc_for = bmc_for
        self._fencer = fencer
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._stop = threading.Event()      # ends both loops
        self._loops: List[periodic.Periodic] = []
        self._unprotected: Dict[str, str] = {}
        self._degraded: Dict[str, List[str]] = {}
        self._protected_by: Dict[str, str] = {}
        self.audits = 0
        self.last_at: Optional[float] = None
        self.last_seconds: Optional[float] = None
        self.last_error: Optional[str] = None
        self.checked = 0
        #: hosts the last audit skipped (handled, after the bound)
        self.skipped = 0
        self._sink = sink
        self._on_health = on_health
        self._read_health = on_health is not None
        self._hardware: Dict[str, Health] = {}
        self._give_way: Callable[[], Optional[str]] = \
            give_way or (lambda: None)
        self._handled: Callable[[str], bool] = \
            handled or (lambda host: False)
        self._wait: Callable[[float], bool] = wait or self._stop.wait
        #: when the reads began to wait for recoveries (None: they do not)
        self._paused_since: Optional[float] = None
        self._bounded = False       # ... and that wait reached max_pause
        self._next_slot = float("-inf")     # the next read's earliest time
        #: reads that waited for a recovery (status)
        self.gave_way = 0
        self._ids = dict(host_ids or {})
        # host -> last PowerState the watch read
        self._power: Dict[str, fencing_base.PowerState] = {}
        self._lost_power: Set[str] = set()    # read On, then Off

    # -- giving way to recoveries ----------------------------------------------
    def _gate(self, host: str) -> str:
        """READ, SKIP or STOP for a read of ``host``'s BMC now. While
        hosts are being proven dead or evacuated, reading thousands of BMCs
        competes with them for the process and the network: the reads wait
        (logged once per pause), at most ``max_pause`` seconds in a row. A
        host held by its agent's veto stays suspect as long as the veto
        lasts: after the bound the reads go on, skipping only the hosts
        ``handled`` names (logged once), until no host is in recovery."""
        while True:
            why = self._give_way()
            if why is None:
                self._resume()
                return READ
            left = self._pause_left(why)
            if left <= 0:
                return SKIP if self._handled(host) else READ
            if self._wait(min(PAUSE_POLL, left)):
                return STOP

    def _pause_left(self, why: str) -> float:
        """Seconds the reads may still wait for the recoveries ``why``
        names (the pause starts now if it had not)."""
        limit = self._conf.max_pause
        with self._lock:
            now = self._clock()
            since = self._paused_since
            first = since is None
            if since is None or now < since:
                # A clock stepped back counts the pause from now: it then
                # lasts at most twice max_pause, never for ever.
                self._paused_since = now
            left = self._paused_since + limit - now
            bounded = left <= 0 and not self._bounded
            if bounded:
                self._bounded = True
            elif left > 0:
                self.gave_way += 1
        if first and limit > 0:
            LOG.info("audit_paused", reason=why, max_pause=limit,
                     effect="BMC reads of the fencing audit and power watch "
                            "wait until no host is in recovery, at most "
                            "[audit] max_pause seconds")
        if bounded:
            LOG.warning("audit_pause_bounded", reason=why, max_pause=limit,
                        effect="BMC reads of the fencing audit and power "
                               "watch go on, skipping only the hosts "
                               "instanceha is handling and those sharing "
                               "a BMC with one, until no host is in "
                               "recovery")
        return left

    def _resume(self) -> None:
        with self._lock:
            paused, self._paused_since = self._paused_since, None
            self._bounded = False
        if paused is not None:
            LOG.info("audit_resumed", reason="no host in recovery")

    def _paced(self) -> bool:
        """Wait for this read's slot: at most ``hosts_per_second`` hosts
        audited per second. Returns False when the audit is stopping."""
        rate = self._conf.hosts_per_second
        if rate <= 0:
            return True
        with self._lock:
            now = self._clock()
            slot = max(now, self._next_slot)
            self._next_slot = slot + 1.0 / rate
        return slot <= now or not self._wait(slot - now)

    # -- one audit ------------------------------------------------------------
    def _check(self, service: ComputeService) -> Union[HostRead, str]:
        """A HostRead, or SKIP (handled, after the bound) or STOP."""
        if not self._paced():
            return STOP
        gate = self._gate(service.host)
        if gate != READ:
            return gate
        bmc = self._bmc_for(service.host)
        methods = tuple(m for m in bmc.methods if m.driver != "noop") \
            if bmc is not None else ()
        looks = [read_machine(self._fencer, m) for m in methods]
        reads = tuple(r for r, _ in looks)
        # Asked only of an Off (the only read it changes), right after it.
        handled = all_off([(None, r) for r in reads]) \
            and self._handled(service.host)
        found = [(inventory.method_key(m), ident)
                 for m, (_, ident) in zip(methods, looks)]
        levels = tuple((name, read_ready(self._fencer, level))
                       for name, level in powerless_levels(bmc))
        health = read_health(self._fencer, methods, reads) \
            if self._read_health else None
        return HostRead(bmc, methods, reads, handled,
                        tuple((key, ident) for key, ident in found if ident),
                        levels, health)

    def _nova_after(self, services: List[ComputeService],
                    reads: Mapping[str, Union[HostRead, str]]
                    ) -> Optional[Dict[str, ComputeService]]:
        """Nova's services listed again *after* the BMC reads, when a host
        read Off whose row listed before the reads says up: {host:
        ComputeService}; {} when none needs it; None when Nova cannot be
        read (those hosts are not judged)."""
        up = {s.host for s in services if reports_up(s)}
        if not any(isinstance(r, HostRead) and h in up and r.all_off()
                   for h, r in reads.items()):
            return {}
        try:
            return {s.host: s for s in self._compute.list_services()
                    if s.binary == "nova-compute"}
        except Exception as e:   # noqa: BLE001 - not judged then
            LOG.warning("audit_reread_failed", reason=str(e),
                        effect="a BMC read Off while Nova listed the host "
                               "up is not judged this audit")
            return None

    def run_once(self) -> Dict[str, str]:
        """Audit every compute host; returns {host: reason} unprotected."""
        started = time.monotonic()
        try:
            services = [s for s in self._compute.list_services()
                        if s.binary == "nova-compute"]
        except Exception as e:   # noqa: BLE001 - keep the last verdict
            self.last_error = "cannot list compute services: %s" % e
            LOG.warning("audit_skipped", reason=self.last_error)
            return self.unprotected()
        with self._lock:
            self._ids = {s.host: s.id for s in services}
        workers = max(1, min(self._conf.concurrency, len(services)))
        with concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="audit") as pool:
            reads = dict(zip((s.host for s in services),
                             bounded_map(pool, self._check, services,
                                         window_for(workers))))
        if self._stop.is_set():
            return self.unprotected()     # stopped mid-way: judged nothing
        after = self._nova_after(services, reads)
        with self._lock:
            before, was_degraded = self._unprotected, self._degraded
        unprotected: Dict[str, str] = {}
        degraded: Dict[str, List[str]] = {}
        #: hosts protected only by a level without power, and which
        protected_by: Dict[str, str] = {}
        evidence: List[Evidence] = []
        listed_up = {s.host for s in services if reports_up(s)}
        for host, read in reads.items():
            judged = isinstance(read, HostRead)
            nova_up, row = False, None
            if judged and host in listed_up and read.all_off():
                if after is None:
                    judged = False        # Nova unreadable: not judged
                else:
                    # Up before the read and after it, and left running
                    # by instanceha when read and now: only then is the
                    # BMC's Off a mismatch.
                    row = after.get(host)
                    nova_up = (reports_up(row) and not read.handled
                               and not self._handled(host))
            if isinstance(read, HostRead):
                evidence.append((host, read, nova_up, row))
            if not judged:
                # Skipped, stopped or not judged: the last verdict stands.
                if host in before:
                    unprotected[host] = before[host]
                if host in was_degraded:
                    degraded[host] = was_degraded[host]
                continue
            reason, failed, by = judge_levels(
                nova_up, read.bmc, read.labelled(), read.levels)
            if reason:
                unprotected[host] = reason
            elif failed:
                degraded[host] = failed
            if by is not None and not by.startswith("power:"):
                protected_by[host] = by
        self._send_evidence(services, evidence)
        self._log_changes(unprotected, degraded, protected_by)
        hardware = self._hardware_of(reads)
        with self._lock:
            self._unprotected, self._degraded = unprotected, degraded
            self._protected_by = protected_by
            self.audits += 1
            self.checked = len(services)
            self.skipped = sum(1 for r in reads.values() if r == SKIP)
            self.last_at = self._clock()
            self.last_seconds = time.monotonic() - started
            self.last_error = None
        if self._on_health is not None:
            self._on_health(hardware)
        return dict(unprotected)

    def _hardware_of(self, reads: Mapping[str, Union[HostRead, str]]
                     ) -> Dict[str, Health]:
        """{host: Health} read this audit (a host not read keeps its last
        health); logged when a host's worst severity changes."""
        with self._lock:
            before = dict(self._hardware)
        now: Dict[str, Health] = {}
        for host, read in reads.items():
            if isinstance(read, HostRead):
                if read.health is not None:
                    now[host] = read.health
            elif host in before:
                now[host] = before[host]
        for host, h in sorted(now.items()):
            was = before.get(host)
            if was is not None and was.severity is h.severity:
                continue
            if h.severity.value == "OK":
                if was is not None:
                    LOG.info("hardware_health_ok", host=host,
                             reason="the BMC reports every component OK")
            else:
                LOG.warning("hardware_degraded", host=host,
                            severity=h.severity.value, reason=h.why())
        with self._lock:
            self._hardware = now
        return now

    def hardware(self) -> Dict[str, Health]:
        """{host: Health} as the last audit read it (hosts whose drivers
        cannot tell left out; empty unless the health is read)."""
        with self._lock:
            return dict(self._hardware)

    def _send_evidence(self, services: List[ComputeService],
                       evidence: List[Evidence]) -> None:
        """Hand every power read to the engine (engine.evidence): a BMC
        seen On for the host, or Off while Nova reports the host up. For
        the latter, ``row`` is the host's service as Nova listed it again
        *after* the BMC reads: only a heartbeat newer than that proves the
        host ran while its BMC said Off (a host that lost its power just
        before the read sends none)."""
        if self._sink is None:
            return
        now = self._clock()
        ids = {s.host: s.id for s in services}
        for host, read, nova_up, row in sorted(evidence,
                                               key=lambda e: e[0]):
            powers = read.powers()
            if not powers:
                continue
            off = all(p == "off" for _, p in powers)
            self._sink(Event(
                E.POWER_OFF if off else E.POWER_ON, ids[host], now,
                name=host, source="audit",
                reason="audit: BMC reports power %s" % (
                    "Off" if off else "On"),
                payload=PowerReading(
                    readings=tuple(powers), by="audit",
                    nova_up=bool(nova_up),
                    # (nova_up: Nova listed the row, up)
                    after=(row.updated_at, row.status, row.disabled_reason)
                    if nova_up and row is not None else None,
                    identities=read.identities)))

    def _log_changes(self, unprotected: Dict[str, str],
                     degraded: Dict[str, List[str]],
                     protected_by: Optional[Dict[str, str]] = None) -> None:
        with self._lock:
            before, was_degraded = self._unprotected, self._degraded
            was_by = self._protected_by
        for host, by in sorted((protected_by or {}).items()):
            if was_by.get(host) != by:
                LOG.info("host_protected_without_power", host=host,
                         protected_by=by,
                         reason="no power method answers, but this level "
                                "can prove the host dead")
        for host, reason in sorted(unprotected.items()):
            if before.get(host) != reason:
                LOG.warning("host_unprotected", host=host, reason=reason)
        for host in sorted(set(before) - set(unprotected)):
            LOG.info("host_protected", host=host,
                     reason="fencing readiness check passed again")
        for host, failures in sorted(degraded.items()):
            if was_degraded.get(host) != failures:
                LOG.warning("host_fencing_degraded", host=host,
                            reason="a fencing method fails while another "
                                   "answers: " + "; ".join(failures))

    # -- the power watch ---------------------------------------------------------
    def _first_reading(self, host: str) -> Tuple[
            Optional[BMC], Optional[fencing_base.PowerState]]:
        if self._gate(host) != READ:
            return None, None
        return chain.first_reading(self._bmc_for(host), self._fencer)

    def watch_once(self) -> Dict[str, Optional[fencing_base.PowerState]]:
        """Read every known host's power state; send an event for each
        change. Returns {host: PowerState} read."""
        with self._lock:
            ids = dict(self._ids)
        if not ids:
            return {}
        workers = max(1, min(self._conf.concurrency, len(ids)))
        with concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="powerwatch") as pool:
            found = dict(zip(ids, bounded_map(pool, self._first_reading,
                                              ids, window_for(workers))))
        states = {h: st for h, (_, st) in found.items()}
        now = self._clock()
        for host, state in sorted(states.items()):
            if state is None:
                continue
            method = found[host][0]
            before = self._power.get(host)
            self._power[host] = state
            if state is before:
                continue
            off = state is fencing_base.PowerState.OFF
            with self._lock:
                if off and before is fencing_base.PowerState.ON:
                    self._lost_power.add(host)
                elif not off:
                    self._lost_power.discard(host)
            if off and before is fencing_base.PowerState.ON:
                LOG.warning("power_lost", host=host, reason="the BMC now "
                            "reports power Off (it reported On): the "
                            "heartbeat is judged with power_off_delta")
            if self._sink is not None:
                self._sink(Event(E.POWER_OFF if off else E.POWER_ON,
                                 ids[host], now, name=host, source="bmc",
                                 reason="BMC reports power %s" % state.value,
                                 payload=PowerReading(
                                     readings=((inventory.method_key(method),
                                                state.value),),
                                     by="power watch")))
        return states

    def powered_off(self) -> Set[str]:
        """Hosts whose BMC the watch last read Off after reading On (a
        host Off since the first read may be an entry pointing at another
        machine: the audit reports it; it gets no shorter delta)."""
        with self._lock:
            return set(self._lost_power)

    # -- answers ---------------------------------------------------------------
    def unprotected(self) -> Dict[str, str]:
        with self._lock:
            return dict(self._unprotected)

    def degraded(self) -> Dict[str, List[str]]:
        with self._lock:
            return {h: list(d) for h, d in self._degraded.items()}

    def protected_by(self) -> Dict[str, str]:
        """Hosts the last audit found protected only by a level that
        fences without power (no power method answered): {host: which
        level}."""
        with self._lock:
            return dict(self._protected_by)

    def health(self) -> Dict[str, Any]:
        with self._lock:
            return {"audits": self.audits, "checked": self.checked,
                    "paused_for_recovery": self._paused_since is not None
                    and not self._bounded,
                    "pause_bounded": self._bounded,
                    "skipped": self.skipped,
                    "unprotected": len(self._unprotected),
                    "degraded": len(self._degraded),
                    "protected_without_power": len(self._protected_by),
                    "last_at": self.last_at,
                    "last_seconds": None if self.last_seconds is None
                    else round(self.last_seconds, 3),
                    "last_error": self.last_error}

    # -- thread ----------------------------------------------------------------
    def next_wait(self) -> float:
        j = self._conf.jitter
        return self._conf.interval * (1 + self._rng.uniform(-j, j))

    def start(self, sink: Optional[Sink] = None) -> None:
        """The audit at once, then every next_wait(); the power watch
        (when on) every power_watch_interval, its first read one interval
        after the start. An exception is logged and the loop goes on.
        ``sink`` (else the one given at construction) receives the power
        watch's POWER_OFF / POWER_ON events."""
        if sink is not None:
            self._sink = sink
        self._stop.clear()
        self._loops = [periodic.Periodic(
            "fencing-audit", self.run_once, self.next_wait, stop=self._stop,
            error_event="audit_failed", log=LOG)]
        interval = self._conf.power_watch_interval
        if interval > 0:
            self._loops.append(periodic.Periodic(
                "power-watch", self.watch_once, interval, first=interval,
                stop=self._stop, error_event="power_watch_failed", log=LOG))
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        self._stop.set()
        for loop in self._loops:
            loop.join(5)
