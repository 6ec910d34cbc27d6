"""Nova notification listener: service.update -> host events, instance.* ->
evacuation progress.

An oslo.messaging notification listener (threading executor, listener pool
``[notifications] pool`` so several instanceha processes share the stream)
on Nova's versioned topic. It never calls Nova: it turns what it reads into
:class:`~instanceha.events.Event` objects for ``sink`` and into
``ProgressBoard.record`` calls. Bad input is logged with its event type and
dropped; nothing raised by a payload or by the sink reaches oslo.messaging.

``service.update`` for nova-compute:

* our own write (``disabled_reason`` starting with ``instanceha:``, the
  marker of :mod:`instanceha.util.marker`, or
  a write announced with :meth:`NotificationSource.note_own_write`) -> none;
* ``forced_down`` true (another actor) -> ``FORCED_DOWN``;
* otherwise ``last_seen_up`` within ``[detection] delta`` -> ``HEARTBEAT_OK``
  (a returning or re-enabled service), older -> ``HEARTBEAT_LOST``, absent ->
  none. The state machine decides what each means for the host.

The reconciler keeps polling; :meth:`health` tells it whether events flow.
"""

import collections
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, \
    Union, cast

import oslo_messaging
import structlog

from instanceha.events import Event
from instanceha.events import EventKind
from instanceha.events import ServiceNotice
from instanceha.sources import nova_payloads as np
# The listener and its records (parse_message, the record kinds,
# PRIORITIES) live in sources.listener, shared with the worker processes;
# they stay reachable here under their old names.
from instanceha.sources.base import Sink
from instanceha.sources.listener import (  # noqa: F401
    DROP, ERROR, INSTANCE, PRIORITIES, SERVICE, DropBody, Record,
    event_filter, listener_connected, make_batch_listener, parse_message)
from instanceha.sources.listener_workers import ListenerWorkers
from instanceha.util import marker

LOG = structlog.get_logger("instanceha.sources.notifications")

SOURCE = "notification"
#: a SERVICE or an INSTANCE record's body
Facts = Union[np.ServiceFacts, np.InstanceFacts]


class ProgressPort(Protocol):
    """What notifications tell evacuations and drains (the engine's
    progress board)."""

    def record(self, server_id: str, **facts: Any) -> None: ...

    def nudge(self, server_id: str) -> None: ...

    def facts(self, server_id: str) -> Dict[str, Any]: ...


class RepairSink(Protocol):
    """Instance repair's news: an instance notification's facts, at our
    clock's time; ``stale``: a newer one of the server came first."""

    def __call__(self, facts: np.InstanceFacts, at: float,
                 stale: bool = False) -> object: ...


def service_event(facts: np.ServiceFacts, now: float, fresh_for: float, *,
                  publisher_id: Optional[str] = None,
                  event_type: str = "service.update"
                  ) -> Tuple[Optional[Event], str]:
    """Decide which host event a service.update is, if any.

    Returns (Event or None, reason). Pure: ``now`` is the caller's clock.
    """
    if facts.binary != "nova-compute":
        return None, "not_compute"
    if marker.is_ours(facts.disabled_reason):
        return None, "own_write"
    age: Optional[float] = None
    updated_at: Optional[float] = None
    if facts.forced_down:
        kind, reason = EventKind.FORCED_DOWN, "forced down by another actor"
    elif facts.last_seen_up is None:
        return None, "no_heartbeat_info"
    else:
        age = now - facts.last_seen_up
        if age > fresh_for:
            # A notification can arrive late (broker backlog): it never says
            # a host is dead; the reconciler's poll of Nova decides that.
            return None, "stale_heartbeat"
        kind = EventKind.HEARTBEAT_OK
        reason = "service.update: up, last seen %.1fs ago" % age
        # Nova's last_seen_up moves only with heartbeats (unlike updated_at,
        # which our own writes bump): the engine compares it with the
        # fencing time to tell a returned host.
        updated_at = facts.last_seen_up
    if facts.disabled:
        reason += ", disabled (%s)" % (facts.disabled_reason or "no reason")
    notice = ServiceNotice(
        forced_down=facts.forced_down, disabled=facts.disabled,
        disabled_reason=facts.disabled_reason, updated_at=updated_at,
        last_seen_up=facts.last_seen_up, heartbeat_age=age,
        event_type=event_type, publisher_id=publisher_id,
        schema=facts.schema)
    return Event(kind=kind, host=facts.uuid, at=now, name=facts.host,
                 reason=reason, source=SOURCE, payload=notice), kind.value


