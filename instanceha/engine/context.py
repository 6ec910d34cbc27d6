"""What actions may touch: drivers, journal, clock, settings.

Everything is given at construction (the service builds it); the engine
and the actions only read it. The mutable parts are bookkeeping shared by
the actions of all hosts (rows seen, evacuation runs under way, the
admission gate, the BMC evidence).
"""

import collections
import threading
from typing import Any, Callable, Collection, Counter, Deque, Dict, \
    Mapping, Optional, Protocol, Set, Tuple, TypeVar

import structlog

from instanceha import runtime
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute.base import ComputeDriver
from instanceha.drivers.fencing.base import FencingDriver
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.engine import admission
from instanceha.engine.evidence import EvidenceStore
from instanceha.engine.fencing_gate import Readiness
from instanceha.engine.progress import ProgressBoard
from instanceha.fsm.record import HostRecord
from instanceha.journal import Journal
from instanceha.policy import order
from instanceha.util.single_flight import SingleFlight

LOG = structlog.get_logger("instanceha.engine")

T = TypeVar("T")
#: the BMC entries of the fencing inventory, by host name
Inventory = Mapping[str, BMC]
#: on_progress(record, servers done, total)
OnProgress = Callable[[HostRecord, int, int], object]


class Running(Protocol):
    """The work under way for a host, as status shows it: an
    evacuation's run (engine.evac_run), a drain's or fail-back's carry
    (engine.drain)."""
    def status_text(self) -> str: ...


def _paused(read: Callable[[], T]) -> T:
    with runtime.collection_paused():
        return read()


