"""The service in a group of replicas: join, act only while elected, exit
when the leadership lapses (the service manager restarts a standby)."""

import os
import sys

import structlog

from instanceha import coordination
from instanceha.errors import StartupError
from instanceha.log import mask_url

LOG = structlog.get_logger("instanceha.service")


class Group:
    """Service's group membership half (instanceha.service.Service)."""

    def _coordinate(self, compute, fencer):
        """Several replicas: join the group at start, act only while
        elected. Every write to Nova, a BMC or the journal first asks
        whether this member's leadership is provably current."""
        c = self.conf.coordination
        if self._membership is not None:
            self.membership = self._membership
            self.membership.on_elected = self._on_elected
            self.membership.on_lost = self._on_lost
        else:
            self.membership = coordination.Membership(
                c.backend_url, group=c.group, lease=c.lease,
                margin=c.margin, interval=c.heartbeat_interval,
                on_elected=self._on_elected, on_lost=self._on_lost,
                clock=self.clock)
        may_act = self.membership.may_act
        # Asked again right before each write request the Nova driver
        # sends (a write made of several requests), beyond the guard at
        # each write method's entry.
        compute.write_gate = may_act
        return (coordination.guard_compute(compute, may_act),
                coordination.guard_fencer(fencer, may_act),
                coordination.guard_journal(self.journal, may_act))

    def _agent_requests(self, sender):
        """The sender of requests to the hosts' agents (soft fencing),
        guarded like every other write on a coordinated member."""
        if self.membership is None or sender is None:
            return sender
        return coordination.guard_agent_requests(sender,
                                                 self.membership.may_act)

    def _on_elected(self):
        """This member was elected: resume from the shared journal (what
        the previous acting member recorded) and start acting."""
        try:
            resumed = self.engine.resume_from_journal()
            # The instance repairs it left running: each followed, or,
            # when Nova shows it was never sent, sent now.
            self.engine.repair.resume()
        except Exception as e:   # noqa: BLE001
            self._on_lost("cannot resume from the journal: %s: %s"
                          % (type(e).__name__, e))
            return
        LOG.warning("acting", member=self.membership.member,
                    hosts_in_journal=resumed,
                    reason="elected: resumed from the shared journal")
        self._start_acting()

    def _on_lost(self, reason):
        if self._on_lost_hook is not None:
            self._on_lost_hook(reason)
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

    @property
    def acting(self):
        """True while this process acts (alone, or the group's elected
        member); a standby only watches."""
        return self.membership is None or self._acting

    def _start_acting(self):
        self.acting_since = self.clock()
        self._acting = True
        self.engine.start()
        bound = self._bound_at_start()
        for src in self.sources:
            if src not in bound:
                src.start()
        self._status_dirty.set()

    def _bound_at_start(self):
        """The sources started (their sockets bound) by start() itself,
        on every member: the kdump and agent heartbeat listeners."""
        return [src for src in (self.kdump, self.heartbeat)
                if src is not None]

    def _submit_if_acting(self, event):
        """The kdump listener's sink on a coordinated member: a standby
        binds the port but acts on nothing it hears."""
        if self._acting:
            self.engine.submit(event)

    def _join(self):
        """Join the group; a backend that does not answer (yet) is waited
        for, one that refuses (a wrong password, an unknown driver) stops
        the start."""
        url = mask_url(self.conf.coordination.backend_url)
        try:
            self._await("the coordination backend %s" % url,
                        self.membership.connect,
                        lambda e: isinstance(e, coordination.CoordinationError)
                        and e.retry)
        except coordination.CoordinationError as e:
            raise StartupError(
                "cannot use [coordination] backend_url %s: %s"
                % (url, mask_url(e)))
