"""Fuzz the Nova notification parser and listener: random JSON-like bodies
and mutated recorded payloads, as oslo.messaging hands them over.

Properties: ``parse_message`` never raises and never answers ERROR (that
kind means a parser bug); a dropped message changes nothing (no event, no
progress record); only a well-formed service.update can become an event,
only a well-formed instance notification a progress record.
"""

import json
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instanceha.engine.progress import ProgressBoard
from instanceha.sources import notifications as ns
from instanceha.sources import nova_payloads as np
from tests.fuzz import budget
from tests.fuzz import gen
from tests.unit.sources import helpers

REPO = pathlib.Path(__file__).resolve().parents[2]


def _examples():
    """Recorded notifications: the project's fixture, plus the testbed's
    examples where a copy of shared/ is at hand."""
    found = dict(helpers.recorded())
    for shared in (REPO.parent / "shared", pathlib.Path("/work/shared")):
        path = shared / "testbed" / "nova" / "notification_examples.json"
        if path.is_file():
            with open(path) as f:
                for key, entry in json.load(f).items():
                    found.setdefault("testbed:" + key, entry)
            break
    return [found[k] for k in sorted(found)]


EXAMPLES = _examples()
KEYS = {"nova_object.name", "nova_object.version", "nova_object.data",
        "nova_object.namespace", "uuid", "host", "binary", "forced_down",
        "disabled", "disabled_reason", "last_seen_up", "state_update",
        "old_state", "old_task_state", "new_task_state", "task_state",
        "state", "fault", "exception", "exception_message", "node",
        "instance_id", "message", "timestamp"}
EVENT_TYPES = sorted(np.SERVICE_EVENTS | np.INSTANCE_EVENTS
                     | {np.LEGACY_PREFIX + e for e in np.INSTANCE_EVENTS}
                     | {"service.create", "compute.instance.rebuild.error",
                        "instance.delete.end"})
TIMES = st.sampled_from(["2026-11-22T03:58:33Z", "2026-11-22T03:58:33",
                         "2026-11-22T03:58:33.5+05:00", "0001-01-01T00:00Z",
                         "9999-12-31T23:59:59-23:59", "2026-02-30T00:00:00",
                         "", "Z", "2026-11-22 03:58:41.000123"])
VALUES = budget.json_like(KEYS) | TIMES | st.sampled_from(
    ["nova-compute", "ServiceStatusPayload", "InstanceUpdatePayload",
     "1.1", "x.1", "rebuilding", "instanceha:x", True, False])
EVENT_TYPE = (st.sampled_from(EVENT_TYPES) | st.text(max_size=30)
              | budget.json_like(max_leaves=3))
PUBLISHER = (st.sampled_from(["nova-compute:compute1", "nova-api:", ":", ""])
             | st.text(max_size=20) | st.none() | st.integers())
METADATA = (st.fixed_dictionaries({"timestamp": st.text(max_size=30)
                                   | st.sampled_from(
                                       ["2026-11-22 03:58:41",
                                        "2026-11-22 03:58:41.000123"])})
            | budget.json_like(max_leaves=3))


@st.composite
def mutated_message(draw):
    entry = draw(st.sampled_from(EXAMPLES))
    payload = budget.mutate(draw, entry["payload"], VALUES, KEYS)
    event_type = draw(st.just(entry["event_type"]) | EVENT_TYPE)
    return (draw(st.sampled_from(list(ns.PRIORITIES))),
            draw(st.just(entry["publisher_id"]) | PUBLISHER), event_type,
            payload, draw(METADATA))


@st.composite
def random_message(draw):
    return (draw(st.sampled_from(list(ns.PRIORITIES))), draw(PUBLISHER),
            draw(EVENT_TYPE),
            draw(budget.json_like(KEYS) | st.fixed_dictionaries(
                {"nova_object.name": VALUES, "nova_object.version": VALUES,
                 "nova_object.data": budget.json_like(KEYS)})),
            draw(METADATA))


