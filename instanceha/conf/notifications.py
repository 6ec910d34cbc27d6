from oslo_config import cfg

from instanceha.conf import _group
from instanceha.util.marker import MARKER

GROUP = "notifications"
DEFAULT_EVENT_TYPES = [
    r"^service\.update$",
    r"^instance\.(evacuate|rebuild_scheduled|rebuild\..*|update)$",
    r"^instance\.(live_migration_(pre|post|post_dest|rollback|abort|"
    r"force_complete)\.end|resize_(finish|confirm)\.end|resize\.error)$",
    r"^compute\.instance\.(evacuate|rebuild\..*|update)$",
]
OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Listen to Nova's notifications to react to forced-down "
                     "and re-enabled services within milliseconds and to "
                     "follow evacuations without polling. The reconciler "
                     "still polls as a safety net: disabling this only "
                     "slows detection."),
    cfg.StrOpt("transport_url", secret=True, default=None,
               help="oslo.messaging transport URL of the broker Nova "
                    "notifies on, e.g. rabbit://user:pass@host:5672/vhost. "
                    "Holds a password; never logged. Unset uses "
                    "[oslo_messaging_notifications] / [DEFAULT] "
                    "transport_url."),
    cfg.StrOpt("exchange", default="nova",
               help="Exchange Nova publishes notifications on (Nova's "
                    "control_exchange, 'nova'). A wrong exchange receives "
                    "nothing, silently; status shows received=0."),
    cfg.ListOpt("topics", default=["versioned_notifications"],
                help="Versioned notification topics (Nova's "
                     "[notifications] versioned_notifications_topics)."),
    cfg.ListOpt("legacy_topics", default=[],
                help="Unversioned (legacy) topics, e.g. 'notifications', "
                     "used only for instance progress. Leave empty unless "
                     "Nova runs with notification_format=unversioned."),
    cfg.StrOpt("pool", default="instanceha",
               help="Listener pool (queue) name. Processes with the same "
                    "pool share the stream, each message going to one of "
                    "them; a different pool gets its own copy. Must not be "
                    "a pool another consumer uses, or it steals messages."),
    cfg.ListOpt("event_types", default=DEFAULT_EVENT_TYPES,
                help="Regular expressions; only notifications whose event "
                     "type matches one are handled, the rest are acked "
                     "unread. Dropping service.update here disables "
                     "event-driven detection."),
    cfg.StrOpt("own_reason_prefix", default=MARKER,
               deprecated_for_removal=True,
               deprecated_reason="The marker is fixed: the engine always "
                                 "writes '%s', and the listener always "
                                 "recognises it. This option no longer "
                                 "changes anything." % MARKER,
               help="Ignored. Was the disabled_reason prefix that marks "
                    "instanceha's own writes; service.update notifications "
                    "carrying the fixed marker '%s' are ignored so our own "
                    "force-down does not loop back." % MARKER),
    cfg.FloatOpt("own_write_window", default=30.0, min=0, max=3600,
                 help="Seconds during which a service.update matching a "
                      "write the engine announced (note_own_write) is "
                      "ignored even without the reason prefix."),
    cfg.IntOpt("batch_size", default=64, min=1, max=10000,
               help="Most notifications handed over in one batch. Batching "
                    "cuts the per-message cost of the listener (about 1.7x "
                    "the throughput of single dispatch); larger batches "
                    "change little."),
    cfg.FloatOpt("batch_timeout", default=0.005, min=0.001, max=1.0,
                 help="Seconds the listener waits for more notifications "
                      "after the first of a batch. Adds up to this much "
                      "latency to a lone event; the idle listener also "
                      "wakes this often."),
    cfg.IntOpt("workers", default=1, min=1, max=64,
               help="Listener processes. 1 listens inside the instanceha "
                    "process. N > 1 starts N child processes, each an "
                    "oslo.messaging listener on the same pool (the broker "
                    "hands each message to one of them), which parse the "
                    "notifications and pass them to the engine over a "
                    "pipe; a worker that dies is restarted and its "
                    "unacknowledged messages are redelivered to the "
                    "others. One listener process drains roughly 3,000 "
                    "notifications/s per CPU core; raise this when bursts "
                    "exceed that and the host has spare cores. Order per "
                    "service and per server is kept from the notifier's "
                    "own timestamps."),
    cfg.FloatOpt("silence_warning", default=300.0, min=1, max=86400,
                 help="Seconds without any notification after which health "
                      "reports the stream as quiet, so the reconciler's "
                      "polling is relied on."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Nova notification listener",
    help_text="React to Nova's versioned notifications.")