class Context:

    def __init__(self, conf: Any, compute: ComputeDriver, journal: Journal,
                 inventory: Inventory,
                 fencer_factory: Callable[[str], FencingDriver],
                 clock: Callable[[], float], board: ProgressBoard,
                 on_progress: Optional[OnProgress] = None,
                 readiness: Optional[Readiness] = None,
                 may_act: Optional[Callable[[], Optional[str]]] = None,
                 events_healthy: Optional[Callable[[], bool]] = None,
                 agent_request: Optional[Callable[[str, str], str]] = None
                 ) -> None:
        """``readiness``: may fencing decisions be taken at all now
        (fencing_gate.Readiness; default always); ``may_act()``: None when
        this process may run actions now, else why not (a coordinated
        member that is not the acting one); ``events_healthy()``: True
        while an event source reliably reports evacuation progress;
        ``agent_request(host, reason)``: ask the host's agent to restart
        nova-compute (soft fencing), returning one line saying what was
        sent or why nothing was."""
        self.conf = conf
        self.compute = compute
        self.journal = journal
        self.inventory = inventory
        self._fencers = fencing_pkg.Fencers(fencer_factory)
        self.clock = clock
        self.board = board
        self._on_progress: OnProgress = on_progress or (lambda *a: None)
        self.readiness = readiness or Readiness()
        self.may_act: Callable[[], Optional[str]] = may_act or (
            lambda: None)
        self.events_healthy: Callable[[], bool] = events_healthy or (
            lambda: False)
        self.agent_request: Callable[[str, str], str] = (
            agent_request or _no_agents)
        #: evacuate request row id -> when this process wrote it or first
        #: read it open, on this process's clock: the wait for an
        #: unanswered request never trusts another replica's clock
        self.rows_seen: Dict[int, float] = {}
        #: host_id -> its evacuation run (engine.evacuator), while one is
        #: under way: what status shows of its progress
        self.runs: Dict[str, Running] = {}
        #: drains: servers sent, moved, stuck, aborted, given up (counts
        #: by event), and each moved server's seconds from request to
        #: leaving the host, taken by /metrics at each scrape
        self.drain_stats: Counter = collections.Counter()
        self.drain_durations: Deque[float] = collections.deque(
            maxlen=10000)
        #: which ready servers of every host being evacuated go now
        #: ([evacuation] concurrency, [recovery] max_inflight, priority)
        self.gate = admission.Gate(lambda: order.Limits.from_conf(conf))
        #: what each host's BMC was seen to report (may its Off prove the
        #: host dead?), kept in the journal
        self.evidence = EvidenceStore(journal, clock)
        self.evidence.load()
        #: ({host: entry} indexed, {host: hosts whose entries reach one of
        #: its BMCs})
        self._mates: Optional[
            Tuple[Dict[str, BMC], Dict[str, Set[str]]]] = None
        self._mates_lock = threading.Lock()
        #: Nova's compute services and the cloud's capacities, as the
        #: evacuations of several hosts at once read them to choose and
        #: judge destinations: those that ask while a read runs share it
        #: (util.single_flight). Never used to prove a host dead or to
        #: decide it returned: those read the host's own row afresh.
        #: Each is a read of the whole cloud (tens of thousands of objects
        #: made, most of them dropped once parsed): runtime.
        #: collection_paused.
        self.shared_services = SingleFlight(
            lambda: _paused(self.compute.list_services), copy=list)
        self.shared_capacities = SingleFlight(
            lambda: _paused(self.compute.host_capacities),
            copy=lambda caps: None if caps is None else dict(caps))

    def fence_gate(self) -> Optional[str]:
        """None when a power-off may go out now, else why not (checked by
        the fence action right before each power-off)."""
        return self.readiness.closed()

    def bmc_for(self, host: str) -> Optional[BMC]:
        return inventory_mod.entry_for(self.inventory, host,
                                       self.conf.fencing.default_driver)

    def bmc_mates(self, host: str, bmc: BMC) -> Set[str]:
        """The hosts whose inventory entry may reach a BMC that ``bmc``
        (the entry of ``host``) reaches: every one that does
        (inventory.same_bmc, an address and a DNS name of it being one),
        and maybe more ("one BMC" is not transitive: an entry choosing no
        system meets two that choose different ones), for the caller to
        compare. From an index made once per inventory (inventory.shared)
        instead of comparing every entry at each fence. An entry not in
        the inventory (``[fencing] default_driver``) is compared with
        every entry."""
        inv = self.inventory
        if inv.get(host) is not bmc:
            return {name for name, other in inv.items()
                    if name != host and other is not None
                    and inventory_mod.same_bmc(bmc, other,
                                               inventory_mod.resolve)}
        return self._mates_index(inv).get(host, set()) - {host}

    def mates_of(self, hosts: Collection[str]) -> Set[str]:
        """The hosts (other than ``hosts``) whose inventory entry may reach
        a BMC that the entry of one of ``hosts`` reaches (as bmc_mates,
        the index checked once for them all; hosts without an entry of
        their own have none here)."""
        inv = self.inventory
        index = self._mates_index(inv)
        out: Set[str] = set()
        for host in hosts:
            if host in inv:
                out |= index.get(host, set())
        return out - set(hosts)

    def _mates_index(self, inv: Inventory) -> Dict[str, Set[str]]:
        """{host: hosts whose entries reach one of its BMCs} of ``inv``,
        made once per inventory. One thread makes it while the others
        wait: when many hosts die at once their fences all ask at the
        same moment, and each making its own (0.15 s of CPU at 20,000
        hosts, under one GIL) delayed the last power-off by seconds."""
        with self._mates_lock:
            cached = self._mates
            # Valid while every entry is the one indexed (a reload
            # replaces the inventory; a changed entry is a new object):
            # one identity comparison per entry, far cheaper than
            # comparing BMCs.
            if cached is None or len(cached[0]) != len(inv) or any(
                    inv.get(name) is not entry
                    for name, entry in cached[0].items()):
                mates: Dict[str, Set[str]] = {}
                for _, group in inventory_mod.shared(inv,
                                                     inventory_mod.resolve):
                    for name in group:
                        mates.setdefault(name, set()).update(group)
                cached = self._mates = (dict(inv), mates)
            return cached[1]

    def index_bmcs(self) -> None:
        """Make the index of BMCs shared between entries now (at start,
        after a reload), not at the first fence."""
        self._mates_index(self.inventory)

    def fencer(self, name: str) -> FencingDriver:
        return self._fencers.get(name)

    def close_fencers(self) -> None:
        """Release what drivers hold open (Redfish sessions) at stop."""
        self._fencers.close()

    def progress(self, record: HostRecord, done: int, total: int) -> None:
        LOG.info("evacuation_progress", host=record.name, done=done,
                 total=total)
        self._on_progress(record, done, total)


def _no_agents(host: str, reason: str) -> str:
    return "not sent: no heartbeat source to reach the hosts' agents"
