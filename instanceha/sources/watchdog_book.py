"""What the engine knows of the agents' watchdogs (issue 37): each host's
latest watchdog report, when its last beat arrived, its condemnation and
who of its peers holds the poison pill. Read by the ``watchdog`` fencing
method (:mod:`instanceha.drivers.fencing.watchdog`) through
:class:`~instanceha.drivers.fencing.watchdog.Witness`; filled by the
heartbeat listener (:mod:`instanceha.sources.heartbeat`).

Times are the engine's monotonic clock. Every authentic beat the replay
guard lets through counts as the host's last beat, proven fresh or not:
the listener's answers echo the nonce of any such beat, and the agent
counts an answer as hearing the engine, so the engine must count the
beat too (a later last beat only pushes the fencing deadline later).

A condemned host's pill (made once, at its condemnation: the same bytes
go to the host and to its peers) is *published* once a majority of the
peers its last report names (by digest) acknowledged it: a beat of that
peer lists the pill's digest among the pills it holds. With no peers, at once: only an
engine's answer can keep such a host alive, and none does after its
condemnation. Thread-safe.
"""

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import structlog

from instanceha.drivers.fencing.watchdog import WatchdogState
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State
from instanceha.heartbeat import protocol

__all__ = ["WatchdogBook", "WatchdogState", "lifter", "majority"]

LOG = structlog.get_logger("instanceha.watchdog_book")


def majority(count: int) -> int:
    return count // 2 + 1


class _Host:
    __slots__ = ("report", "last_beat", "condemned_at", "published_at",
                 "acks", "pill")

    def __init__(self, report: Optional[protocol.WatchdogReport],
                 at: float) -> None:
        self.report = report
        self.last_beat = at
        self.condemned_at: Optional[float] = None
        self.published_at: Optional[float] = None
        self.acks: Dict[str, float] = {}
        self.pill: Optional[bytes] = None


class WatchdogBook:
    """See the module's text."""

    def __init__(self) -> None:
        self._hosts: Dict[str, _Host] = {}
        self._by_digest: Dict[bytes, str] = {}
        self._by_pill: Dict[bytes, str] = {}
        self._lock = threading.Lock()

    def beat(self, host: str, report: Optional[protocol.WatchdogReport],
             at: float) -> None:
        """An authentic beat of ``host`` arrived at ``at``."""
        with self._lock:
            entry = self._hosts.get(host)
            if entry is None:
                entry = self._hosts[host] = _Host(report, at)
                self._by_digest[protocol.name_digest(host)] = host
            else:
                entry.report = report
                entry.last_beat = max(entry.last_beat, at)
            if report is None or not report.pills:
                return
            digest = protocol.name_digest(host)
            for pill_digest in report.pills:
                target = self._hosts.get(self._by_pill.get(pill_digest, ""))
                if target is None or target.condemned_at is None \
                        or target.report is None \
                        or digest not in target.report.peers:
                    continue
                target.acks.setdefault(host, at)
                if target.published_at is None and len(target.acks) >= \
                        majority(len(target.report.peers)):
                    target.published_at = at

    def condemn(self, host: str, at: float,
                pill: Optional[bytes] = None) -> Optional[float]:
        """Condemn ``host`` at ``at`` with ``pill`` (its datagram's
        bytes). A condemnation renewed (each fencing attempt makes its
        own, echoing the host's newest nonce: a pill of an earlier one
        may echo a nonce of an earlier boot, which the host refuses)
        starts over: its publication too. Returns ``at``, None for a host
        never heard."""
        with self._lock:
            entry = self._hosts.get(host)
            if entry is None:
                return None
            if entry.pill is not None:
                self._by_pill.pop(protocol.pill_digest(entry.pill), None)
            entry.condemned_at = at
            entry.acks = {}
            entry.pill = pill
            if pill is not None:
                self._by_pill[protocol.pill_digest(pill)] = host
            peers = entry.report.peers if entry.report else ()
            entry.published_at = None if peers else at
            return at

    def lift(self, host: str) -> None:
        """The host is back and cleaned up: no longer condemned."""
        with self._lock:
            entry = self._hosts.get(host)
            if entry is not None:
                entry.condemned_at = entry.published_at = None
                entry.acks = {}
                if entry.pill is not None:
                    self._by_pill.pop(protocol.pill_digest(entry.pill),
                                      None)
                entry.pill = None

    def condemned(self, host: str) -> bool:
        entry = self._hosts.get(host)
        return entry is not None and entry.condemned_at is not None

    def pill(self, host: str) -> Optional[bytes]:
        """The pill of condemned ``host``, or None."""
        entry = self._hosts.get(host)
        return entry.pill if entry is not None else None

    def nonce(self, host: str) -> Optional[bytes]:
        """The newest nonce ``host``'s agent sent (an answer echoes
        it)."""
        entry = self._hosts.get(host)
        report = entry.report if entry is not None else None
        return report.nonce if report is not None else None

    def relays(self) -> List[Tuple[str, str]]:
        """(condemned host, peer) pairs: each condemned host's pill goes
        to each of its peers the engine hears."""
        with self._lock:
            out = []
            for host, entry in self._hosts.items():
                if entry.condemned_at is None or entry.report is None:
                    continue
                for digest in entry.report.peers:
                    peer = self._by_digest.get(digest)
                    if peer is not None:
                        out.append((host, peer))
            return out

    def state(self, host: str) -> Optional[WatchdogState]:
        with self._lock:
            entry = self._hosts.get(host)
            if entry is None:
                return None
            r = entry.report
            return WatchdogState(
                host, r is not None and r.state == protocol.WATCHDOG_ARMED,
                r.state if r is not None else protocol.WATCHDOG_NONE,
                float(r.timeout) if r is not None else 0.0,
                r.isolation_timeout if r is not None else 0.0,
                entry.last_beat, entry.condemned_at, entry.published_at,
                len(r.peers) if r is not None else 0, len(entry.acks))


def lifter(lift: Callable[[str], None], condemned: Callable[[str], bool]
           ) -> Callable[[HostRecord, HostRecord, Any], None]:
    """An engine listener: a host that enters ``active`` while still
    condemned (put back after cleanup: the fence action's unfence lifted
    it already; or resumed by an operator after a fencing that failed or
    was abandoned) has its condemnation lifted: the engine watches it as
    alive, so no pill may keep going to it and its peers."""
    def on_change(old: HostRecord, new: HostRecord, event: Any) -> None:
        if new.state is not State.ACTIVE or old.state is State.ACTIVE \
                or not new.name or not condemned(new.name):
            return
        lift(new.name)
        LOG.warning("watchdog_condemnation_lifted", host=new.name,
                    was=old.state.value,
                    reason="the host is active again: no more poison pill "
                           "to it or its peers")
    return on_change
