"""The fencing readiness audit: could every compute host be fenced now?

Nobody should find out on the day of a failure that a host's BMC password
was rotated months ago. At start and every ``[audit] interval`` seconds
(jittered), for every compute host Nova lists, the audit asks each fencing
method of the host's inventory entry for its power state (a read, never an
action) and judges with :func:`judge` (pure):

* no inventory entry (and no ``[fencing] default_driver``), or the noop
  driver: unprotected;
* no method answers (BMC unreachable, credentials refused, agent missing):
  unprotected, with each method's error;
* every method that answers reports Off while Nova reports the compute up
  and not forced down: unprotected: the entry most likely points at another
  machine, and fencing it would "succeed" while the host runs on;
* else protected (a method that fails while another answers is named in
  ``degraded``).

The result (``unprotected()``: {host: reason}) is shown in status, GET
/status and /metrics; a host is logged when it becomes unprotected, when
its reason changes, and when it is protected again, not on every pass.
"""

import concurrent.futures
import random
import threading
import time

import structlog

from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing import inventory
from instanceha.events import Event, EventKind as E
from instanceha.events import PowerReading
from instanceha.log import mask_known
from instanceha.util import periodic
from instanceha.util.pool import bounded_map, window_for

LOG = structlog.get_logger("instanceha.audit")

#: Seconds between two looks at whether a recovery still runs, while the
#: audit's reads wait for it.
PAUSE_POLL = 1.0


def read_power(fencer, method):
    """One method's power state (a read, never an action), or why it
    could not be read; a driver's error never carries the password."""
    try:
        return fencer(method.driver).power_state(method)
    except fencing_base.FenceError as e:
        text = str(e)
    except Exception as e:   # noqa: BLE001 - a driver bug is reported
        text = "%s: %s" % (type(e).__name__, e)
    return mask_known(text, [method.password])


def read_identity(fencer, method):
    """What one method's BMC says about its machine (drivers'
    system_identity), or None (not supported, or an error: logged)."""
    try:
        return fencer(method.driver).system_identity(method)
    except Exception as e:   # noqa: BLE001 - identity only adds checks
        text = mask_known(str(e), [method.password])
        LOG.info("system_identity_unknown", driver=method.driver,
                 address=method.address, reason=text)
        return None


def readings(bmc, fencer):
    """[(label, PowerState or why not)] for each fencing method of a
    host's entry (the noop driver reads nothing)."""
    if bmc is None:
        return []
    return [(label(m), read_power(fencer, m)) for m in bmc.methods
            if m.driver != "noop"]


def label(method):
    return "%s %s" % (method.driver, method.address) if method.address \
        else method.driver


def judge(service, bmc, readings):
    """``(reason, degraded)``: reason is None when the host can be fenced.

    ``service``: the host's ComputeService; ``bmc``: its inventory entry or
    None; ``readings``: [(method label, PowerState or error text)] in the
    entry's method order."""
    if bmc is None:
        return "no entry in the fencing inventory", []
    if all(m.driver == "noop" for m in bmc.methods):
        return "fencing driver noop does not power anything off", []
    answered = [(name, r) for name, r in readings
                if isinstance(r, fencing_base.PowerState)]
    failed = ["%s: %s" % (name, r) for name, r in readings
              if not isinstance(r, fencing_base.PowerState)]
    if not answered:
        return "no fencing method answers a power-state read: %s" % (
            "; ".join(failed) or "no method"), []
    nova_up = service.state == "up" and not service.forced_down
    if nova_up and all(r is fencing_base.PowerState.OFF
                       for _, r in answered):
        return ("BMC reports power Off while Nova reports the compute up: "
                "the inventory entry may point at another machine (%s)"
                % ", ".join(name for name, _ in answered)), failed
    return None, failed


