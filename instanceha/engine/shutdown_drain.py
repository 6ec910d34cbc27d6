"""An agent's "drain me" before an orderly shutdown of its host (issue 38).

The heartbeat listener hands each verified, fresh ``drain_host`` request
of a host's agent (:data:`instanceha.heartbeat.protocol.DRAIN_HOST`) to
:meth:`ShutdownDrains.ask` on the acting engine only. The first one of a
shutdown becomes the drain an operator asks for (``instanceha drain
HOST``: an OPERATOR_DRAIN event, then maintenance), with the same HA
admission: the drain pass runs its preflight (capacity, anti-affinity)
first and puts the host back when it refuses. The agent repeats its
request until the answer says ``drained`` or its bound passes; the
repeats ask nothing new, they read where the drain is:

- ``drained``: the host is in maintenance (or decommissioned);
- ``draining``: its servers are moving off, or the drain was just asked;
- ``refused``: the host is in a state no drain starts from (being proven
  dead, evacuated, suspended...), or the drain asked did not proceed
  (its preflight refused, or it stopped: the host's history says why).

A host in maintenance that goes silent is not fenced (the state machine
ignores its heartbeat loss). A host still draining when its agent stops
waiting and the shutdown goes on is, like any host that dies while
draining, proven dead and what is left on it evacuated.
"""

import threading
from typing import Callable, Dict, Optional, Tuple

import structlog

from instanceha.events import DrainRequest, Event, EventKind
from instanceha.fsm import machine
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State
from instanceha.heartbeat import protocol

LOG = structlog.get_logger("instanceha.engine.shutdown_drain")

#: States whose host is drained for a shutdown.
DRAINED_STATES = frozenset({State.MAINTENANCE, State.DECOMMISSIONING,
                            State.DECOMMISSIONED})
#: Seconds a drain asked is said ``draining`` before the host's state
#: shows it (the event waits in the host's inbox).
SETTLE = 15.0
#: Seconds after which a host's drain asked is forgotten (a later
#: shutdown asks again).
FORGET = 3600.0

#: (status, detail): status one of protocol.DRAIN_STATUSES
Answer = Tuple[str, str]


class ShutdownDrains:
    """See the module's text. ``find(name)`` is the engine's host
    record, ``submit(event)`` hands an event to the engine."""

    def __init__(self, find: Callable[[str], Optional[HostRecord]],
                 submit: Callable[[Event], None]) -> None:
        self._find = find
        self._submit = submit
        self._lock = threading.Lock()
        self._asked: Dict[str, float] = {}   # host name -> engine time

    def ask(self, host: str, reason: str, now: float) -> Answer:
        """The answer to host ``host``'s agent asking, at ``now``, to be
        drained before its shutdown (``reason``: what shuts down); the
        first ask starts the drain."""
        rec = self._find(host)
        if rec is None:
            return protocol.DRAIN_REFUSED, "host unknown to this engine"
        state = rec.state
        with self._lock:
            for name, at in list(self._asked.items()):
                if now - at >= FORGET:
                    del self._asked[name]
            asked = self._asked.get(rec.name)
        if state in DRAINED_STATES:
            if asked is not None:
                LOG.info("shutdown_drain_done", host=rec.name,
                         state=state.value,
                         reason="the host's servers are off it: its agent "
                                "lets the shutdown go on")
            return protocol.DRAINED, "in %s" % state.value
        if state is State.DRAINING:
            return protocol.DRAINING, "servers moving off"
        if asked is not None and now - asked < SETTLE:
            return protocol.DRAINING, "drain asked %.0f s ago" % (
                now - asked)
        if asked is not None:
            why = ("the drain asked did not proceed (state %s): the "
                   "host's history says why" % state.value)
            return protocol.DRAIN_REFUSED, why
        if state is not State.ACTIVE or not machine.rules_for(
                state, EventKind.OPERATOR_DRAIN):
            why = "host in state %s: no drain starts from it" % state.value
            LOG.warning("shutdown_drain_refused", host=rec.name,
                        state=state.value, asked_because=reason,
                        reason=why)
            return protocol.DRAIN_REFUSED, why
        with self._lock:
            self._asked[rec.name] = now
        because = ("orderly shutdown of the host, its agent asked first: %s"
                   % reason)
        LOG.info("shutdown_drain_asked", host=rec.name, state=state.value,
                 then="maintenance", reason=because)
        self._submit(Event(EventKind.OPERATOR_DRAIN, rec.id, now,
                           name=rec.name, reason=because, source="agent",
                           payload=DrainRequest(then="maintenance")))
        return protocol.DRAINING, "drain asked"
