"""The parser against payloads recorded from real Nova (34.0.0), and
against the ways a payload can be wrong."""

import pytest

from instanceha.sources import nova_payloads as np
from tests.unit.sources import helpers


def test_recorded_samples_cover_the_schemas_we_read():
    seen = {k: (v["payload"]["nova_object.name"],
                v["payload"]["nova_object.version"])
            for k, v in helpers.recorded().items()}
    assert seen["service.update"] == ("ServiceStatusPayload", "1.1")
    assert seen["instance.update"] == ("InstanceUpdatePayload", "2.1")
    assert seen["instance.evacuate"] == ("InstanceActionPayload", "1.9")
    assert seen["instance.rebuild.end"] == (
        "InstanceActionRebuildPayload", "1.10")


def test_service_update_recorded():
    _, payload = helpers.sample("service.update")
    facts = np.parse_service(payload)
    assert facts.uuid == "f7729eb2-4574-4b66-a61e-b7a572285fc9"
    assert facts.host == "compute1"
    assert facts.binary == "nova-compute"
    assert facts.forced_down is True
    assert facts.disabled is False
    assert facts.disabled_reason is None
    assert facts.last_seen_up == pytest.approx(1795319913.0)
    assert facts.schema == "ServiceStatusPayload 1.1"


def test_service_create_recorded_parses_with_null_last_seen():
    facts = np.parse_service(helpers.recorded()["service.create"]["payload"])
    assert facts.binary == "nova-osapi_compute"
    assert facts.last_seen_up is None


@pytest.mark.parametrize("event_type,host,task_state", [
    ("instance.evacuate", "compute1", "rebuilding"),
    ("instance.rebuild_scheduled", "compute1", "rebuilding"),
    ("instance.rebuild.end", "compute1", None),
])
def test_instance_action_recorded(event_type, host, task_state):
    entry = helpers.recorded()[event_type]
    facts = np.parse_instance(event_type, entry["publisher_id"],
                              entry["payload"])
    assert facts.server_id == "084ff958-d051-4957-a9c4-ae69a881b26f"
    assert facts.host == host
    assert facts.task_state == task_state
    assert facts.state == "active"
    assert np.is_rebuild_related(facts)


def test_rebuild_end_keeps_publisher_host():
    # Nova sends rebuild.end from the destination but with the old host in
    # the payload; the publisher tells where it ran.
    entry = helpers.recorded()["instance.rebuild.end"]
    facts = np.parse_instance("instance.rebuild.end", entry["publisher_id"],
                              entry["payload"])
    assert facts.publisher_host == "compute2"
    assert facts.progress_facts()["publisher_host"] == "compute2"


def test_instance_update_reads_state_update():
    entry = helpers.recorded()["instance.update"]
    facts = np.parse_instance("instance.update", entry["publisher_id"],
                              entry["payload"])
    assert facts.old_state == "building"
    assert facts.task_state == "scheduling"
    assert facts.old_task_state == "scheduling"
    assert not np.is_rebuild_related(facts)


def test_instance_update_during_rebuild_is_related():
    entry = helpers.recorded()["instance.update"]
    payload = entry["payload"]
    update = payload["nova_object.data"]["state_update"]["nova_object.data"]
    update.update(old_task_state="rebuild_spawning", new_task_state=None,
                  old_state="active", state="active")
    payload["nova_object.data"]["host"] = "compute2"
    facts = np.parse_instance("instance.update", "nova-compute:compute2",
                              payload)
    assert facts.host == "compute2"
    assert facts.task_state is None
    assert np.is_rebuild_related(facts)


def test_rebuild_error_fault_is_read():
    _, payload = helpers.sample("instance.rebuild.end", fault={
        "nova_object.name": "ExceptionPayload",
        "nova_object.namespace": "nova", "nova_object.version": "1.1",
        "nova_object.data": {"exception": "NoValidHost",
                             "exception_message": "No valid host"}})
    facts = np.parse_instance("instance.rebuild.error", "nova-conductor:c",
                              payload)
    assert facts.fault == "NoValidHost: No valid host"
    assert facts.event == "instance.rebuild.error"


def test_legacy_instance_payload():
    facts = np.parse_instance(
        "compute.instance.rebuild.end", "compute.compute2",
        {"instance_id": "s1", "host": "compute2", "state": "active",
         "new_task_state": None})
    assert (facts.server_id, facts.event, facts.host) == (
        "s1", "instance.rebuild.end", "compute2")


@pytest.mark.parametrize("payload", [
    None, "text", 42, [], {},
    {"nova_object.name": "ServiceStatusPayload"},
    {"nova_object.name": "ServiceStatusPayload",
     "nova_object.version": "1.1", "nova_object.data": "x"},
    {"nova_object.name": "ServiceStatusPayload",
     "nova_object.version": "x", "nova_object.data": {}},
])
def test_malformed_service_payloads_raise_payload_error(payload):
    with pytest.raises(np.PayloadError):
        np.parse_service(payload)


@pytest.mark.parametrize("changes", [
    {"uuid": None},                      # ServiceStatusPayload 1.0 had none
    {"forced_down": "yes"},
    {"disabled": None},
    {"host": 5},
    {"last_seen_up": "yesterday"},
    {"last_seen_up": 12},
])
def test_service_payload_with_bad_fields(changes):
    _, payload = helpers.sample("service.update", **changes)
    with pytest.raises(np.PayloadError):
        np.parse_service(payload)


def test_service_update_with_other_object_is_rejected():
    payload = helpers.recorded()["instance.evacuate"]["payload"]
    with pytest.raises(np.PayloadError):
        np.parse_service(payload)


def test_instance_payload_without_uuid_is_rejected():
    _, payload = helpers.sample("instance.evacuate", uuid=None)
    with pytest.raises(np.PayloadError):
        np.parse_instance("instance.evacuate", "nova-api:c", payload)


def test_times_naive_and_fractional():
    assert np.parse_time("2026-11-22T03:58:33Z") == \
        np.parse_time("2026-11-22T03:58:33+00:00") == \
        np.parse_time("2026-11-22T03:58:33.000000")
