"""The ``watchdog`` fencing method: a host proven dead by time, not by a
power action (issue 37, section 2).

A host whose agent arms a watchdog (:mod:`instanceha.agent.watchdog`)
resets itself when it may not live (:mod:`instanceha.agent.selffence`).
This method counts a silent host as fenced only when all hold, measured
on the engine's monotonic clock:

1. its last beat reported an armed watchdog, with its watchdog timeout
   and isolation timeout (a host that never reported one, or reported it
   disarmed by an orderly stop, is refused: nothing proves it dead);
2. the engine condemned it at the start of this attempt
   (:meth:`Witness.condemn`: the signed poison pill, sent to the host and
   to its peers; said in the log and the fencing action's journal entry)
   and a majority of the peers its last
   beat named acknowledged the pill (*published*);
3. ``max(last beat, published) + isolation timeout + watchdog timeout +
   [fencing] watchdog_margin`` has passed.

:func:`deadline` is that rule, pure. :meth:`WatchdogDriver.fence_pass`
is one pass of the fencing for the engine's work queue: the first
condemns, each judges the deadline and says when to look again (a beat
after the condemnation pushes it later), for at most ``[fencing]
watchdog_wait_max`` seconds; no worker waits meanwhile.
:meth:`WatchdogDriver.power_off` runs the passes, sleeping between them
(``sleep`` injected), for a caller that may wait. :meth:`power_state`
reads OFF once the deadline has passed, UNKNOWN before (never ON: a
silent host is not known to run).

The heartbeat state comes through an explicit :class:`Witness` (the
heartbeat listener, :class:`instanceha.sources.heartbeat.HeartbeatSource`),
given to the driver when the service builds it (:func:`load_driver`'s
``watchdog_witness``); without one every call fails.
"""

import datetime
import time
from typing import NamedTuple, Optional, Protocol, Tuple

import structlog

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.watchdog")

POLL = 1.0
#: protocol.WATCHDOG_DISARMED (drivers do not import the heartbeat
#: package: the layers in .importlinter; a test checks they agree)
DISARMED = 2


class WatchdogState(NamedTuple):
    """One host as the fencing method reads it (kept by
    :class:`instanceha.sources.watchdog_book.WatchdogBook`)."""
    host: str
    #: the host's last beat reported an armed watchdog
    armed: bool
    #: protocol.WATCHDOG_* of the last beat (NONE: no report)
    state: int
    watchdog_timeout: float
    isolation_timeout: float
    last_beat: float
    condemned_at: Optional[float]
    published_at: Optional[float]
    peers: int
    acks: int


class Witness(Protocol):
    """What the method reads and does through the heartbeat listener."""

    def monotonic(self) -> float: ...

    def watchdog_state(self, host_name: str) -> Optional[WatchdogState]: ...

    def condemn(self, host_name: str, reason: str) -> Optional[float]: ...

    def lift(self, host_name: str) -> None: ...


class LazyWitness:
    """A Witness found when first used (the service builds its fencers
    before its heartbeat listener): ``get()`` returns it or None."""

    def __init__(self, get):
        self._get = get

    def _witness(self):
        witness = self._get()
        if witness is None:
            raise base.FenceError("watchdog method: no agent heartbeat "
                                  "listener ([agent] listen_addresses)")
        return witness

    def monotonic(self):
        return self._witness().monotonic()

    def watchdog_state(self, host_name):
        return self._witness().watchdog_state(host_name)

    def condemn(self, host_name, reason):
        return self._witness().condemn(host_name, reason)

    def lift(self, host_name):
        # No listener: nothing was condemned through it.
        witness = self._get()
        if witness is not None:
            witness.lift(host_name)


class Judgement(NamedTuple):
    """``dead``: the host counts as fenced; ``deadline``: when it will
    (None: never on what is known); ``why``: one line."""
    dead: bool
    deadline: Optional[float]
    why: str


def refusal(state: Optional[WatchdogState]) -> Optional[str]:
    """Why ``state`` can never prove the host dead, or None."""
    if state is None:
        return "its agent was never heard"
    if not state.armed:
        return ("its agent reported its watchdog disarmed (an orderly "
                "stop)" if state.state == DISARMED else
                "its agent never reported an armed watchdog")
    return None


def deadline(state: Optional[WatchdogState], now: float,
             margin: float) -> Judgement:
    """The rule of the module's text, at ``now``."""
    why = refusal(state)
    if why is not None:
        return Judgement(False, None, why)
    assert state is not None
    if state.condemned_at is None:
        return Judgement(False, None, "not condemned")
    if state.published_at is None:
        return Judgement(False, None, "condemned; %d of %d peers hold the "
                         "pill, a majority is needed" % (state.acks,
                                                         state.peers))
    at = (max(state.last_beat, state.published_at)
          + state.isolation_timeout + state.watchdog_timeout + margin)
    if now >= at:
        return Judgement(True, at, "self-fenced by watchdog: silent since "
                         "%.1f s, isolation %.0f s + watchdog %.0f s + "
                         "margin %.0f s passed" % (
                             now - state.last_beat, state.isolation_timeout,
                             state.watchdog_timeout, margin))
    return Judgement(False, at, "self-fenced by watchdog in %.1f s"
                     % (at - now))