class Harness:
    def __init__(self):
        self.sink = helpers.Sink()
        self.board = ProgressBoard()
        self.clock = helpers.FakeClock()
        conf = helpers.make_conf("notifications", transport_url="fake:/")
        self.source = ns.NotificationSource(conf, self.sink, self.clock,
                                            self.board, transport=object())

    def check(self, message):
        record = ns.parse_message(*message)
        kind, _, _, _, body = record
        assert kind != ns.ERROR, "parser bug on %r: %s" % (message, body)
        before_events = len(self.sink.events)
        before = self.source.health()
        self.source.apply(record)
        after = self.source.health()
        assert after["errors"] == before["errors"], after["last_error"]
        new_events = self.sink.events[before_events:]
        if kind == ns.DROP:
            assert after["dropped"] == before["dropped"] + 1
            assert not new_events
            assert after["progress"] == before["progress"]
        elif kind == ns.SERVICE:
            assert isinstance(body, np.ServiceFacts)
            assert after["progress"] == before["progress"]
            for event in new_events:
                assert event.host == body.uuid
        else:
            assert isinstance(body, np.InstanceFacts)
            assert not new_events
        return kind


_HARNESS = []


def harness():
    """One listener for every example (building a conf is slow); each
    check compares its counts before and after one message."""
    if not _HARNESS:
        _HARNESS.append(Harness())
    return _HARNESS[0]


KEY_LIST = sorted(KEYS)
EXTRA = ("nova-compute", "ServiceStatusPayload", "InstanceUpdatePayload",
         "1.1", "x.1", "rebuilding", "instanceha:x", True, False,
         "2026-11-22T03:58:33Z", "2026-11-22T03:58:33.5+05:00",
         "0001-01-01T00:00Z", "9999-12-31T23:59:59-23:59")


def _gen_message(rnd, mutated):
    priority = rnd.choice(ns.PRIORITIES)
    if mutated:
        entry = rnd.choice(EXAMPLES)
        payload = gen.mutate(rnd, entry["payload"], KEY_LIST, EXTRA)
        event_type = entry["event_type"] if rnd.random() < 0.7 \
            else rnd.choice(EVENT_TYPES)
        publisher = entry["publisher_id"]
    else:
        payload = gen.json_like(rnd, KEY_LIST)
        if rnd.random() < 0.5:
            payload = {"nova_object.name": rnd.choice(EXTRA + (None, 1)),
                       "nova_object.version": rnd.choice(EXTRA + (1,)),
                       "nova_object.data": gen.json_like(rnd, KEY_LIST)}
        event_type = rnd.choice(EVENT_TYPES) if rnd.random() < 0.8 \
            else gen.scalar(rnd)
        publisher = gen.scalar(rnd)
    metadata = {"timestamp": rnd.choice(["2026-11-22 03:58:41",
                                         "2026-11-22 03:58:41.000123",
                                         gen.text(rnd)])} \
        if rnd.random() < 0.8 else gen.json_like(rnd, depth=1)
    return priority, publisher, event_type, payload, metadata


def _run(counter, message, rnd, mutated):
    h = harness()
    counter()
    h.check(message)
    for _ in range(budget.BATCH):
        counter()
        h.check(_gen_message(rnd, mutated))


@budget.fuzz_settings(short=150)
@given(message=random_message(), rnd=st.randoms(use_true_random=False))
def test_random_bodies(counter, message, rnd):
    _run(counter, message, rnd, mutated=False)


@budget.fuzz_settings(short=150)
@given(message=mutated_message(), rnd=st.randoms(use_true_random=False))
def test_mutated_recorded_payloads(counter, message, rnd):
    _run(counter, message, rnd, mutated=True)


@pytest.mark.parametrize("entry", EXAMPLES,
                         ids=[e["event_type"] for e in EXAMPLES])
def test_recorded_payloads_still_parse(entry):
    """The seeds of the mutations are themselves accepted."""
    record = ns.parse_message("info", entry["publisher_id"],
                              entry["event_type"], entry["payload"], {})
    assert record[0] in (ns.SERVICE, ns.INSTANCE, ns.DROP)
    if entry["event_type"] in np.SERVICE_EVENTS:
        assert record[0] == ns.SERVICE
