"""The service in a group of replicas: join, act only while elected, exit
when the leadership lapses (the service manager restarts a standby); and
whether this process acts now, alone or as the elected member."""

import functools
import os
import sys
from typing import Any, Callable, Optional, Tuple, TypeVar, Union

import structlog

from instanceha import coordination
from instanceha.errors import StartupError
from instanceha.drivers.compute.base import ComputeDriver
from instanceha.engine.engine import Engine
from instanceha.journal import Journal
from instanceha.log import mask_url
from instanceha.service.startup import Awaited
from instanceha.sources.audit import Fencer

LOG = structlog.get_logger("instanceha.service")

#: the journal, or its stand-in while the start waits for its database
JournalPart = Union[Journal, Awaited]
#: the sender of requests to the agents (the heartbeat source)
T = TypeVar("T")
#: membership(on_elected=, on_lost=): builds this member's Membership
MembershipFactory = Callable[..., coordination.Membership]
#: wait(what, attempt, retry_on): the service's start wait for a backend
StartWait = Callable[[str, Callable[[], Any],
                      Callable[[BaseException], bool]], Any]


class Acting:
    """Whether this process acts now (its engine and sources started) and
    since when, on ``clock``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.now = False
        #: when this process started acting, or None
        self.since: Optional[float] = None

    def begin(self) -> None:
        self.since = self._clock()
        self.now = True


class Group:
    """This member of the group named by ``conf``'s [coordination]: its
    Membership (``membership(on_elected=, on_lost=)`` builds another, for
    tests), built with what runs when it is elected (``on_elected()``)
    and when a leadership it held lapses (:meth:`lost`: ``on_lost(reason)``
    when given, else the process exits at once)."""

    def __init__(self, conf: Any, clock: Callable[[], float],
                 on_elected: Callable[[], None],
                 on_lost: Optional[Callable[[str], None]] = None,
                 membership: Optional[MembershipFactory] = None) -> None:
        c = conf.coordination
        self._url = c.backend_url
        self._on_lost = on_lost
        if membership is None:
            membership = functools.partial(
                coordination.Membership, c.backend_url, group=c.group,
                lease=c.lease, margin=c.margin, interval=c.heartbeat_interval,
                clock=clock)
        self.membership = membership(on_elected=on_elected, on_lost=self.lost)
        #: None while this member may write, else why not
        self.may_act: Callable[[], Optional[str]] = self.membership.may_act

    def guard(self, compute: ComputeDriver, fencer: Fencer,
              journal: JournalPart
              ) -> Tuple[ComputeDriver, Fencer, JournalPart]:
        """(compute, fencer, journal) guarded: every write to Nova, a BMC
        or the journal first asks whether this member's leadership is
        provably current."""
        # Asked again right before each write request the Nova driver
        # sends (a write made of several requests), beyond the guard at
        # each write method's entry (ComputeDriver.write_gate).
        compute.write_gate = self.may_act
        return (coordination.guard_compute(compute, self.may_act),
                coordination.guard_fencer(fencer, self.may_act),
                coordination.guard_journal(journal, self.may_act))

    def lost(self, reason: str) -> None:
        if self._on_lost is not None:
            self._on_lost(reason)
            return
        # No cleanup: every thread of this process must stop at once, and
        # the service manager restarts it as a standby.
        LOG.critical("exiting", member=self.membership.member,
                     status=coordination.EXIT_LOST, reason=reason)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:   # noqa: BLE001 - exiting anyway
                pass
        os._exit(coordination.EXIT_LOST)

    def join(self, wait: StartWait) -> None:
        """Join the group; a backend that does not answer (yet) is waited
        for (``wait(what, attempt, retry_on)``: the service's start wait),
        one that refuses (a wrong password, an unknown driver) stops the
        start."""
        url = mask_url(self._url)
        try:
            wait("the coordination backend %s" % url,
                 self.membership.connect,
                 lambda e: isinstance(e, coordination.CoordinationError)
                 and e.retry)
        except coordination.CoordinationError as e:
            raise StartupError(
                "cannot use [coordination] backend_url %s: %s"
                % (url, mask_url(e)))

    def role(self, acting: bool) -> str:
        """acting (elected and acting), elected (waiting one lease),
        standby, or lost; ``acting``: this process's engine started."""
        if acting:
            return "acting"
        role = self.membership.status()["role"]
        # Elected and past the wait, but the engine not started yet.
        return "elected" if role == "acting" else role


def guard_agent_requests(membership: Optional[coordination.Membership],
                         sender: Optional[T]) -> Optional[T]:
    """The sender of requests to the hosts' agents (soft fencing),
    guarded like every other write on a coordinated member (``membership``
    not None)."""
    if membership is None or sender is None:
        return sender
    return coordination.guard_agent_requests(sender, membership.may_act)


def elected(engine: Engine, member: str, start_acting: Callable[[], None],
            lost: Callable[[str], None]) -> None:
    """This member was elected: resume ``engine`` from the shared journal
    (what the previous acting member recorded) and ``start_acting()``;
    ``lost(reason)`` when the journal cannot be read."""
    try:
        resumed = engine.resume_from_journal()
        # The instance repairs it left running: each followed, or, when
        # Nova shows it was never sent, sent now.
        engine.repair.resume()
    except Exception as e:   # noqa: BLE001
        lost("cannot resume from the journal: %s: %s"
             % (type(e).__name__, e))
        return
    LOG.warning("acting", member=member, hosts_in_journal=resumed,
                reason="elected: resumed from the shared journal")
    start_acting()
