"""The oslo.messaging notification listener and the records it makes,
shared by the in-process source (:mod:`instanceha.sources.notifications`)
and the listener worker processes (:mod:`instanceha.sources.listener_workers`),
so that neither imports the other's module for them.

:func:`make_batch_listener` builds the listener on ``[notifications]``'s
exchange, topics and pool; :func:`parse_message` turns one notification
into a plain, picklable record that a worker process sends to the engine's
process and :meth:`NotificationSource.apply` applies.
"""

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, \
    Union

import oslo_messaging
import structlog

from instanceha.sources import nova_payloads as np

# The logger of the notification source: its lines read as before.
LOG = structlog.get_logger("instanceha.sources.notifications")

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


def event_filter(patterns: Sequence[str]) -> Any:
    """oslo.messaging's filter for the event types matching one of
    ``patterns`` (regular expressions); a bad one raises here, at start,
    not per message."""
    combined = "|".join("(?:%s)" % p for p in patterns if p)
    re.compile(combined)
    return oslo_messaging.NotificationFilter(event_type=combined)


# Records: what one notification says, as plain picklable tuples
# (kind, event_type, publisher_id, emitted, body) so that a listener worker
# process can parse and the engine's process apply (see listener_workers).
SERVICE, INSTANCE, DROP, ERROR = "service", "instance", "drop", "error"
#: a DROP record's body: (reason, error, the payload described)
DropBody = Tuple[str, Optional[str], Optional[str]]
#: a record's body, by its kind: SERVICE a ServiceFacts, INSTANCE an
#: InstanceFacts, DROP a DropBody, ERROR the error's text
Body = Union[np.ServiceFacts, np.InstanceFacts, DropBody, str]
Record = Tuple[str, str, Optional[str], Optional[str], Body]
#: handle_batch(priority, messages): each message a dict (publisher_id,
#: event_type, payload, metadata) as oslo.messaging decoded it
BatchHandler = Callable[[str, List[Dict[str, Any]]], None]


def _is_instance(event_type: str) -> bool:
    if event_type.startswith(np.LEGACY_PREFIX):
        event_type = event_type[len(np.LEGACY_PREFIX):]
    return event_type in np.INSTANCE_EVENTS or np.is_repair_event(event_type)


def parse_message(priority: str, publisher_id: Any, event_type: Any,
                  payload: Any, metadata: Any) -> Record:
    """One notification -> a record. Pure, never raises.

    ``emitted`` is the notifier's own timestamp from the message metadata
    (oslo.messaging writes ``str(utcnow())``), used to keep per-key order.
    """
    emitted = metadata.get("timestamp") if isinstance(metadata, dict) \
        else None
    if not isinstance(emitted, str):
        emitted = None
    if not isinstance(publisher_id, str):
        publisher_id = None
    if not isinstance(event_type, str):
        return (DROP, repr(event_type)[:80], publisher_id, emitted,
                ("bad_event_type", "event type is not a string", None))
    try:
        if event_type in np.SERVICE_EVENTS:
            return (SERVICE, event_type, publisher_id, emitted,
                    np.parse_service(payload))
        if _is_instance(event_type):
            return (INSTANCE, event_type, publisher_id, emitted,
                    np.parse_instance(event_type, publisher_id, payload))
        return (DROP, event_type, publisher_id, emitted,
                ("unhandled_event_type", None, None))
    except np.PayloadError as exc:
        return (DROP, event_type, publisher_id, emitted,
                ("malformed_payload", str(exc), np.describe(payload)))
    except Exception as exc:   # noqa: BLE001 - a parser bug, not the input
        return (ERROR, event_type, publisher_id, emitted,
                "%s: %s" % (type(exc).__name__, exc))


def listener_connected(server: Any) -> bool:
    """Whether an oslo.messaging server's broker connection is up. Reads
    the driver's kombu connection where there is one (rabbit); a driver
    without one (fake) counts as connected while the server exists."""
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


def event_types(conf: Any) -> List[str]:
    """[notifications] event_types, plus instance repair's power-off and
    error notifications while [instance_repair] enabled is on."""
    patterns = list(conf.notifications.event_types)
    repair = getattr(conf, "instance_repair", None)
    if repair is not None and repair.enabled:
        patterns += [p for p in np.REPAIR_EVENT_PATTERNS
                     if p not in patterns]
    return patterns


def make_batch_listener(conf: Any, transport: Any,
                        handle_batch: BatchHandler) -> Tuple[Any, List[str]]:
    """An oslo.messaging batch notification listener (threading executor)
    on ``[notifications]``'s exchange, topics and pool that calls
    ``handle_batch(priority, messages)`` with the notifications whose type
    passes the filter (each a dict: publisher_id, event_type, payload,
    metadata). Returns (server, topic names)."""
    group = conf.notifications
    targets = [oslo_messaging.Target(topic=t, exchange=group.exchange)
               for t in list(group.topics) + list(group.legacy_topics)]
    endpoint = _Endpoint(handle_batch, event_filter(event_types(conf)))
    server = oslo_messaging.get_batch_notification_listener(
        transport, targets, [endpoint], executor="threading",
        pool=group.pool, allow_requeue=False,
        batch_size=group.batch_size, batch_timeout=group.batch_timeout)
    return server, [t.topic for t in targets]


class _Endpoint:
    """oslo.messaging batch endpoint: one method per priority, all alike,
    each handing ``handle_batch(priority, messages)`` what arrived together
    (up to ``batch_size``, waiting at most ``batch_timeout`` for more),
    which costs far less per message than one dispatch per notification.
    Every batch is acknowledged: a bad message is never redelivered."""

    def __init__(self, handle_batch: BatchHandler, filter_rule: Any) -> None:
        self.filter_rule = filter_rule
        for priority in PRIORITIES:
            setattr(self, priority, self._make(handle_batch, priority))

    @staticmethod
    def _make(handle_batch: BatchHandler,
              priority: str) -> Callable[[List[Dict[str, Any]]], None]:
        def handle(messages: List[Dict[str, Any]]) -> None:
            try:
                handle_batch(priority, messages)
            except Exception:   # noqa: BLE001 - nothing reaches oslo.messaging
                LOG.exception("notification_batch_failed", priority=priority,
                              count=len(messages),
                              reason="handler raised; batch acknowledged")
            return None
        return handle
