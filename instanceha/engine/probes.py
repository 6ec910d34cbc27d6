"""Reads the engine makes for a host on its own, beside its actions: the
BMC of a host whose heartbeat was just lost (Off is a second witness of
death), and the host's own row of Nova once a host suspect on its agent's
silence is owed a heartbeat (fsm.agent). Each runs on a small pool of its
own (inline before the engine's threads start, as in unit tests) and its
answer is the host's next event."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Callable, Optional, Set

import structlog

from instanceha.engine import actions
from instanceha.events import Event
from instanceha.fsm.record import HostRecord

if TYPE_CHECKING:
    from instanceha.engine.context import Context

LOG = structlog.get_logger("instanceha.engine")


class Probes:

    def __init__(self, ctx: Context, submit: Callable[[Event], object],
                 workers: int = 4) -> None:
        self._ctx = ctx
        self._submit = submit
        self._pool = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix="instanceha-probe")
        self._lock = threading.Lock()
        #: host ids with a Nova read under way
        self._reading_nova: Set[str] = set()
        #: threads running (else each read runs inline)
        self._started = False

    def power(self, rec: HostRecord) -> None:
        self._run(self._power, rec)

    def nova(self, rec: HostRecord) -> None:
        """Read the host's row of Nova, unless a read for it runs."""
        with self._lock:
            if rec.id in self._reading_nova:
                return
            self._reading_nova.add(rec.id)
        self._run(self._nova, rec)

    def start(self) -> None:
        """From now on each read runs on the pool (the engine's threads
        run); before, inline."""
        self._started = True

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)

    def _run(self, fn: Callable[[HostRecord], None], rec: HostRecord
             ) -> None:
        if self._started:
            self._pool.submit(fn, rec)
        else:
            fn(rec)

    def _power(self, rec: HostRecord) -> None:
        event = actions.probe_power(self._ctx, rec)
        if event is not None:
            self._submit(event)

    def _nova(self, rec: HostRecord) -> None:
        event: Optional[Event] = None
        try:
            event = actions.probe_nova(self._ctx, rec)
        except Exception as e:   # noqa: BLE001 - the next poll reads it
            LOG.warning("nova_read_failed", host=rec.name, reason=str(e),
                        effect="the silence stays uncorroborated until a "
                               "read of Nova succeeds")
        finally:
            with self._lock:
                self._reading_nova.discard(rec.id)
        if event is not None:
            self._submit(event)