class WatchdogDriver(base.FencingDriver):
    name = "watchdog"
    #: what :func:`instanceha.drivers.fencing.load_driver` hands it
    needs = ("watchdog_witness",)
    #: a level of it after others is started (the host condemned) at the
    #: fencing attempt's start (chain.fence, doc/safety.md rule 25)
    starts_early = True

    def __init__(self, conf, watchdog_witness: Optional[Witness] = None,
                 sleep=time.sleep, wall=time.time):
        self.margin = conf.fencing.watchdog_margin
        self.wait_max = conf.fencing.watchdog_wait_max
        self.witness = watchdog_witness
        self._sleep = sleep
        self._wall = wall

    def _need_witness(self) -> Witness:
        if self.witness is None:
            raise base.FenceError("watchdog method: no heartbeat listener "
                                  "given to the driver")
        return self.witness

    def _judge(self, host: str) -> Tuple[Judgement, float]:
        witness = self._need_witness()
        now = witness.monotonic()
        return deadline(witness.watchdog_state(host), now, self.margin), now

    @base.write
    def power_off(self, bmc):
        """Condemn the host, then return once its watchdog deadline has
        passed, sleeping meanwhile (``sleep``; the engine does not call
        this: it runs :meth:`fence_pass` on its work queue, which never
        waits); raises FenceError (refused, or not within
        watchdog_wait_max)."""
        mark = None
        while True:
            pending = self.fence_pass(bmc, mark)
            if pending is None:
                return None
            self._sleep(pending.after)
            mark = pending.mark

    @base.write
    def fence(self, bmc):
        self.power_off(bmc)

    @base.write
    def fence_pass(self, bmc, mark=None):
        """The first pass (``mark`` None) condemns the host; each pass
        then judges its deadline: None once it has passed, else
        :class:`base.Pending` saying when to look again (at the deadline;
        every second while the pill is not published yet), its mark the
        time of the condemnation (one per attempt: later passes read, the
        deadline does not start over). Raises FenceError (refused, or not
        proven within watchdog_wait_max of the condemnation)."""
        witness = self._need_witness()
        host = bmc.host
        if mark is None:
            state = witness.watchdog_state(host)
            why = refusal(state)
            if why is not None:
                raise base.FenceError("host %s: watchdog method refused: %s"
                                      % (host, why))
            assert state is not None
            # Each attempt condemns anew: the pill echoes the host's newest
            # nonce (one of an earlier condemnation may be of an earlier
            # boot, which the host would refuse), and the deadline starts
            # over.
            at = witness.condemn(host, "fencing by watchdog")
            if at is None:
                raise base.FenceError("host %s: watchdog method: the host "
                                      "cannot be condemned (never heard)"
                                      % host)
            LOG.warning("watchdog_condemned", host=host, at=at,
                        watchdog_timeout=state.watchdog_timeout,
                        isolation_timeout=state.isolation_timeout,
                        margin=self.margin,
                        reason="no BMC power-off: the host's own watchdog "
                               "resets it; counted fenced after its "
                               "deadline")
            mark = witness.monotonic()
        judgement, now = self._judge(host)
        if judgement.dead:
            LOG.warning("watchdog_fenced", host=host, reason=judgement.why)
            return None
        if judgement.deadline is None and refusal(
                witness.watchdog_state(host)) is not None:
            raise base.FenceError("host %s: watchdog method refused: %s"
                                  % (host, judgement.why))
        waited = now - mark
        if waited >= self.wait_max:
            raise base.FenceError(
                "host %s: watchdog method: not proven within %.0f s: %s"
                % (host, self.wait_max, judgement.why))
        wait = POLL if judgement.deadline is None else max(
            0.0, judgement.deadline - now)
        return base.Pending(min(wait, self.wait_max - waited) or 0.01,
                            mark, judgement.why)

    def early_refusal(self, bmc):
        """Why the host cannot be condemned early (chain.fence's start of
        an attempt), or None: as the first pass would refuse it."""
        if self.witness is None:
            return "no heartbeat listener given to the driver"
        return refusal(self.witness.watchdog_state(bmc.host))

    def power_state(self, bmc):
        judgement, _ = self._judge(bmc.host)
        return base.PowerState.OFF if judgement.dead \
            else base.PowerState.UNKNOWN

    def fenced_text(self, bmc):
        """``self-fenced by watchdog, assumed at <UTC time>``: the
        deadline passed (its wall-clock time, from the monotonic one), or
        None while it has not."""
        judgement, now = self._judge(bmc.host)
        if not judgement.dead or judgement.deadline is None:
            return None
        at = self._wall() - (now - judgement.deadline)
        return "self-fenced by watchdog, assumed at %s" % (
            datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ"))

    @base.write
    def unfence(self, bmc):
        """The host is back and its service cleaned up: its condemnation
        is lifted (no more poison pill to it or its peers: its agent is
        answered again and keeps feeding its watchdog)."""
        if self.witness is None:
            return      # nothing was condemned through this driver
        self.witness.lift(bmc.host)
        LOG.info("watchdog_condemnation_lifted", host=bmc.host,
                 reason="the host is back and its service cleaned up")

    def ready(self, bmc):
        """None when the host's agent reported an armed watchdog in a
        beat no older than its isolation timeout (a live agent beats far
        more often): condemning it would then reset it; else why not."""
        witness = self._need_witness()
        state = witness.watchdog_state(bmc.host)
        why = refusal(state)
        if why is not None:
            return "watchdog: " + why
        assert state is not None
        age = witness.monotonic() - state.last_beat
        if age > max(state.isolation_timeout, 1.0):
            return ("watchdog: its agent's last beat (armed) is %.0f s old, "
                    "more than its isolation timeout (%.0f s)"
                    % (age, state.isolation_timeout))
        return None
