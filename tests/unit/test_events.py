"""Typed event payloads (issue 22 item 3): a detail dict still makes an
event, as the kind's payload; event.detail gives the payload back as a
dict."""

import dataclasses

import pytest

from instanceha.events import (EvacuationSummary, Event, EventKind as E,
                               Isolated, PAYLOADS, PowerReading,
                               ServiceNotice, ServiceReport, Suspension)


def test_a_detail_becomes_the_kinds_payload():
    ev = Event(E.HEARTBEAT_OK, "u1", 5.0, name="c1",
               detail={"updated_at": 4.0, "aggregates": ["rack-a"]})
    assert ev.payload == ServiceReport(updated_at=4.0, aggregates=("rack-a",))
    assert type(ev.payload) is ServiceReport
    assert Event(E.OPERATOR_SUSPEND, "u1", 5.0,
                 detail={"until": 60}).payload == Suspension(60.0)
    assert Event(E.ISOLATE_OK, "u1", 5.0,
                 detail={"written_at": 4.5}).payload == Isolated(4.5)
    # No detail, or an empty one: no payload.
    assert Event(E.TICK, "u1", 5.0).payload is None
    assert Event(E.EVACUATE_FAILED, "u1", 5.0, detail={}).payload is None


def test_a_notifications_keys_make_a_service_notice():
    ev = Event(E.HEARTBEAT_OK, "u1", 5.0,
               detail={"updated_at": 4.0, "heartbeat_age": 1.0,
                       "publisher_id": "nova-compute:c1"})
    assert type(ev.payload) is ServiceNotice
    assert isinstance(ev.payload, ServiceReport)
    assert ev.payload.heartbeat_age == 1.0


def test_an_unknown_key_is_refused_naming_key_and_kind():
    with pytest.raises(ValueError, match="'zonee' for a heartbeat_lost"):
        Event(E.HEARTBEAT_LOST, "u1", 5.0, detail={"zonee": "nova"})
    with pytest.raises(ValueError, match="a tick event carries no detail"):
        Event(E.TICK, "u1", 5.0, detail={"until": 5})


def test_a_payload_of_another_kind_is_refused():
    with pytest.raises(TypeError, match="heartbeat_ok event carries "
                                        "ServiceReport, not Suspension"):
        Event(E.HEARTBEAT_OK, "u1", 5.0, payload=Suspension(9.0))
    with pytest.raises(TypeError, match="tick event carries no payload"):
        Event(E.TICK, "u1", 5.0, payload=Isolated(1.0))
    with pytest.raises(TypeError, match="not both"):
        Event(E.ISOLATE_OK, "u1", 5.0, payload=Isolated(1.0),
              detail={"written_at": 1.0})


def test_detail_is_the_payload_as_a_dict():
    ev = Event(E.EVACUATE_OK, "u1", 5.0,
               payload=EvacuationSummary(done=3, total=4, skipped=1))
    assert ev.detail["done"] == 3 and ev.detail["skipped"] == 1
    # Fields left at None are left out (the reconciler without
    # aggregates: the key is absent, as before).
    report = Event(E.HEARTBEAT_OK, "u1", 5.0,
                   payload=ServiceReport(status="enabled"))
    assert "aggregates" not in report.detail
    assert report.detail["status"] == "enabled"
    assert Event(E.TICK, "u1", 5.0).detail == {}


def test_an_event_replaced_keeps_its_payload():
    ev = Event(E.POWER_OFF, "u1", 5.0,
               payload=PowerReading(readings=(("k", "off"),)))
    held = dataclasses.replace(ev, cluster_ok=False, reason="held")
    assert held.payload is ev.payload and not held.cluster_ok
    vouched = dataclasses.replace(ev, payload=dataclasses.replace(
        ev.payload, vouched=True))
    assert vouched.detail["vouched"] is True
    assert ev.detail["vouched"] is False


def test_every_payload_class_is_frozen():
    for cls in set(PAYLOADS.values()) | {ServiceNotice}:
        assert cls.__dataclass_params__.frozen, cls
