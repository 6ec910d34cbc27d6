"""The plain data of an evacuation run: Nova's statuses that matter, the
run's Outcome, one evacuate request's Attempt."""

import collections
import dataclasses
from typing import DefaultDict, Dict, FrozenSet, Iterable, List, Optional

from instanceha.drivers.compute.base import Migration
from instanceha.policy import power

#: vm_states Nova accepts for evacuate (check_instance_state in nova's API).
EVACUABLE_VM_STATES = power.EVACUABLE_VM_STATES
REBUILD_TASK_STATES = {"rebuilding", "rebuild_block_device_mapping",
                       "rebuild_spawning"}
IN_FLIGHT = {"accepted", "pre-migrating", "migrating", "queued", "preparing",
             "running", "post-migrating"}
SUCCEEDED = {"done", "completed"}
FAILED = {"error", "failed", "cancelled"}


class Outcome:
    def __init__(self, total: int) -> None:
        self.total = total
        #: server_id -> dest host (None: Nova did not say)
        self.done: Dict[str, Optional[str]] = {}
        self.failed: Dict[str, str] = {}        # server_id -> reason
        self.no_capacity: Dict[str, str] = {}   # server_id -> reason
        self.skipped: Dict[str, str] = {}   # server_id -> why not evacuable
        self.retried: Dict[str, int] = {}   # server_id -> times sent again
        self.returned = False   # stopped: the host reported back
        self.stopped = 0        # servers not sent: an operator suspended
        #: the capacity preflight's line when it held servers back
        self.capacity = ""
        #: reserved hosts brought in for the host, as a line (or "")
        self.reserved = ""
        #: servers an earlier attempt of this recovery (or an earlier
        #: process) already rebuilt elsewhere: no longer listed on the host
        self.earlier = 0
        #: why the host was not proven dead when servers were to be sent
        #: (nothing more was sent), else None
        self.unproven: Optional[str] = None


@dataclasses.dataclass
class Attempt:
    """One evacuate request of one server, until Nova settles it."""
    server_id: str
    started: float                      # local clock, when it was sent
    evac_id: Optional[int]              # its journal row
    before: Dict[str, str]              # migration id -> status when sent
    #: hosts Nova could not schedule onto when it was sent (down, forced
    #: down or disabled; every other host could take it), None when not
    #: known (a request found in Nova): then no host is suspected of
    #: having taken it. The complement, not the schedulable hosts
    #: themselves: a few names instead of the whole cloud's per request.
    unschedulable: Optional[FrozenSet[str]] = None
    waiting: Optional[str] = None       # why it is waited for, if unusual
    #: its request got no answer (or its process stopped while it was
    #: being sent): the journal row stays open ('requested') until Nova is
    #: seen to have taken it, or not after unanswered_request_wait
    unanswered: bool = False
    #: journalled by a previous process, which stopped while sending it
    inherited: bool = False


def by_server(migrations: Iterable[Migration]
              ) -> DefaultDict[str, List[Migration]]:
    out: DefaultDict[str, List[Migration]] = collections.defaultdict(list)
    for m in migrations:
        out[m.server_id].append(m)
    return out
