"""Nova notification listener: service.update -> host events, instance.* ->
evacuation progress.

An oslo.messaging notification listener (threading executor, listener pool
``[notifications] pool`` so several instanceha processes share the stream)
on Nova's versioned topic. It never calls Nova: it turns what it reads into
:class:`~instanceha.events.Event` objects for ``sink`` and into
``ProgressBoard.record`` calls. Bad input is logged with its event type and
dropped; nothing raised by a payload or by the sink reaches oslo.messaging.

``service.update`` for nova-compute:

* our own write (``disabled_reason`` starting with ``own_reason_prefix``, or
  a write announced with :meth:`NotificationSource.note_own_write`) -> none;
* ``forced_down`` true (another actor) -> ``FORCED_DOWN``;
* otherwise ``last_seen_up`` within ``[detection] delta`` -> ``HEARTBEAT_OK``
  (a returning or re-enabled service), older -> ``HEARTBEAT_LOST``, absent ->
  none. The state machine decides what each means for the host.

The reconciler keeps polling; :meth:`health` tells it whether events flow.
"""

import re
import threading
import time

import oslo_messaging
import structlog

from instanceha.events import Event
from instanceha.events import EventKind
from instanceha.sources import nova_payloads as np

LOG = structlog.get_logger("instanceha.sources.notifications")

SOURCE = "notification"
PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


def service_event(facts, now, fresh_for, own_prefix, publisher_id=None,
                  event_type="service.update"):
    """Decide which host event a service.update is, if any.

    Returns (Event or None, reason). Pure: ``now`` is the caller's clock.
    """
    if facts.binary != "nova-compute":
        return None, "not_compute"
    if facts.disabled_reason and own_prefix \
            and facts.disabled_reason.startswith(own_prefix):
        return None, "own_write"
    detail = {"forced_down": facts.forced_down, "disabled": facts.disabled,
              "disabled_reason": facts.disabled_reason,
              "last_seen_up": facts.last_seen_up,
              "event_type": event_type, "publisher_id": publisher_id,
              "schema": facts.schema}
    if facts.forced_down:
        kind, reason = EventKind.FORCED_DOWN, "forced down by another actor"
    elif facts.last_seen_up is None:
        return None, "no_heartbeat_info"
    else:
        age = now - facts.last_seen_up
        detail["heartbeat_age"] = age
        if age > fresh_for:
            # A notification can arrive late (broker backlog): it never says
            # a host is dead; the reconciler's poll of Nova decides that.
            return None, "stale_heartbeat"
        kind = EventKind.HEARTBEAT_OK
        reason = "service.update: up, last seen %.1fs ago" % age
        # Nova's last_seen_up moves only with heartbeats (unlike updated_at,
        # which our own writes bump): the engine compares it with the
        # fencing time to tell a returned host.
        detail["updated_at"] = facts.last_seen_up
    if facts.disabled:
        reason += ", disabled (%s)" % (facts.disabled_reason or "no reason")
    return Event(kind=kind, host=facts.uuid, at=now, name=facts.host,
                 reason=reason, source=SOURCE, detail=detail), kind.value


def _event_filter(patterns):
    combined = "|".join("(?:%s)" % p for p in patterns if p)
    re.compile(combined)   # a bad regex fails at start, not per message
    return oslo_messaging.NotificationFilter(event_type=combined)


class _Endpoint:
    """oslo.messaging batch endpoint: one method per priority, all alike.

    The batch listener hands over whatever arrived together (up to
    ``batch_size``, waiting at most ``batch_timeout`` for more), which
    costs far less per message than one dispatch per notification.
    """

    def __init__(self, source, filter_rule):
        self.filter_rule = filter_rule
        for priority in PRIORITIES:
            setattr(self, priority, self._make(source, priority))

    @staticmethod
    def _make(source, priority):
        def handle(messages):
            for message in messages:
                try:
                    source.handle(priority, message.get("publisher_id"),
                                  message.get("event_type"),
                                  message.get("payload"),
                                  message.get("metadata"))
                except Exception:   # noqa: BLE001 - handle() logs already
                    pass
            return None   # ack: a bad message is never redelivered
        return handle


