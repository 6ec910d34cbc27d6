"""The reconciler: level-triggered safety net, one os-services call a pass.

Each pass reads every nova-compute service and says, for every host, what
is true now: heartbeat fresh (HEARTBEAT_OK), stale or down (HEARTBEAT_LOST),
or forced down by somebody else (FORCED_DOWN). The state machine decides
what that means; the reconciler never acts. A dead compute sends no
notification, so this poll is what detects it when no other source does.

Heartbeat age is measured on Nova's clock, never this node's: a local clock
ahead of Nova's (or Nova's writers' clocks behind) would otherwise make
every live host look stale. Nova's clock is estimated so that a minority of
writers with skewed clocks (one nova-conductor running fast) cannot set it
(drivers.compute.nova_clock.NovaClock, one per Nova, shared with the
control-plane monitor). The skew between writers is reported in health().

Between passes, a host whose heartbeat goes stale before the next pass is
read again alone at that moment ([detection] stale_reread,
sources.rereads): its death is seen then, not a whole poll later.
"""

import random
import time
from typing import Any, Callable, Collection, Dict, List, Optional, Set, \
    Tuple

import structlog

from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova_clock import Estimate, NovaClock
from instanceha.events import Event, EventKind as E
from instanceha.events import ServiceReport
from instanceha import runtime
from instanceha.fsm.nova_row import classify
from instanceha.sources.base import PeriodicSource, Sink
from instanceha.sources import rereads
from instanceha.util import periodic

LOG = structlog.get_logger("instanceha.reconciler")
#: Passes start between DITHER and 1 times [detection] poll_interval apart.
DITHER = 0.8

#: (host ids, host names) whose row is handed over at every pass
Watched = Tuple[Collection[str], Collection[str]]
#: {host: (aggregate name, ...)}
HostAggregates = Dict[str, Tuple[str, ...]]


