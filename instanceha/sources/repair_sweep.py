"""Instance repair's periodic sweep (issue 25): the fallback for a lost
notification, or a Nova without ``notify_on_state_change``.

Every ``[instance_repair] sweep_interval`` seconds: Nova's servers in
SHUTOFF and in ERROR, across projects; for each whose record changed
since it was last judged, its instance actions (newest first), judged by
:func:`~instanceha.policy.instance_repair.classify_actions` (a stop by
Nova's own context after the last user action is a guest that stopped by
itself; a user's stop is never repaired; an ERROR after a move, a
delete, a shelve is left to its owner). Each repairable or left-alone
verdict goes to the engine; nothing here acts. The source only reads:
``sink(server, actions, at)`` gets each server with its instance actions,
and the engine's instance repair classifies them
(:func:`~instanceha.policy.instance_repair.classify_actions`). With
``hold_percent`` the sweep also counts the servers watched (the hold's
base).
"""

import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import structlog

from instanceha.drivers.compute import base
from instanceha.sources.base import PeriodicSource
from instanceha.util import periodic

LOG = structlog.get_logger("instanceha.sources.repair_sweep")
SOURCE = "sweep"
#: the statuses whose servers may be broken
BROKEN = ("SHUTOFF", "ERROR")


#: sink(server, its instance actions newest first, at): instance repair's
#: news of a broken server
SweepSink = Callable[[base.Server, List[base.InstanceAction], float],
                     object]
#: (server, its instance actions) handed over
Found = Tuple[base.Server, List[base.InstanceAction]]


def _changed_at(server: base.Server) -> Optional[str]:
    return (server.raw or {}).get("updated")


#: seconds from the start to the first sweep: soon, so that a server that
#: broke while the engine was down is found, and hold_percent has the
#: servers watched (counted by a sweep) within seconds of the start
#: rather than only after sweep_interval
FIRST = 5.0

class RepairSweep(PeriodicSource[SweepSink]):

    def __init__(self, conf: Any, compute: base.ComputeDriver,
                 sink: SweepSink, clock: Callable[[], float] = time.time,
                 watched: Optional[Callable[[int], object]] = None,
                 skip: Optional[Callable[[base.Server], bool]] = None
                 ) -> None:
        """``watched(count)``: told the servers counted at each pass (the
        hold's base), when hold_percent needs it; ``skip(server)``: True
        for a server not to read (marked failed, a case already open)."""
        self._skip = skip or (lambda server: False)
        self._conf = conf
        self._compute = compute
        self._sink = sink
        self._clock = clock
        self._watched = watched
        #: server id -> its record's ``updated`` when last judged: a
        #: server unchanged since is not read again
        self._judged: Dict[str, Optional[str]] = {}
        self.passes = self.errors = 0
        self.last_pass_at: Optional[float] = None
        self.last_error: Optional[str] = None
        self.found = 0
        self._periodic = periodic.Periodic(
            "instanceha-repair-sweep", self.run_once, self._interval,
            first=min(FIRST, self._interval()), on_error=self._failed,
            log=LOG)

    def _interval(self) -> float:
        return float(self._conf.instance_repair.sweep_interval)

    def _failed(self, e: BaseException) -> None:
        self.errors += 1
        self.last_error = "%s: %s" % (type(e).__name__, e)
        LOG.warning("repair_sweep_failed", reason=self.last_error)

    def health(self) -> Dict[str, Any]:
        return {"passes": self.passes, "errors": self.errors,
                "last_pass_at": self.last_pass_at,
                "last_error": self.last_error, "found": self.found}

    def run_once(self) -> List[Found]:
        """One sweep; returns the verdicts handed over."""
        now = self._clock()
        servers: List[base.Server] = []
        for status in BROKEN:
            servers += self._compute.list_servers_by_status(status)
        if self._watched is not None \
                and self._conf.instance_repair.hold_percent > 0:
            active = self._compute.list_servers_by_status("ACTIVE")
            self._watched(len(active) + len(servers))
        seen: Set[str] = set()
        out: List[Found] = []
        for server in servers:
            seen.add(server.id)
            changed = _changed_at(server)
            if changed is not None and self._judged.get(server.id) == changed:
                continue
            self._judged[server.id] = changed
            if self._skip(server):
                continue
            actions = self._actions(server)
            if actions is not None:
                out.append((server, actions))
        for sid in set(self._judged) - seen:
            del self._judged[sid]
        for server, actions in out:
            self._sink(server, actions, now)
        self.passes += 1
        self.found = len(out)
        self.last_pass_at = now
        LOG.debug("repair_sweep_pass", broken=len(servers), read=len(out))
        return out

    def forget(self, server_id: str) -> None:
        """Judge the server again at the next pass even if unchanged."""
        self._judged.pop(server_id, None)

    def _actions(self, server: base.Server
                 ) -> Optional[List[base.InstanceAction]]:
        try:
            return self._compute.instance_actions(server.id)
        except base.NotFound:
            return None
        except (base.ComputeError, NotImplementedError) as e:
            LOG.warning("instance_actions_unreadable", server=server.id,
                        reason=str(e) or type(e).__name__)
            return None
