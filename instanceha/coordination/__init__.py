"""Several replicas: one elected member acts, the others stand by.

See doc/replicas.md for why it is one leader and not a hash ring.

The leadership is a tooz lock with a lease (``[coordination] lease``): the
backend drops it when the holder stops renewing it. A member acts only
while its leadership is *provably* current: :meth:`Membership.may_act`
returns a reason (no action) once ``lease - margin`` seconds have passed,
on this host's monotonic clock, since the start of the last renewal that
succeeded. The start, not the end: the backend extended the lease at some
moment after the request left, so the lease there ends no earlier than
that start + lease. A member whose leadership lapsed never acts again:
the first thread that notices calls ``on_lost`` (the service exits the
process; its service manager restarts it as a standby).

A newly elected member waits one whole lease before it acts
(:meth:`Membership.wait_out`). A lock freed by expiry needs no wait, but a
backend that loses its keys (Redis restarted without persistence, a
failover to a replica that had not seen the last renewal) frees it early:
the previous leader then still acts until its own ``lease - margin`` runs
out, and a request it sent just before has up to ``margin`` to land. The
lock cannot tell the two cases apart, so every election waits.

Every write (a method of the compute or fencing driver, the journal or
the agents' request sender marked by :func:`instanceha.util.writes.write`)
goes through :class:`Guard`, which asks ``may_act`` right before each
call, so a member that was frozen (SIGSTOP, a VM pause, a long GC) for
longer than the lease does nothing when it wakes. What no guard can stop is a request already on the wire
when the process froze: see doc/replicas.md, "Residual window".

The package: :mod:`.membership` (joining, the heartbeat, the rule,
status), :mod:`.guard` (the guarded writes) and :mod:`.backend` (reaching
the tooz backend, and which errors are worth waiting out). Its names are
imported from here.
"""

from instanceha.coordination.backend import CoordinationError, unreachable
from instanceha.coordination.guard import (COMPUTE_WRITES, FENCE_WRITES,
                                           JOURNAL_WRITES, Guard,
                                           NotActingAgent, NotActingCompute,
                                           NotActingFence, NotActingJournal,
                                           guard_agent_requests,
                                           guard_compute, guard_fencer,
                                           guard_journal)
from instanceha.coordination.membership import (EXIT_LOST, Membership,
                                                member_id, monotonic)

__all__ = ["COMPUTE_WRITES", "FENCE_WRITES", "JOURNAL_WRITES", "EXIT_LOST",
           "CoordinationError", "Guard", "Membership", "NotActingAgent",
           "NotActingCompute", "NotActingFence", "NotActingJournal",
           "guard_agent_requests", "guard_compute", "guard_fencer",
           "guard_journal", "member_id", "monotonic",
           "unreachable"]