class LatestSeen:
    """The newest emission time applied per key, so that a notification
    overtaken by a later one about the same service or server from the same
    publisher is not applied after it (batches run on several threads, and
    listener worker processes share one queue). Times from different
    publishers are never compared: their clocks may differ. A time is
    remembered for ``window`` seconds of our own clock only: overtaking
    happens within moments, and a publisher whose clock was stepped back
    must not be ignored for long. Bounded: the least recently updated keys
    are forgotten first."""

    def __init__(self, window: float = 60.0, limit: int = 100000) -> None:
        self._window = window
        self._limit = limit
        # key -> (emitted, noted at)
        self._seen: collections.OrderedDict[
            Tuple[str, str, Optional[str]], Tuple[str, float]] = \
            collections.OrderedDict()

    def is_older(self, key: Tuple[str, str, Optional[str]],
                 emitted: Optional[str], now: float) -> bool:
        if emitted is None:
            return False
        last = self._seen.get(key)
        if last is not None and now - last[1] <= self._window \
                and _time_key(emitted) < _time_key(last[0]):
            return True
        self._seen[key] = (emitted, now)
        self._seen.move_to_end(key)
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        return False


def _time_key(emitted: str) -> str:
    # "2026-11-22 03:58:41" and "2026-11-22 03:58:41.000123": str(datetime)
    # drops a zero fraction; padding makes the strings compare as times.
    return emitted if "." in emitted[-7:] else emitted + ".000000"


