"""What every source is: something that turns input into events for the
engine, started with the sink to send them to, stopped, and asked how it
is doing.

A source (the reconciler's poll, Nova's notifications, fence_kdump
messages, the fencing audit's power watch, the control-plane watch) never
calls a side effect: it reads, judges what it read, and hands
:class:`~instanceha.events.Event` objects to its sink (the engine's
``submit``). ``health()`` answers from memory, without I/O, for the status
file and the API.

The service holds its sources as a list of ``Source`` and starts and stops
them alike. A source is built with the sink it will use (a test builds one
with a list's ``append``); a sink given to ``start`` replaces it.
"""

import threading
from typing import Any, Callable, Generic, Mapping, Optional, Protocol, \
    TypeVar, runtime_checkable

from instanceha.events import Event
from instanceha.util import periodic

#: Where a source sends its events: the engine's submit. It must not
#: block for long and must not raise (a source logs and drops what its sink
#: refuses).
Sink = Callable[[Event], None]
#: the sink a PeriodicSource hands its findings to
S = TypeVar("S")


@runtime_checkable
class Source(Protocol):
    """A source of host events."""

    def start(self, sink: Optional[Sink] = None) -> None:
        """Start reading (threads, sockets, listeners), sending events to
        ``sink`` (None: the sink the source was built with). Raises when
        the source cannot start (a port taken, a bad option)."""

    def stop(self) -> None:
        """Stop reading and wait a bounded time for the threads to end.
        Safe to call when not started."""

    def health(self) -> Mapping[str, Any]:
        """How the source is doing (counts, last times, last error), from
        memory: no I/O."""


class PeriodicSource(Generic[S]):
    """A source whose work is one :class:`~instanceha.util.periodic.Periodic`
    loop, built by the subclass as ``self._periodic``, with its sink
    (``S``: an event :data:`Sink`, or a narrower port) as ``self._sink``:
    started with the sink to use, stopped within 5 s."""

    _periodic: periodic.Periodic
    _sink: S

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The loop's thread (None before start), for the watchdog's
        liveness check."""
        return self._periodic.thread

    def start(self, sink: Optional[S] = None) -> None:
        if sink is not None:
            self._sink = sink
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop(5)