class Reconciler(PeriodicSource[Sink]):

    def __init__(self, conf: Any, compute: base.ComputeDriver, sink: Sink,
                 clock: Callable[[], float],
                 monotonic: Optional[Callable[[], float]] = None,
                 on_capacity: Optional[Callable[[List[str]], object]] = None,
                 powered_off: Optional[Callable[[], Collection[str]]] = None,
                 wants_every_report: Optional[Callable[[], Watched]] = None
                 ) -> None:
        """``on_capacity(hosts)``: called with the hosts that became
        schedulable (enabled, up, heartbeating) since the last pass:
        capacity may have appeared; ``powered_off()``: the hosts whose
        BMC the power watch saw go Off; ``wants_every_report()``: (host
        ids, host names) whose row is handed over at every pass, changed
        or not (None: every row of every host, at every pass)."""
        self._conf = conf
        self._compute = compute
        self._sink = sink
        self._clock = clock
        # Elapsed time for NovaClock. The real wall clock pairs with the
        # real monotonic clock (immune to steps of the local clock); an
        # injected test clock serves for both.
        if monotonic is None:
            monotonic = time.monotonic if clock is time.time else clock
        self._monotonic = monotonic
        # One estimate of Nova's clock per Nova (the driver's), fed by the
        # control-plane monitor's reads too; a test double may have none.
        self._nova_clock = getattr(compute, "nova_clock", None) \
            or NovaClock()
        self._api_record: Optional[base.CallRecord] = getattr(
            compute, "api_record", None)
        self._periodic = periodic.Periodic(
            "instanceha-reconciler", self._run, self._wait,
            on_error=self._failed, log=LOG)
        #: monotonic moment of the next full pass (None: at once)
        self._full_due: Optional[float] = None
        #: hosts read again alone before the next pass (sources.rereads)
        self._rereads = rereads.Plan(conf.detection.stale_reread_limit)
        self.rereads = 0
        self.reread_errors = 0
        self._rng = random.Random()
        self.passes = 0
        self.errors = 0
        self.last_pass_at: Optional[float] = None
        self.last_pass_cpu: Optional[float] = None
        # rows handed over at the last pass
        self.last_pass_sent: Optional[int] = None
        self.last_error: Optional[str] = None
        # local minus Nova's estimated now, s
        self.clock_skew: Optional[float] = None
        # skew last warned about, None: within
        self._skew_warned: Optional[float] = None
        # nova_clock.Estimate of the last pass
        self.writer_skew: Optional[Estimate] = None
        # writer skew last warned about
        self._writer_warned: Optional[float] = None
        # {host: aggregate names}, last read
        self._host_aggregates: Optional[HostAggregates] = None
        self.powered_off: Callable[[], Collection[str]] = powered_off or set
        self.on_capacity: Callable[[List[str]], object] = \
            on_capacity or (lambda hosts: None)
        self._wants_every = wants_every_report
        #: host id -> what its last handed-over row said (the verdict)
        self._said: Dict[str, Tuple[Any, ...]] = {}
        # when every row was last handed over
        self._full_at: Optional[float] = None
        self._schedulable: Optional[Set[str]] = None

    def run_once(self) -> int:
        """One pass: one API call, one event per compute host."""
        cpu = time.thread_time()
        started = self._monotonic()
        try:
            services = self._compute.list_services()
        except Exception as e:
            if self._api_record is not None:
                self._api_record.failed(self._monotonic(),
                                        "GET /os-services", e)
            raise
        ended = self._monotonic()
        if self._api_record is not None:
            self._api_record.services_read(started, ended)
        self._full_due = ended + self._next_wait()
        now = self._clock()
        self._nova_clock.observe(services, started, ended)
        estimate = self._nova_clock.estimate()
        nova_now = None if estimate is None else ended + estimate.offset
        if nova_now is not None:
            self.clock_skew = now - nova_now
            self._check_skew(self.clock_skew, nova_now)
            self.writer_skew = estimate
            self._check_writers(estimate)
        aggregates = self._aggregates()
        counts: Dict[E, int] = {}
        # Ages are judged at the read's start, on Nova's clock: the rows
        # are Nova's snapshot from some moment during the read, never
        # before it started. Judged at its end, a slow read (a large
        # cloud, a loaded control plane) would count its own duration as
        # heartbeat age and call live hosts lost. With no updated_at
        # anywhere, every age is unknown anyway.
        if estimate is not None:
            ref = started + estimate.offset
        else:
            ref = now - (ended - started)
        read_at = now - (ended - started)   # the read's start, our clock
        unpowered = self.powered_off()
        every, ids, names = self._watch(now)
        said = self._said
        sent = 0
        # Read once a pass: an option read costs more than judging a row.
        conf_delta = self._conf.detection.delta
        off_delta = min(conf_delta, self._conf.audit.power_off_delta)
        schedulable: Set[str] = set()
        # Hosts whose heartbeat goes stale before the next pass, and when.
        plan: Optional[List[rereads.Reread]] = (
            [] if estimate is not None
            and self._conf.detection.stale_reread else None)
        horizon = self._full_due
        for svc in services:
            # A host whose BMC went from On to Off has a second witness,
            # so a shorter silence (still above Nova's report interval)
            # proves its heartbeat lost.
            delta = off_delta if svc.host in unpowered else conf_delta
            kind, reason = classify(svc, ref, delta)
            counts[kind] = counts.get(kind, 0) + 1
            if plan is not None and kind is E.HEARTBEAT_OK \
                    and svc.updated_at is not None:
                assert estimate is not None
                at = rereads.first_moment(svc.updated_at, delta,
                                          estimate.offset,
                                          estimate.tolerance)
                if at <= ended:
                    # This read already judged it fresh on the estimate:
                    # the next read worth making is when that calls it
                    # stale.
                    at = rereads.stale_moment(svc.updated_at, delta,
                                              estimate.offset)
                if at < horizon:
                    plan.append(rereads.Reread(at, svc.id, svc.host,
                                               svc.updated_at))
            if kind is E.HEARTBEAT_OK and svc.status == "enabled" \
                    and svc.state == "up" and not svc.forced_down:
                schedulable.add(svc.host)
            aggs = (None if aggregates is None
                    else aggregates.get(svc.host, ()))
            verdict = (kind, svc.host, svc.forced_down, svc.status,
                       svc.disabled_reason, svc.zone, aggs)
            if svc.id in ids or svc.host in names:
                # Watched: every row goes, and none is remembered, so the
                # first pass after the host turns quiet again says what
                # is true then (its record may have been reset meanwhile:
                # a suspension ended, a host watched afresh).
                said.pop(svc.id, None)
            elif every or said.get(svc.id) != verdict:
                said[svc.id] = verdict
            else:
                continue            # a quiet host, nothing new: no event
            sent += 1
            report = ServiceReport(
                forced_down=svc.forced_down, zone=svc.zone,
                updated_at=svc.updated_at, status=svc.status,
                disabled_reason=svc.disabled_reason, aggregates=aggs,
                read_at=read_at)
            self._sink(Event(kind, svc.id, now, name=svc.host, reason=reason,
                             source="reconciler", payload=report))
        if every and len(said) > len(services):
            listed = {svc.id for svc in services}
            for gone in [h for h in said if h not in listed]:
                del said[gone]
        self.last_pass_sent = sent
        self._plan_rereads(plan)
        self._note_schedulable(schedulable)
        self.passes += 1
        self.last_pass_at = now
        # CPU of this thread for the pass: the call, parsing, judging and
        # handing events over (not the engine applying them).
        self.last_pass_cpu = time.thread_time() - cpu
        LOG.debug("reconcile_pass", services=len(services),
                  clock_skew=_rounded(self.clock_skew), sent=sent,
                  **{k.value: n for k, n in counts.items()})
        return len(services)

    def _plan_rereads(self, plan: Optional[List[rereads.Reread]]) -> None:
        """The pass judged every row: the hosts to read again alone
        before the next pass are ``plan``'s (None: none)."""
        self._rereads.limit = self._conf.detection.stale_reread_limit
        self._rereads.replace(plan or [])
        if not plan:
            return
        LOG.debug("stale_reread_planned", hosts=len(self._rereads),
                  left_for_next_pass=self._rereads.left_out,
                  reason="heartbeat due to go stale before the next pass: "
                         "its row is read again alone at that moment")
        if self._rereads.left_out:
            LOG.info("stale_reread_limit", planned=len(self._rereads),
                     left_for_next_pass=self._rereads.left_out,
                     limit=self._rereads.limit,
                     reason="more heartbeats go stale before the next pass "
                            "than [detection] stale_reread_limit: the "
                            "others are judged at the next pass")

    def _reread_due(self) -> None:
        """Read again, alone, each host whose planned moment has come
        (its heartbeat due to go stale), and judge its row as a pass
        would. A failed read leaves the host to the next pass."""
        for due in self._rereads.take_due(self._monotonic()):
            try:
                self._reread(due)
            except Exception as e:      # the next pass reads it anyway
                self.reread_errors += 1
                LOG.warning("stale_reread_failed", host=due.host,
                            reason=str(e) or type(e).__name__,
                            effect="the host's row is judged at the next "
                                   "pass")

    def _reread(self, due: rereads.Reread) -> None:
        started = self._monotonic()
        svc = self._compute.service_of(due.host)
        ended = self._monotonic()
        self.rereads += 1
        estimate = self._nova_clock.estimate()
        if svc is None or svc.id != due.host_id or estimate is None:
            return                      # gone or renamed: the next pass
        delta = self._conf.detection.delta
        if svc.host in self.powered_off():
            delta = min(delta, self._conf.audit.power_off_delta)
        kind, reason = classify(svc, started + estimate.offset, delta)
        if kind is E.HEARTBEAT_OK:
            # Reporting again, or still fresh on Nova's clock as now
            # estimated: nothing new; read again at its new moment if
            # that comes before the next pass.
            if svc.updated_at is not None and due.tries < rereads.TRIES \
                    and self._full_due is not None:
                at = rereads.stale_moment(svc.updated_at, delta,
                                          estimate.offset)
                if at < self._full_due:
                    self._rereads.add(rereads.Reread(
                        at, svc.id, svc.host, svc.updated_at,
                        due.tries + 1))
            return
        now = self._clock()
        aggs: Optional[Tuple[str, ...]] = None
        if self._conf.policy.threshold_per_aggregate:
            aggs = (self._host_aggregates or {}).get(svc.host, ())
        if svc.id in self._said:        # not watched: remembered
            self._said[svc.id] = (kind, svc.host, svc.forced_down,
                                  svc.status, svc.disabled_reason, svc.zone,
                                  aggs)
        LOG.info("stale_reread", host=svc.host, verdict=kind.value,
                 reason="heartbeat due to go stale before the next pass, "
                        "read again alone: " + reason)
        self._sink(Event(kind, svc.id, now, name=svc.host, reason=reason,
                         source="reconciler", payload=ServiceReport(
                             forced_down=svc.forced_down, zone=svc.zone,
                             updated_at=svc.updated_at, status=svc.status,
                             disabled_reason=svc.disabled_reason,
                             aggregates=aggs,
                             read_at=now - (ended - started))))

    def _watch(self, now: float) -> Tuple[bool, Collection[str],
                                          Collection[str]]:
        """(hand over every row?, host ids and names whose row is handed
        over anyway) for a pass at ``now``."""
        interval = self._conf.detection.full_report_interval
        if (self._wants_every is None or not interval
                or self._full_at is None or now - self._full_at >= interval
                or now < self._full_at):
            self._full_at = now
            return True, (), ()
        ids, names = self._wants_every()
        return False, ids, names

    def _note_schedulable(self, now: Set[str]) -> None:
        """``now``: the hosts enabled, up and heartbeating at this pass.
        Those that were not at the last pass (none at the first pass): the
        scheduler can place servers there, so hosts waiting for capacity
        are told."""
        before, self._schedulable = self._schedulable, now
        if before is not None and now - before:
            try:
                self.on_capacity(sorted(now - before))
            except Exception:           # never stops a reconcile pass
                LOG.exception("capacity_notice_failed")

    def _aggregates(self) -> Optional[HostAggregates]:
        """{host: (aggregate name, ...)} when the threshold applies per
        aggregate, else None. A failed read keeps the last one known (the
        pass goes on: services matter more than aggregates)."""
        if not self._conf.policy.threshold_per_aggregate:
            return None
        found = base.aggregates_or_none(
            self._compute, LOG if self._host_aggregates is None else None,
            effect="the threshold is applied globally and per zone only "
                   "until os-aggregates answers")
        if found is None:
            if self._host_aggregates is None:
                self._host_aggregates = {}
            return self._host_aggregates
        mapping: Dict[str, List[str]] = {}
        for agg in found:
            for host in agg.hosts:
                mapping.setdefault(host, []).append(agg.name)
        self._host_aggregates = {h: tuple(sorted(n))
                                 for h, n in mapping.items()}
        return self._host_aggregates

    def _check_skew(self, skew: float, nova_now: float) -> None:
        """Warn once when the skew passes the margin, again when it moves by
        more than the margin, and say when it is back within (a quarter of
        the margin below it, so a skew hovering at the margin does not
        log every pass)."""
        margin = self._conf.detection.clock_skew_warning
        if abs(skew) > margin:
            if self._skew_warned is None \
                    or abs(skew - self._skew_warned) > margin:
                LOG.warning(
                    "clock_skew", skew=_rounded(skew), margin=margin,
                    nova_now=round(nova_now, 3),
                    reason="this node's clock is %.0fs %s Nova's (local time "
                           "minus Nova's now as the majority of service "
                           "rows' updated_at show it); "
                           "heartbeat staleness is judged on Nova's clock, "
                           "but local timestamps no longer match Nova's: "
                           "check NTP here and on Nova's controllers"
                           % (abs(skew), "ahead of" if skew > 0
                              else "behind"))
                self._skew_warned = skew
        elif self._skew_warned is not None and abs(skew) <= 0.75 * margin:
            LOG.info("clock_skew", skew=_rounded(skew), margin=margin,
                     reason="this node's clock is back within %.0fs of "
                            "Nova's (was %.0fs off)"
                            % (margin, self._skew_warned))
            self._skew_warned = None

    def _check_writers(self, est: Estimate) -> None:
        """Warn once when some service rows are stamped by a clock more
        than [detection] writer_skew_warning off the others' (a
        nova-conductor without NTP), again when it moves by more than
        that, and say when it is back within."""
        margin = self._conf.detection.writer_skew_warning
        worst = est.ahead if est.ahead >= est.behind else -est.behind
        if abs(worst) > margin:
            if self._writer_warned is None \
                    or abs(worst - self._writer_warned) > margin:
                LOG.warning(
                    "writer_clock_skew", ahead=_rounded(est.ahead),
                    behind=_rounded(est.behind), services=est.rows_off,
                    of=est.rows, margin=margin,
                    reason="%d of %d service rows are stamped by a clock "
                           "%.0fs %s the clock of most rows (Nova's "
                           "heartbeats are written by nova-conductor: "
                           "check NTP on every conductor); Nova's now is "
                           "taken from the majority, so their hosts' "
                           "deaths are seen up to that much %s"
                           % (est.rows_off, est.rows, abs(worst),
                              "ahead of" if worst > 0 else "behind",
                              "later" if worst > 0 else "earlier"))
                self._writer_warned = worst
        elif self._writer_warned is not None \
                and abs(worst) <= 0.75 * margin:
            LOG.info("writer_clock_skew", ahead=_rounded(est.ahead),
                     behind=_rounded(est.behind), margin=margin,
                     reason="every service row is stamped within %.0fs of "
                            "the others' clock again" % margin)
            self._writer_warned = None

    def _run(self) -> None:
        """What the loop runs: the full pass when it is due, else the
        re-reads planned for now."""
        if self._full_due is None or self._monotonic() >= self._full_due:
            self._pass()
        else:
            self._reread_due()

    def _pass(self) -> None:
        self._full_due = None           # a failed pass: again in a poll
        with runtime.collection_paused():
            self.run_once()
        self.last_error = None

    def _failed(self, e: BaseException) -> None:
        self.errors += 1
        self.last_error = str(e)
        LOG.warning("reconcile_failed", reason=str(e),
                    retry_in=self._conf.detection.poll_interval)

    def _wait(self) -> float:
        """Seconds to the loop's next run: the next full pass, or a
        planned re-read before it."""
        now = self._monotonic()
        if self._full_due is None:
            self._full_due = now + self._next_wait()
        at = self._full_due
        nxt = self._rereads.next_at()
        if nxt is not None and nxt < at:
            at = nxt
        return max(0.0, at - now)

    def _next_wait(self) -> float:
        """Seconds to the next pass: poll_interval times a random factor
        from DITHER to 1. Nova's computes often report in step, and reads
        at a fixed period would fall at the same time after each
        heartbeat for minutes; varied times let NovaClock pin Nova's now
        to a small part of a poll. Never longer than poll_interval."""
        return self._conf.detection.poll_interval * self._rng.uniform(
            DITHER, 1.0)

    def health(self) -> Dict[str, Any]:
        w = self.writer_skew
        return {"passes": self.passes, "errors": self.errors,
                "last_pass_at": self.last_pass_at,
                "last_error": self.last_error,
                "last_pass_cpu": (None if self.last_pass_cpu is None
                                  else round(self.last_pass_cpu, 4)),
                # rows handed over to the engine at the last pass (the
                # others said nothing new: detection.full_report_interval)
                "last_pass_sent": self.last_pass_sent,
                # hosts read again alone when their heartbeat was due to
                # go stale between passes ([detection] stale_reread)
                "rereads": self.rereads,
                "reread_errors": self.reread_errors,
                "clock_skew": _rounded(self.clock_skew),
                # Between Nova's writers: how far the furthest service
                # row's clock is ahead of / behind the majority's, and how
                # many rows are off (0: all within a poll of each other).
                "writer_skew_ahead": _rounded(
                    None if w is None else w.ahead),
                "writer_skew_behind": _rounded(
                    None if w is None else w.behind),
                "writer_skew_services": None if w is None else w.rows_off}


def _rounded(skew: Optional[float]) -> Optional[float]:
    return None if skew is None else round(skew, 2)
