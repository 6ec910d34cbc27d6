"""Shared helpers for source tests: a fake clock, a collecting sink and the
payloads recorded from real Nova."""

import copy
import json
import pathlib
import threading

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "notifications"
RECORDED = DATA / "nova-34.0.0-evacuation.json"


def recorded():
    """{event_type: {"publisher_id", "event_type", "payload", ...}} as
    recorded from nova 34.0.0 over RabbitMQ."""
    with open(RECORDED) as f:
        return json.load(f)


def sample(event_type, **data_changes):
    """A recorded payload (deep copy) with some nova_object.data fields
    changed; returns (publisher_id, payload)."""
    entry = copy.deepcopy(recorded()[event_type])
    entry["payload"]["nova_object.data"].update(data_changes)
    return entry["publisher_id"], entry["payload"]


class FakeClock:
    def __init__(self, now=1795319921.2):   # when service.update was recorded
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class Sink:
    """Collects events; ``wait(n)`` blocks (with a timeout, no sleep) until
    n events arrived on another thread."""

    def __init__(self):
        self.events = []
        self._cond = threading.Condition()

    def __call__(self, event):
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait(self, count, timeout=5.0):
        with self._cond:
            self._cond.wait_for(lambda: len(self.events) >= count, timeout)
            return list(self.events)


def make_conf(group, **overrides):
    """A parsed instanceha conf with ``overrides`` in ``group``."""
    from instanceha import conf as ih_conf
    return ih_conf.make({group: overrides})