class NotificationSource:

    def __init__(self, conf, sink, clock=time.time, progress_board=None, *,
                 transport=None):
        self._conf = conf
        self._group = conf.notifications
        self._sink = sink
        self._clock = clock
        self._board = progress_board
        self._transport = transport
        self._own_transport = transport is None
        self._server = None
        self._lock = threading.Lock()
        self._own_writes = {}     # service uuid -> (expires_at, expected)
        self._counts = {"received": 0, "dropped": 0, "errors": 0,
                        "events": 0, "progress": 0}
        self._last_message_at = None
        self._started_at = None
        self._last_error = None
        self._fresh_for = float(getattr(getattr(conf, "detection", None),
                                        "delta", 30.0))

    # -- lifecycle -----------------------------------------------------
    def start(self):
        group = self._group
        if self._transport is None:
            self._transport = oslo_messaging.get_notification_transport(
                self._conf, url=group.transport_url)
        targets = [oslo_messaging.Target(topic=t, exchange=group.exchange)
                   for t in list(group.topics) + list(group.legacy_topics)]
        endpoint = _Endpoint(self, _event_filter(group.event_types))
        self._server = oslo_messaging.get_batch_notification_listener(
            self._transport, targets, [endpoint], executor="threading",
            pool=group.pool, allow_requeue=False,
            batch_size=group.batch_size, batch_timeout=group.batch_timeout)
        self._server.start()
        self._started_at = self._clock()
        LOG.info("notification_listener_started", exchange=group.exchange,
                 topics=[t.topic for t in targets], pool=group.pool,
                 reason="listening for service.update and instance events")

    def stop(self):
        server, self._server = self._server, None
        if server is not None:
            server.stop()
            server.wait()
        if self._own_transport and self._transport is not None:
            self._transport.cleanup()
            self._transport = None
        LOG.info("notification_listener_stopped", **self._snapshot())

    # -- health --------------------------------------------------------
    def _snapshot(self):
        with self._lock:
            counts = dict(self._counts)
        return counts

    def health(self):
        now = self._clock()
        counts = self._snapshot()
        last = self._last_message_at
        quiet_since = last if last is not None else self._started_at
        return {
            "connected": self._connected(),
            "running": self._server is not None,
            "last_message_at": last,
            "quiet": (quiet_since is None
                      or now - quiet_since > self._group.silence_warning),
            "last_error": self._last_error,
            **counts,
        }

    def _connected(self):
        """Whether the listener's broker connection is up. Reads the
        driver's kombu connection where there is one (rabbit); a driver
        without one (fake) counts as connected while running."""
        server = self._server
        if server is None:
            return False
        listener = getattr(server, "listener", None)
        obj = getattr(listener, "_poll_style_listener", None)
        obj = getattr(obj, "conn", None)
        for _ in range(4):   # ConnectionContext -> Connection -> kombu
            if obj is None:
                return True
            if hasattr(obj, "connected") and hasattr(obj, "transport"):
                try:
                    return bool(obj.connected)
                except Exception:   # noqa: BLE001 - a probe, never fatal
                    return False
            obj = getattr(obj, "connection", None)
        return True

    # -- own writes ----------------------------------------------------
    def note_own_write(self, service_uuid, **expected):
        """The engine is about to write these service fields (e.g.
        ``forced_down=True``): the matching service.update is ours."""
        until = self._clock() + self._group.own_write_window
        with self._lock:
            self._own_writes[service_uuid] = (until, expected)

    def _is_announced(self, facts, now):
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
    def _count(self, key):
        with self._lock:
            self._counts[key] += 1

    def handle(self, priority, publisher_id, event_type, payload, metadata):
        """One notification. Never raises."""
        now = self._clock()
        self._last_message_at = now
        self._count("received")
        try:
            if event_type in np.SERVICE_EVENTS:
                self._on_service(now, publisher_id, event_type, payload)
            elif self._is_instance(event_type):
                self._on_instance(now, publisher_id, event_type, payload)
            else:
                self._drop(event_type, "unhandled_event_type")
        except np.PayloadError as exc:
            self._drop(event_type, "malformed_payload", error=str(exc),
                       payload=np.describe(payload))
        except Exception as exc:   # noqa: BLE001 - the listener must live
            self._count("errors")
            self._last_error = "%s: %s" % (type(exc).__name__, exc)
            LOG.exception("notification_handling_failed",
                          event_type=event_type, reason=self._last_error)

    @staticmethod
    def _is_instance(event_type):
        if not isinstance(event_type, str):
            return False
        if event_type.startswith(np.LEGACY_PREFIX):
            event_type = event_type[len(np.LEGACY_PREFIX):]
        return event_type in np.INSTANCE_EVENTS

    def _drop(self, event_type, reason, **fields):
        self._count("dropped")
        LOG.warning("notification_dropped", event_type=event_type,
                    reason=reason, **fields)

    def _on_service(self, now, publisher_id, event_type, payload):
        facts = np.parse_service(payload)
        if facts.binary == "nova-compute" and self._is_announced(facts, now):
            LOG.debug("notification_ignored", event_type=event_type,
                      host=facts.host, reason="own_write_announced")
            return
        event, reason = service_event(
            facts, now, self._fresh_for, self._group.own_reason_prefix,
            publisher_id=publisher_id, event_type=event_type)
        if event is None:
            LOG.debug("notification_ignored", event_type=event_type,
                      host=facts.host, reason=reason)
            return
        LOG.info("notification_event", **event.log_fields())
        self._count("events")
        self._sink(event)

    def _on_instance(self, now, publisher_id, event_type, payload):
        facts = np.parse_instance(event_type, publisher_id, payload)
        if self._board is None:
            return
        if not np.is_rebuild_related(facts) \
                and not self._board.facts(facts.server_id):
            return   # an ordinary state change of a server we don't follow
        self._board.record(facts.server_id, at=now, **facts.progress_facts())
        self._count("progress")
        LOG.debug("instance_progress", server=facts.server_id,
                  event_type=facts.event, host=facts.host,
                  task_state=facts.task_state, reason="recorded")
