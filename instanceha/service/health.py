"""What the service says about itself: the status file, its role in the
group, and what /healthz and /readyz judge."""

import json
import os
import socket
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

import structlog

from instanceha import coordination, runtime, watchdog
from instanceha.service.group import Acting
from instanceha.service.startup import Awaiting
from instanceha.sources.reconciler import Reconciler
from instanceha.util.process import pid_namespace

LOG = structlog.get_logger("instanceha.service")

#: Seconds between two rewrites of the status file, at least.
STATUS_MIN_GAP = 0.2
#: Seconds the status loop waits for a change before rewriting the file
#: anyway: with the gap after a write, how often a running engine
#: rewrites it (the file's write_interval; ``instanceha status`` calls a
#: file not rewritten for a few intervals stale).
STATUS_EVERY = 2.0


def status_gap(took: float) -> float:
    """Seconds to wait after a status write that took ``took``: at least
    STATUS_MIN_GAP, and nine times the write (a tenth of the time)."""
    return max(STATUS_MIN_GAP, 9 * took)


class StatusFile:
    """The status file (``conf``'s [DEFAULT] status_file; none when
    unset): ``snapshot()`` (the engine's) with what ``instanceha status``
    needs to tell a running engine's from a dead one's, rewritten by a
    thread of its own soon after each :meth:`changed` and every
    STATUS_EVERY s anyway. ``liveness()`` is /healthz's verdict;
    ``api_url()`` the operator API's address, or None."""

    def __init__(self, conf: Any, snapshot: Callable[[], Dict[str, Any]],
                 liveness: Callable[[], Tuple[bool, str]],
                 api_url: Optional[Callable[[], Optional[str]]] = None,
                 wall: Callable[[], float] = time.time) -> None:
        self._conf = conf
        self._snapshot = snapshot
        self._liveness = liveness
        self._api_url: Callable[[], Optional[str]] = \
            api_url or (lambda: None)
        #: The wall clock of written_at and stopped_at (the engine's own
        #: clock may be a simulation's or a test's).
        self._wall = wall
        #: Seconds the last write took.
        self._took = 0.0
        self._stop = threading.Event()
        self._dirty = threading.Event()

    def changed(self, *_: object) -> None:
        """Something the file shows changed: rewrite it soon (an engine
        listener's signature: any arguments)."""
        self._dirty.set()

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True,
                         name="instanceha-status").start()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()

    def write(self, final: bool = False) -> None:
        """The engine's snapshot, and what ``instanceha status`` needs to
        tell a running engine's from a dead one's: when it was written,
        by which process, how often it is rewritten, /healthz's verdict,
        and (``final``: the last write, at stop) that the engine
        stopped."""
        path = self._conf.status_file
        if not path:
            return
        data = self._snapshot()
        ok, why = self._liveness()
        data.update(written_at=self._wall(), pid=os.getpid(),
                    hostname=socket.gethostname(), pid_ns=pid_namespace(),
                    write_interval=round(STATUS_EVERY + status_gap(
                        self._took), 3),
                    live={"ok": ok, "reason": why})
        if final:
            data["stopped_at"] = data["written_at"]
        api = self._api_url()
        if api is not None:
            data["api"] = api
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # One string by the C encoder (json.dump to a file, or any
        # indent, encodes in Python: ~10x the CPU at thousands of hosts).
        text = json.dumps(data, default=str)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".status-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def _loop(self) -> None:
        """Rewrite the status file soon after a change and every 2 s
        anyway: at most every 0.2 s however many hosts change at once,
        and never more than a tenth of the time (a write of thousands of
        hosts during a storm waits ten times its own duration)."""
        while not self._stop.is_set():
            self._dirty.wait(STATUS_EVERY)
            self._dirty.clear()
            started = time.monotonic()
            try:
                # The snapshot is a few dicts per host, all dropped once
                # written: see runtime.collection_paused.
                with runtime.collection_paused():
                    self.write()
            except Exception as e:
                LOG.warning("status_write_failed", reason=str(e))
            self._took = time.monotonic() - started
            self._stop.wait(status_gap(self._took))


class HealthView:
    """What /healthz and /readyz judge (watchdog.liveness/readiness) of
    the service: what the start ``awaiting``, the ``reconciler``'s passes,
    this member's ``role()`` and the ``acting`` state, and the group's
    ``membership`` (None: a single process), on ``clock``; stale after
    ``conf``'s [api] stale_after."""

    def __init__(self, conf: Any, clock: Callable[[], float],
                 awaiting: Awaiting, reconciler: Reconciler,
                 role: Callable[[], str], acting: Acting,
                 membership: Optional[coordination.Membership] = None
                 ) -> None:
        self._conf = conf
        self._clock = clock
        self._awaiting = awaiting
        self._reconciler = reconciler
        self._role = role
        self._acting = acting
        self._membership = membership

    def view(self) -> Dict[str, Any]:
        rec = self._reconciler.health()
        view = {"starting": self._awaiting.text(), "role": self._role(),
                "acting_since": self._acting.since,
                "last_pass_at": rec.get("last_pass_at"),
                "passes": self._reconciler.passes}
        m = self._membership
        if m is not None:
            st = m.status()
            view.update(group=st["group"], acting_member=st["acting_member"],
                        beat_attempt_at=m.beat_attempt_at,
                        beat_ok_at=m.beat_ok_at,
                        backend_error=st["backend_error"],
                        backend_error_since=st["backend_error_since"],
                        reason=st["reason"])
        return view

    def liveness(self) -> Tuple[bool, str]:
        """(healthy, reason) for GET /healthz."""
        return watchdog.liveness(self.view(), self._clock(),
                                 self._conf.api.stale_after)

    def readiness(self) -> Tuple[bool, str, str]:
        """(ready, role, reason) for GET /readyz."""
        return watchdog.readiness(self.view())