class NotificationSource:

    def __init__(self, conf: Any, sink: Sink,
                 clock: Callable[[], float] = time.time,
                 progress_board: Optional[ProgressPort] = None, *,
                 transport: Any = None,
                 repair_sink: Optional[RepairSink] = None) -> None:
        """``repair_sink(facts, at)``: instance repair's news (issue 25):
        every instance notification's InstanceFacts; None: not handed
        over."""
        self._repair_sink = repair_sink
        self._conf = conf
        self._group = conf.notifications
        self._sink = sink
        self._clock = clock
        self._board = progress_board
        self._transport = transport
        self._own_transport = transport is None
        self._server: Any = None
        self._workers: Optional[ListenerWorkers] = None
        self._lock = threading.Lock()
        self._latest = LatestSeen()
        # service uuid -> (expires_at, expected)
        self._own_writes: Dict[str, Tuple[float, Dict[str, Any]]] = {}
        self._counts = {"received": 0, "dropped": 0, "errors": 0,
                        "events": 0, "progress": 0, "reordered": 0,
                        "repair": 0}
        self._last_message_at: Optional[float] = None
        self._started_at: Optional[float] = None
        self._last_error: Optional[str] = None
        self._fresh_for = float(getattr(getattr(conf, "detection", None),
                                        "delta", 30.0))

    # -- lifecycle -----------------------------------------------------
    def prepare(self) -> None:
        """Check what can be checked without a broker: the event type
        filter, and the transport (URL syntax, driver) - a mistake there
        raises now, before anything starts. Connecting is left to
        :meth:`start`, which retries until the broker answers. With
        listener workers the transport is only built to check it: each
        worker process builds its own."""
        group = self._group
        event_filter(group.event_types)   # a bad regex fails here
        if self._transport is None:
            transport = oslo_messaging.get_notification_transport(
                self._conf, url=group.transport_url)
            if group.workers > 1:
                transport.cleanup()
            else:
                self._transport = transport

    def start(self, sink: Optional[Sink] = None) -> None:
        if sink is not None:
            self._sink = sink
        group = self._group
        if group.workers > 1:
            self._workers = ListenerWorkers(self._conf, self.apply)
            self._workers.start()
            topics = list(group.topics) + list(group.legacy_topics)
        else:
            event_filter(group.event_types)   # a bad regex fails here
            if self._transport is None:
                self._transport = oslo_messaging.get_notification_transport(
                    self._conf, url=group.transport_url)
            self._server, topics = make_batch_listener(
                self._conf, self._transport, self._handle_batch)
            self._server.start()
        self._started_at = self._clock()
        LOG.info("notification_listener_started", exchange=group.exchange,
                 topics=topics, pool=group.pool, processes=group.workers,
                 reason="listening for service.update and instance events"
                        + (" in %d worker processes" % group.workers
                           if group.workers > 1 else ""))

    def stop(self) -> None:
        server, self._server = self._server, None
        workers, self._workers = self._workers, None
        if server is not None:
            server.stop()
            server.wait()
        if workers is not None:
            workers.stop()
        if self._own_transport and self._transport is not None:
            self._transport.cleanup()
            self._transport = None
        LOG.info("notification_listener_stopped", **self._snapshot())

    # -- health --------------------------------------------------------
    def _snapshot(self) -> Dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
        return counts

    def health(self) -> Dict[str, Any]:
        now = self._clock()
        counts = self._snapshot()
        last = self._last_message_at
        quiet_since = last if last is not None else self._started_at
        workers = self._workers
        report: Dict[str, Any] = {
            "connected": (workers.connected() if workers is not None
                          else listener_connected(self._server)),
            "running": self._server is not None or workers is not None,
            "last_message_at": last,
            "quiet": (quiet_since is None
                      or now - quiet_since > self._group.silence_warning),
            "last_error": self._last_error,
            **counts,
        }
        if workers is not None:
            each = workers.health()
            report["workers"] = each
            # Numbers for /metrics: how many listen, how often one died.
            report["workers_alive"] = sum(1 for w in each if w["alive"])
            report["worker_restarts"] = sum(w["restarts"] for w in each)
        return report

    # -- own writes ----------------------------------------------------
    def note_own_write(self, service_uuid: str, **expected: Any) -> None:
        """The engine is about to write these service fields (e.g.
        ``forced_down=True``): the matching service.update is ours."""
        until = self._clock() + self._group.own_write_window
        with self._lock:
            self._own_writes[service_uuid] = (until, expected)

    def _is_announced(self, facts: np.ServiceFacts, now: float) -> bool:
        with self._lock:
            entry = self._own_writes.get(facts.uuid)
            if entry is None:
                return False
            until, expected = entry
            if now > until:
                del self._own_writes[facts.uuid]
                return False
            if all(getattr(facts, k, None) == v for k, v in expected.items()):
                del self._own_writes[facts.uuid]
                return True
            return False

    # -- messages ------------------------------------------------------
    def _count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def _handle_batch(self, priority: str,
                      messages: List[Dict[str, Any]]) -> None:
        for message in messages:
            self.handle(priority, message.get("publisher_id"),
                        message.get("event_type"), message.get("payload"),
                        message.get("metadata"))

    def handle(self, priority: str, publisher_id: Any, event_type: Any,
               payload: Any, metadata: Any) -> None:
        """One notification, parsed and applied here. Never raises."""
        self.apply(parse_message(priority, publisher_id, event_type,
                                 payload, metadata))

    def apply(self, record: Record) -> None:
        """One :func:`parse_message` record, from this process's listener
        or from a listener worker process. Never raises."""
        kind, event_type, publisher_id, emitted, body = record
        now = self._clock()
        self._last_message_at = now
        self._count("received")
        try:
            # The body's type follows the record's kind (listener.Body).
            if kind == DROP:
                reason, error, described = cast(DropBody, body)
                self._drop(event_type, reason, error=error, payload=described)
            elif kind == ERROR:
                self._fail(event_type, cast(str, body))
            elif self._is_older(kind, cast(Facts, body), publisher_id,
                                emitted, now):
                self._count("reordered")
                LOG.info("notification_ignored", event_type=event_type,
                         emitted=emitted, publisher_id=publisher_id,
                         reason="older than one already applied for the "
                                "same %s from the same publisher" % kind)
                if kind == INSTANCE and self._repair_sink is not None:
                    # Instance repair still hears it: a crash's
                    # notifications come in a burst, and its last one
                    # (power_off.end, which tells nothing) handled first
                    # must not hide the earlier ones that tell. Marked
                    # stale: it may open a case, never close one.
                    self._count("repair")
                    self._repair_sink(cast(np.InstanceFacts, body), now,
                                      stale=True)
            elif kind == SERVICE:
                self._on_service(now, publisher_id, event_type,
                                 cast(np.ServiceFacts, body))
            else:
                self._on_instance(now, event_type,
                                  cast(np.InstanceFacts, body))
        except Exception as exc:   # noqa: BLE001 - the listener must live
            self._fail(event_type, "%s: %s" % (type(exc).__name__, exc),
                       exc_info=True)

    def _fail(self, event_type: str, error: str,
              exc_info: bool = False) -> None:
        self._count("errors")
        self._last_error = error
        LOG.error("notification_handling_failed", event_type=event_type,
                  reason=error, exc_info=exc_info)

    def _is_older(self, kind: str, facts: Facts, publisher_id: Optional[str],
                  emitted: Optional[str], now: float) -> bool:
        key = (kind, cast(np.ServiceFacts, facts).uuid if kind == SERVICE
               else cast(np.InstanceFacts, facts).server_id, publisher_id)
        with self._lock:
            return self._latest.is_older(key, emitted, now)

    def _drop(self, event_type: str, reason: str, **fields: Any) -> None:
        self._count("dropped")
        LOG.warning("notification_dropped", event_type=event_type,
                    reason=reason, **fields)

    def _on_service(self, now: float, publisher_id: Optional[str],
                    event_type: str, facts: np.ServiceFacts) -> None:
        if facts.binary == "nova-compute" and self._is_announced(facts, now):
            LOG.debug("notification_ignored", event_type=event_type,
                      host=facts.host, reason="own_write_announced")
            return
        event, reason = service_event(
            facts, now, self._fresh_for, publisher_id=publisher_id,
            event_type=event_type)
        if event is None:
            LOG.debug("notification_ignored", event_type=event_type,
                      host=facts.host, reason=reason)
            return
        LOG.info("notification_event", **event.log_fields())
        self._count("events")
        self._sink(event)

    def _on_instance(self, now: float, event_type: str,
                     facts: np.InstanceFacts) -> None:
        if self._repair_sink is not None:
            self._on_repair_news(self._repair_sink, now, facts)
        if self._board is None or facts.event not in np.INSTANCE_EVENTS:
            return                      # (instance repair's news only)
        if np.is_move(facts):
            # A migration step ended: a draining host's next pass reads
            # its servers now rather than at its poll interval.
            self._board.nudge(facts.server_id)
            self._count("progress")
            return
        if not np.is_rebuild_related(facts) \
                and not self._board.facts(facts.server_id):
            return   # an ordinary state change of a server we don't follow
        self._board.record(facts.server_id, at=now, **facts.progress_facts())
        self._count("progress")
        LOG.debug("instance_progress", server=facts.server_id,
                  event_type=facts.event, host=facts.host,
                  task_state=facts.task_state, reason="recorded")

    def _on_repair_news(self, repair_sink: RepairSink, now: float,
                        facts: np.InstanceFacts) -> None:
        """Hand the instance notification to instance repair, which
        classifies it (policy.instance_repair) and decides; nothing here
        acts."""
        self._count("repair")
        repair_sink(facts, now)
