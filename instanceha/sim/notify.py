"""Publish the simulator's Nova notifications on a broker, as Nova does:
exchange ``nova``, the ``messagingv2`` driver, topic
``versioned_notifications``, publisher ``nova-compute:<host>``.

:class:`Publisher` is one of ``SimCloud.notifiers``: it queues each
notification (the model calls it under its lock) and a thread of its
own sends them in order. oslo.messaging is imported only here.
"""

import queue
import threading

#: what Nova's [DEFAULT] control_exchange is
EXCHANGE = "nova"


class Publisher:

    def __init__(self, url, topics=("versioned_notifications",)):
        import oslo_messaging
        from oslo_config import cfg
        self._oslo = oslo_messaging
        self.conf = cfg.ConfigOpts()
        self.conf([], project="instanceha-sim", default_config_files=[])
        import oslo_messaging.opts
        for group, opts in oslo_messaging.opts.list_opts():
            if group is None:
                self.conf.register_opts(opts)
        # Nova's exchange, before the transport reads it.
        self.conf.set_override("control_exchange", EXCHANGE)
        self.transport = oslo_messaging.get_notification_transport(
            self.conf, url=url)
        self.topics = list(topics)
        self._notifiers = {}
        self._queue = queue.Queue()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="sim-notify")
        self._thread.start()

    def __call__(self, priority, event_type, payload):
        self._queue.put((priority, event_type, payload))

    def _notifier(self, host):
        n = self._notifiers.get(host)
        if n is None:
            n = self._notifiers[host] = self._oslo.Notifier(
                self.transport, "nova-compute:%s" % (host or "sim"),
                driver="messagingv2", topics=self.topics)
        return n

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            priority, event_type, payload = item
            host = payload.get("nova_object.data", {}).get("host")
            getattr(self._notifier(host), priority)({}, event_type, payload)
            self.sent += 1

    def close(self, timeout=10):
        self._queue.put(None)
        self._thread.join(timeout)
        self.transport.cleanup()
