"""The host records the engine holds: each host's last record, and the
indexes kept beside it as each record is stored (the hosts not left
running, those with a timer, those whose every Nova row matters), with
the reads made of them (lookup, what is urgent, which hosts are handled).

:class:`HostTable` owns this state. It is guarded by the lock it is given:
the engine's, because a host's record and its inbox change together."""

import threading
from typing import (TYPE_CHECKING, Dict, FrozenSet, List, Optional, Set,
                    Tuple)

from instanceha import fsm
from instanceha.fsm.states import RUNNING_STATES, URGENT_STATES

if TYPE_CHECKING:
    from instanceha.engine.context import Context, Inventory


class HostTable:
    """Each host's record (by service id) and its indexes."""

    def __init__(self, lock: threading.RLock, ctx: "Context") -> None:
        """``lock``: the engine's (re-entrant); ``ctx``: the engine's
        context (the inventory and the BMC evidence, for handled())."""
        self._lock = lock
        self._ctx = ctx
        self._records: Dict[str, fsm.HostRecord] = {}
        #: names of the hosts whose record is not in RUNNING_STATES
        self._not_running: Set[str] = set()
        #: ids of the records whose every Nova row matters (not quiet)
        self._watched: Set[str] = set()
        #: ids of the records in fsm.machine.TIMED
        self._timed: Set[str] = set()
        #: bumped on every change of a record
        self._version = 0
        #: (records version, urgent()'s answer then)
        self._urgent_cache: Optional[Tuple[int, Optional[str]]] = None
        #: (records version, inventory, the BMC mates of the hosts in
        #: _not_running then)
        self._handled_cache: Optional[Tuple[int, "Inventory",
                                            FrozenSet[str]]] = None

    def get(self, host_id: str) -> Optional[fsm.HostRecord]:
        with self._lock:
            return self._records.get(host_id)

    def keep(self, rec: fsm.HostRecord) -> None:
        """Store ``rec`` as its host's record, noting whether each of
        Nova's rows for it matters, not only a change."""
        with self._lock:
            if self._records.get(rec.id) != rec:
                self._version += 1
            self._records[rec.id] = rec
            if rec.state in RUNNING_STATES:
                self._not_running.discard(rec.name)
            else:
                self._not_running.add(rec.name)
            if rec.state in fsm.machine.TIMED:
                self._timed.add(rec.id)
            else:
                self._timed.discard(rec.id)
            if fsm.machine.wants_every_report(rec):
                self._watched.add(rec.id)
            else:
                self._watched.discard(rec.id)

    def view(self) -> Tuple[int, Dict[str, fsm.HostRecord]]:
        """(version, {host id: record}): the records as they stand."""
        with self._lock:
            return self._version, dict(self._records)

    def records(self) -> Dict[str, fsm.HostRecord]:
        with self._lock:
            return dict(self._records)

    def sorted(self) -> List[fsm.HostRecord]:
        """Every record, by host name."""
        with self._lock:
            return sorted(self._records.values(), key=lambda r: r.name)

    def timed(self) -> List[fsm.HostRecord]:
        """The records that may have a timer: a few of a large cloud."""
        with self._lock:
            return [self._records[h] for h in self._timed]

    def watched(self) -> Set[str]:
        """Ids of the hosts whose every row of Nova matters."""
        with self._lock:
            return set(self._watched)

    def waiting_for_capacity(self) -> List[fsm.HostRecord]:
        with self._lock:
            return [r for r in self._records.values()
                    if r.state is fsm.State.PENDING and r.waits_for_capacity]

    def find(self, name_or_id: str) -> Optional[fsm.HostRecord]:
        """The record whose host name or service UUID is ``name_or_id``."""
        with self._lock:
            rec = self._records.get(name_or_id)
            if rec is None:
                rec = next((r for r in self._records.values()
                            if r.name == name_or_id), None)
            return rec

    def known_hosts(self) -> List[Tuple[str, str]]:
        with self._lock:
            return [(r.id, r.name) for r in self._records.values()]

    def urgent(self) -> Optional[str]:
        """Why background reads of every BMC should wait now (hosts being
        proven dead or evacuated, counted by state), or None. Counted
        again only when a record changed since the last answer."""
        with self._lock:
            version = self._version
            cached = self._urgent_cache
            if cached is not None and cached[0] == version:
                return cached[1]
            counts: Dict[str, int] = {}
            for r in self._records.values():
                if r.state in URGENT_STATES:
                    counts[r.state.value] = counts.get(r.state.value, 0) + 1
            why = None
            if counts:
                why = "%d host(s) in recovery (%s): fencing and evacuation " \
                      "come first" % (sum(counts.values()), ", ".join(
                          "%s %d" % kv for kv in sorted(counts.items())))
            self._urgent_cache = (version, why)
            return why

    def handled(self, name: str) -> bool:
        """True when host ``name``, or a host whose inventory entry reaches
        the same BMC or machine, is not left running untouched (being
        proven dead, fenced, evacuated, failed, in maintenance ...): its
        BMC may report Off by instanceha's or an operator's doing, which
        says nothing about its inventory entry, and the fencing audit
        skips its BMC once its pause for recoveries has lasted [audit]
        max_pause. From the records and the BMC indexes: no I/O, no scan
        of every record."""
        ctx = self._ctx
        with self._lock:
            if name in self._not_running:
                return True
            if not self._not_running:
                return False
            version, inv = self._version, ctx.inventory
            cached = self._handled_cache
            if cached is not None and cached[0] == version \
                    and cached[1] is inv:
                return name in cached[2]
            hosts = set(self._not_running)
        # Their BMC mates, made again once per change of the records (or
        # of the inventory): the power watch asks for every host.
        mates = set(ctx.mates_of(hosts))
        for host in hosts:
            bmc = inv.get(host)
            if bmc is not None:
                mates |= ctx.evidence.same_machine_hosts(bmc)
        with self._lock:
            self._handled_cache = (version, inv, frozenset(mates))
        return name in mates