class FencingAudit:
    """Runs the audit in its own thread; ``unprotected()`` and
    ``health()`` answer from the last audit without I/O."""

    def __init__(self, conf, compute, bmc_for, fencer, clock=time.time,
                 rng=None, sink=None, host_ids=None, give_way=None,
                 wait=None):
        """``sink``: where the power watch sends POWER_OFF / POWER_ON
        events (the engine's submit); ``host_ids``: {host name: service
        id}, refreshed by each audit when not given; ``give_way()``: why
        the reads should wait now (hosts in recovery: the engine's
        ``urgent``), or None; ``wait(seconds)``: how a read waits before
        asking again (True when the audit is stopping)."""
        self._conf = conf.audit
        self._compute = compute
        self._bmc_for = bmc_for
        self._fencer = fencer
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._stop = threading.Event()      # ends both loops
        self._loops = []
        self._unprotected = {}
        self._degraded = {}
        self.audits = 0
        self.last_at = None
        self.last_seconds = None
        self.last_error = None
        self.checked = 0
        self._sink = sink
        self._give_way = give_way or (lambda: None)
        self._wait = wait or self._stop.wait
        self._paused = False        # reads waiting for a recovery
        self._next_slot = float("-inf")     # the next read's earliest time
        #: reads that waited for a recovery (status)
        self.gave_way = 0
        self._ids = dict(host_ids or {})
        self._power = {}            # host -> last PowerState the watch read
        self._lost_power = set()    # read On, then Off

    # -- one audit ------------------------------------------------------------
    def _after_recoveries(self):
        """Wait while hosts are being proven dead or evacuated: reading
        thousands of BMCs competes with them for the process and the
        network, and the audit can come a little later (logged once per
        pause). Returns False when the audit is stopping."""
        why = self._give_way()
        if why is None:
            return True
        with self._lock:
            first, self._paused = not self._paused, True
            self.gave_way += 1
        if first:
            LOG.info("audit_paused", reason=why, effect="BMC reads of the "
                     "fencing audit and power watch wait until no host is "
                     "in recovery")
        while why is not None:
            if self._wait(PAUSE_POLL):
                return False
            why = self._give_way()
        with self._lock:
            first, self._paused = self._paused, False
        if first:
            LOG.info("audit_resumed", reason="no host in recovery")
        return True

    def _paced(self):
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

    def _check(self, service):
        """(reason, degraded, [(method key, "on"/"off")])."""
        if not (self._paced() and self._after_recoveries()):
            return None, [], ([], [])
        bmc = self._bmc_for(service.host)
        methods = [m for m in bmc.methods if m.driver != "noop"] \
            if bmc is not None else []
        reads = [read_power(self._fencer, m) for m in methods]
        reason, degraded = judge(service, bmc, [
            (label(m), r) for m, r in zip(methods, reads)])
        powers = [(inventory.method_key(m), r.value) for m, r in
                  zip(methods, reads) if r in (fencing_base.PowerState.ON,
                                               fencing_base.PowerState.OFF)]
        found = [(inventory.method_key(m), read_identity(self._fencer, m))
                 for m, r in zip(methods, reads)
                 if isinstance(r, fencing_base.PowerState)]
        return reason, degraded, (powers, [f for f in found if f[1]])

    def _send_evidence(self, services, verdicts):
        """Hand every power read to the engine (engine.evidence): a BMC
        seen On for the host, or Off while Nova reports the host up. For
        the latter the services are read again *after* the BMC reads: only
        a heartbeat newer than that proves the host ran while its BMC said
        Off (a host that lost its power just before the read sends none)."""
        if self._sink is None:
            return
        up = {s.host: s.state == "up" and not s.forced_down
              for s in services}
        after = {}
        if any(up.get(h) and any(p == "off" for _, p in v[2][0])
               for h, v in verdicts.items()):
            try:
                after = {s.host: (s.updated_at, s.status, s.disabled_reason)
                         for s in self._compute.list_services()
                         if s.binary == "nova-compute"}
            except Exception as e:   # noqa: BLE001 - no suspicion then
                LOG.warning("audit_reread_failed", reason=str(e))
        now = self._clock()
        ids = {s.host: s.id for s in services}
        for host, (_, _, (powers, found)) in sorted(verdicts.items()):
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
                    nova_up=bool(up.get(host)), after=after.get(host),
                    identities=tuple(found))))

    def run_once(self):
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
            verdicts = dict(zip((s.host for s in services),
                                bounded_map(pool, self._check, services,
                                            window_for(workers))))
        if self._stop.is_set():
            return self.unprotected()     # stopped mid-way: judged nothing
        unprotected = {h: r for h, (r, _, _) in verdicts.items() if r}
        degraded = {h: d for h, (r, d, _) in verdicts.items()
                    if d and not r}
        self._send_evidence(services, verdicts)
        self._log_changes(unprotected, degraded)
        with self._lock:
            self._unprotected, self._degraded = unprotected, degraded
            self.audits += 1
            self.checked = len(services)
            self.last_at = self._clock()
            self.last_seconds = time.monotonic() - started
            self.last_error = None
        return dict(unprotected)

    def _log_changes(self, unprotected, degraded):
        with self._lock:
            before, was_degraded = self._unprotected, self._degraded
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
    def _first_reading(self, host):
        if not self._after_recoveries():
            return None, None
        return chain.first_reading(self._bmc_for(host), self._fencer)

    def watch_once(self):
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

    def powered_off(self):
        """Hosts whose BMC the watch last read Off after reading On (a
        host Off since the first read may be an entry pointing at another
        machine: the audit reports it; it gets no shorter delta)."""
        with self._lock:
            return set(self._lost_power)

    # -- answers ---------------------------------------------------------------
    def unprotected(self):
        with self._lock:
            return dict(self._unprotected)

    def degraded(self):
        with self._lock:
            return {h: list(d) for h, d in self._degraded.items()}

    def health(self):
        with self._lock:
            return {"audits": self.audits, "checked": self.checked,
                    "paused_for_recovery": self._paused,
                    "unprotected": len(self._unprotected),
                    "degraded": len(self._degraded),
                    "last_at": self.last_at,
                    "last_seconds": None if self.last_seconds is None
                    else round(self.last_seconds, 3),
                    "last_error": self.last_error}

    # -- thread ----------------------------------------------------------------
    def next_wait(self):
        j = self._conf.jitter
        return self._conf.interval * (1 + self._rng.uniform(-j, j))

    def start(self, sink=None):
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

    def stop(self):
        self._stop.set()
        for loop in self._loops:
            loop.join(5)
