"""What Nova's news about a server means for instance repair
(instanceha.policy.instance_repair: classify_notification,
classify_actions, news_from_notification).

The payloads are built in the shapes of Nova's notification samples
(doc/notification_samples/instance-power_off-start.json, -end.json,
instance-update.json, instance-reboot-error.json,
compute_task-rebuild_server-error.json and common_payloads/
InstancePayload.json 1.9, InstanceUpdatePayload.json 2.1), with the values
Nova's code puts there for each case (doc/instance-repair-research.md).
"""

import pytest

from instanceha.policy import instance_repair as ir

UUID = "178b0921-8f85-4257-88b6-2e743b5a975c"
USER = "fake"
PROJECT = "6f70656e737461636b20342065766572"
NOVA = object()         # initiator: Nova's own context (user and project null)


def _instance_data(initiator=None, **fields):
    """InstancePayload 1.9's data, as in common_payloads/InstancePayload."""
    user, project = (None, None) if initiator is NOVA else (
        initiator or (USER, PROJECT))
    data = {
        "architecture": "x86_64", "availability_zone": "nova",
        "block_devices": [], "created_at": "2012-10-29T13:42:11Z",
        "deleted_at": None, "display_name": "some-server",
        "display_description": "some-server", "host": "compute",
        "host_name": "some-server", "ip_addresses": [], "kernel_id": "",
        "key_name": "my-key", "launched_at": "2012-10-29T13:42:11Z",
        "image_uuid": "155d900f-4e14-4e4c-a73d-069cbf4541e6",
        "metadata": {}, "locked": False, "node": "fake-mini",
        "os_type": None, "progress": 0, "ramdisk_id": "",
        "reservation_id": "r-npxv0e40", "state": "active",
        "task_state": None, "power_state": "running",
        "tenant_id": PROJECT, "terminated_at": None,
        "auto_disk_config": "MANUAL", "updated_at": "2012-10-29T13:42:11Z",
        "user_id": "fake", "uuid": UUID,
        # InstancePayload.__init__: request_id only with a user and a
        # project (nova/notifications/objects/instance.py:136)
        "request_id": ("req-5b6c791d-5709-4f36-8fbe-c3e02869e35d"
                       if user and project else None),
        "action_initiator_user": user,
        "action_initiator_project": project,
        "locked_reason": None, "shares": [],
    }
    data.update(fields)
    return data


def action_payload(initiator=None, **fields):
    """InstanceActionPayload (power_off, reboot, ... notifications)."""
    data = _instance_data(initiator, **dict({"fault": None}, **fields))
    return {"nova_object.name": "InstanceActionPayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.9",
            "nova_object.data": data}


def update_payload(old_state, state, old_task=None, new_task=None,
                   initiator=None, **fields):
    """InstanceUpdatePayload 2.1 (instance.update)."""
    data = _instance_data(initiator, state=state, task_state=new_task,
                          **fields)
    data.update({
        "audit_period": {
            "nova_object.data": {
                "audit_period_beginning": "2012-10-01T00:00:00Z",
                "audit_period_ending": "2012-10-29T13:42:11Z"},
            "nova_object.name": "AuditPeriodPayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.0"},
        "old_display_name": None, "tags": [],
        "state_update": {
            "nova_object.data": {"old_state": old_state, "state": state,
                                 "old_task_state": old_task,
                                 "new_task_state": new_task},
            "nova_object.name": "InstanceStateUpdatePayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.0"},
    })
    return {"nova_object.name": "InstanceUpdatePayload",
            "nova_object.namespace": "nova", "nova_object.version": "2.1",
            "nova_object.data": data}


def fault(exception):
    return {"nova_object.name": "ExceptionPayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.1",
            "nova_object.data": {
                "exception": exception, "exception_message": "boom",
                "function_name": "f", "module_name": "m",
                "traceback": "Traceback ..."}}


def compute_task_payload(state, exception="NoValidHost"):
    return {"nova_object.name": "ComputeTaskPayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.0",
            "nova_object.data": {"instance_uuid": UUID,
                                 "reason": fault(exception),
                                 "request_spec": {}, "state": state}}


def classify(event_type, payload, context=None):
    return ir.classify_notification(
        ir.news_from_notification(event_type, payload, context))


def kind(event_type, payload, context=None):
    verdict = classify(event_type, payload, context)
    return None if verdict is None else verdict.kind


# -- a guest that stopped by itself vs a user's stop: power_off -------------

def test_sync_stop_of_a_guest_that_went_off_is_stopped_by_itself():
    # _sync_instance_power_state saved power_state shutdown, then called
    # compute_api.stop with the admin context (no user, no project).
    v = classify("instance.power_off.start", action_payload(
        NOVA, state="active", power_state="shutdown",
        task_state="powering-off"))
    assert v.kind == ir.STOPPED_BY_ITSELF and v.repair and not v.left_alone
    assert not v.by_user and v.server_id == UUID and v.host == "compute"
    assert "power_state shutdown while active" in v.reason


def test_sync_stop_of_a_crashed_guest_is_crashed():
    v = classify("instance.power_off.start", action_payload(
        NOVA, state="active", power_state="crashed",
        task_state="powering-off"))
    assert v.kind == ir.CRASHED and v.repair and not v.by_user


@pytest.mark.parametrize("state,power,want", [
    ("paused", "shutdown", ir.STOPPED_BY_ITSELF),   # force_stop (paused)
    ("paused", "crashed", ir.CRASHED),
    ("active", "suspended", ir.STOPPED_BY_ITSELF),  # guest suspended itself
    # Nova enforcing a stop: a stopped server whose guest runs
    ("stopped", "running", None),
    # nova-compute's start retrying a stop it had not finished
    ("active", "running", None),
])
def test_nova_stops_by_state_at_power_off_start(state, power, want):
    assert kind("instance.power_off.start", action_payload(
        NOVA, state=state, power_state=power,
        task_state="powering-off")) == want


def test_a_users_stop_is_user_stop_at_start_and_end():
    # The sample instance-power_off-start.json: the user "fake".
    v = classify("instance.power_off.start", action_payload(
        task_state="powering-off"))
    assert v.kind == ir.USER_STOP and v.left_alone and not v.repair
    assert v.by_user and "user fake" in v.reason
    assert kind("instance.power_off.end", action_payload(
        state="stopped", power_state="shutdown")) == ir.USER_STOP


def test_a_users_stop_of_a_guest_already_off_is_still_the_users():
    # The user stopped it before Nova's sync noticed the guest was off.
    assert kind("instance.power_off.start", action_payload(
        state="active", power_state="shutdown",
        task_state="powering-off")) == ir.USER_STOP


def test_task_state_does_not_discriminate():
    # force_stop sets powering-off for both: the initiator decides.
    user = action_payload(state="active", power_state="shutdown",
                          task_state="powering-off")
    nova = action_payload(NOVA, state="active", power_state="shutdown",
                          task_state="powering-off")
    assert user["nova_object.data"]["task_state"] == \
        nova["nova_object.data"]["task_state"]
    assert kind("instance.power_off.start", user) == ir.USER_STOP
    assert kind("instance.power_off.start", nova) == ir.STOPPED_BY_ITSELF


def test_power_off_end_by_nova_alone_is_ambiguous():
    # stopped/shutdown after any stop; Nova also re-stops a user's
    # stopped server whose guest runs: no verdict, the sweep decides.
    assert classify("instance.power_off.end", action_payload(
        NOVA, state="stopped", power_state="shutdown")) is None


# -- instance.update -----------------------------------------------------------

def test_the_sync_stops_three_updates_say_stopped_by_itself():
    # 1. the power-state save, 2. force_stop's save, 3. stop_instance's.
    steps = [
        update_payload("active", "active", None, None, NOVA,
                       power_state="shutdown"),
        update_payload("active", "active", None, "powering-off", NOVA,
                       power_state="shutdown"),
        update_payload("active", "stopped", "powering-off", None, NOVA,
                       power_state="shutdown"),
    ]
    for payload in steps:
        assert kind("instance.update", payload) == ir.STOPPED_BY_ITSELF


def test_crash_updates_say_crashed():
    assert kind("instance.update", update_payload(
        "active", "active", None, None, NOVA,
        power_state="crashed")) == ir.CRASHED
    assert kind("instance.update", update_payload(
        "active", "stopped", "powering-off", None, NOVA,
        power_state="crashed")) == ir.CRASHED


def test_a_users_stop_updates_say_user_stop():
    assert kind("instance.update", update_payload(
        "active", "active", None, "powering-off")) == ir.USER_STOP
    assert kind("instance.update", update_payload(
        "active", "stopped", "powering-off", None,
        power_state="shutdown")) == ir.USER_STOP


def test_nova_enforcing_a_stop_goes_stopped_to_stopped():
    assert classify("instance.update", update_payload(
        "stopped", "stopped", None, "powering-off", NOVA,
        power_state="running")) is None
    assert classify("instance.update", update_payload(
        "stopped", "stopped", "powering-off", None, NOVA,
        power_state="shutdown")) is None


def test_a_running_server_update_says_nothing():
    assert classify("instance.update", update_payload(
        "active", "active", None, None, NOVA)) is None
    assert classify("instance.update", update_payload(
        "stopped", "active", "powering-on", None)) is None


def test_a_guest_paused_by_the_hypervisor_is_reported():
    v = classify("instance.update", update_payload(
        "active", "active", None, None, NOVA, power_state="paused"))
    assert v.kind == ir.HYPERVISOR_PAUSED
    assert not v.repair and not v.left_alone


# -- ERROR ---------------------------------------------------------------------

def test_a_failed_reboot_into_error_is_error():
    v = classify("instance.update", update_payload(
        "active", "error", "reboot_started_hard", "reboot_started_hard",
        power_state="shutdown"))
    assert v.kind == ir.ERROR and v.repair and v.by_user
    assert "while reboot_started_hard" in v.reason


def test_an_admins_reset_state_to_error_is_error():
    v = classify("instance.update", update_payload(
        "active", "error", None, None, ("admin-user", "admin-project")))
    assert v.kind == ir.ERROR and v.by_user
    assert "set by user admin-user of project admin-project" in v.reason


def test_nova_putting_a_server_in_error_is_error():
    # _init_instance at nova-compute's start (admin context).
    v = classify("instance.update", update_payload(
        "active", "error", "spawning", None, NOVA))
    assert v.kind == ir.ERROR and not v.by_user


def test_a_failed_build_and_an_update_within_error_say_nothing():
    assert classify("instance.update", update_payload(
        "building", "error", "spawning", None)) is None
    assert classify("instance.update", update_payload(
        "error", "error", None, None)) is None


@pytest.mark.parametrize("old_task,want", [
    ("resize_migrating", ir.RESIZING), ("resize_finish", ir.RESIZING),
    ("migrating", ir.MIGRATING), ("rebuilding", ir.REBUILDING),
    ("rebuild_spawning", ir.REBUILDING), ("deleting", ir.DELETED),
    ("shelving", ir.SHELVED), ("shelving_offloading", ir.SHELVED),
    ("rescuing", ir.RESCUED),
])
def test_an_error_out_of_a_move_delete_or_shelve_is_left_alone(
        old_task, want):
    v = classify("instance.update", update_payload(
        "active", "error", old_task, None))
    assert v.kind == want and v.left_alone


@pytest.mark.parametrize("old,state,old_task,task,want", [
    ("active", "active", None, "deleting", ir.DELETED),
    ("active", "deleted", "deleting", None, ir.DELETED),
    ("active", "soft-delete", "soft-deleting", None, ir.DELETED),
    ("stopped", "stopped", None, "shelving", ir.SHELVED),
    ("stopped", "shelved_offloaded", "shelving_offloading", None,
     ir.SHELVED),
    ("shelved_offloaded", "shelved_offloaded", None, "unshelving",
     ir.SHELVED),
    ("active", "active", None, "resize_prep", ir.RESIZING),
    ("active", "resized", "resize_finish", None, ir.RESIZING),
    ("active", "active", None, "migrating", ir.MIGRATING),
    ("active", "active", None, "rebuilding", ir.REBUILDING),
    ("active", "rescued", "rescuing", None, ir.RESCUED),
])
def test_updates_of_servers_their_owner_has(old, state, old_task, task,
                                            want):
    assert kind("instance.update", update_payload(
        old, state, old_task, task)) == want


# -- other event types ------------------------------------------------------------

@pytest.mark.parametrize("event,want", [
    ("instance.delete.start", ir.DELETED),
    ("instance.soft_delete.end", ir.DELETED),
    ("instance.shutdown.start", ir.DELETED),
    ("instance.shelve.end", ir.SHELVED),
    ("instance.shelve_offload.end", ir.SHELVED),
    ("instance.resize_prep.start", ir.RESIZING),
    ("instance.resize_confirm.end", ir.RESIZING),
    ("instance.live_migration_pre.start", ir.MIGRATING),
    ("instance.live_migration_rollback.end", ir.MIGRATING),
    ("instance.rebuild.start", ir.REBUILDING),
    ("instance.rebuild_scheduled", ir.REBUILDING),
    ("instance.evacuate", ir.REBUILDING),
    ("instance.rescue.end", ir.RESCUED),
    ("instance.power_on.end", None), ("instance.reboot.end", None),
    ("instance.exists", None), ("instance.create.end", None),
])
def test_event_types(event, want):
    assert kind(event, action_payload()) == want


def test_reboot_error_leaves_a_running_guest_so_says_nothing():
    # instance-reboot-error.json: sent only when the guest still runs.
    assert classify("instance.reboot.error", action_payload(
        fault=fault("UnsupportedVirtType"),
        task_state="reboot_started_hard")) is None


def test_an_error_notification_that_left_the_server_in_error_is_error():
    v = classify("instance.volume_attach.error", action_payload(
        state="error", fault=fault("VolumeAttachFailed")))
    assert v.kind == ir.ERROR and "(VolumeAttachFailed)" in v.reason
    assert classify("instance.create.error", action_payload(
        state="error", fault=fault("BuildAbortException"))) is None


@pytest.mark.parametrize("event,state,want", [
    ("compute_task.build_instances.error", "error", None),
    ("compute_task.rebuild_server.error", "error", ir.REBUILDING),
    ("compute_task.migrate_server.error", "active", ir.MIGRATING),
    ("compute_task.future_method.error", "error", ir.ERROR),
    ("compute_task.future_method.error", "active", None),
])
def test_the_conductors_task_errors(event, state, want):
    assert kind(event, compute_task_payload(state)) == want


def test_irrelevant_notifications():
    assert classify("service.update", action_payload()) is None
    assert ir.classify_notification(ir.ServerNews(
        event="instance", server_id=UUID)) is None


# -- reading the payload ---------------------------------------------------------

def test_news_fields_from_an_update():
    news = ir.news_from_notification("instance.update", update_payload(
        "active", "stopped", "powering-off", None, NOVA,
        power_state="shutdown"))
    assert news == ir.ServerNews(
        event="instance.update", server_id=UUID, state="stopped",
        task_state=None, power_state="shutdown", old_state="active",
        old_task_state="powering-off", initiator_user=None,
        initiator_project=None, host="compute", fault=None)
    assert news.by_nova and "Nova itself" in news.who


def test_news_fault_and_compute_task_uuid():
    news = ir.news_from_notification(
        "compute_task.rebuild_server.error", compute_task_payload("error"))
    assert news.server_id == UUID and news.fault == "NoValidHost"
    assert news.state == "error"


def test_without_an_initiator_in_the_payload_the_context_says():
    payload = action_payload(state="active", power_state="shutdown",
                             task_state="powering-off")
    del payload["nova_object.data"]["action_initiator_user"]
    del payload["nova_object.data"]["action_initiator_project"]
    assert kind("instance.power_off.start", payload,
                {"user_id": None, "project_id": None,
                 "auth_token": "never-read"}) == ir.STOPPED_BY_ITSELF
    assert kind("instance.power_off.start", payload,
                {"user_id": "u", "project_id": "p"}) == ir.USER_STOP
    # Neither: who stopped it is unknown, nothing is decided on it.
    news = ir.news_from_notification("instance.power_off.start", payload)
    assert news.initiator_user == ir.UNKNOWN_INITIATOR
    assert ir.classify_notification(news) is None


def test_a_legacy_update_is_read_as_far_as_it_goes():
    payload = {"instance_id": UUID, "state": "stopped",
               "old_state": "active", "old_task_state": "powering-off",
               "new_task_state": None, "user_id": "the-owner",
               "host": "compute"}
    news = ir.news_from_notification("compute.instance.update", payload,
                                     {"user_id": None, "project_id": None})
    assert news.event == "instance.update" and news.server_id == UUID
    assert news.old_state == "active" and news.state == "stopped"
    # the payload's user_id is the owner, not who acted
    assert news.by_nova
    assert ir.classify_notification(news).kind == ir.STOPPED_BY_ITSELF


def test_a_payload_without_a_server_is_refused():
    with pytest.raises(ValueError, match="names no server"):
        ir.news_from_notification("instance.update", {"nova_object.data": {}})


@pytest.mark.parametrize("value,want", [
    (0, "pending"), (1, "running"), (3, "paused"), (4, "shutdown"),
    (6, "crashed"), (7, "suspended"), ("6", "crashed"), ("Crashed",
                                                         "crashed"),
    (None, None), (2, None)])
def test_power_state_names(value, want):
    assert ir.power_state_name(value) == want


# -- the sweep: instance actions ---------------------------------------------------

def rec(action, user=USER, project=PROJECT):
    return ir.ActionRecord(action, user, project, "req-1")


def nova(action):
    # A sync stop's record: no user, no project (a request id all the same).
    return ir.ActionRecord(action, None, None, "req-periodic")


def sweep(vm_state, actions, power=4, task=None):
    return ir.classify_actions(UUID, vm_state, task, power, actions,
                               host="compute")


def test_sweep_a_stop_by_nova_after_a_users_start_is_stopped_by_itself():
    v = sweep("stopped", [nova("stop"), rec("start"), rec("stop"),
                          rec("create")])
    assert v.kind == ir.STOPPED_BY_ITSELF and v.repair and not v.by_user
    assert "last user action: start" in v.reason and v.host == "compute"
    v = sweep("stopped", [nova("stop"), rec("create")], power=6)
    assert v.kind == ir.CRASHED


def test_sweep_a_users_stop_is_never_repaired():
    assert sweep("stopped", [rec("stop"), rec("create")]).kind == \
        ir.USER_STOP
    # Nova re-stopping a user's stopped server whose guest ran
    v = sweep("stopped", [nova("stop"), rec("stop"), rec("create")])
    assert v.kind == ir.USER_STOP and "enforced" in v.reason


@pytest.mark.parametrize("actions", [
    [], [rec("migrate"), rec("stop")], [rec("evacuate")],
    [nova("stop")],          # no user's action left to compare with
])
def test_sweep_stopped_by_something_else_says_nothing(actions):
    assert sweep("stopped", actions) is None


def test_sweep_waits_while_nova_has_a_task():
    assert sweep("stopped", [nova("stop"), rec("create")],
                 task="powering-on") is None


@pytest.mark.parametrize("newest,want", [
    (rec("resize"), ir.RESIZING), (rec("migrate"), ir.RESIZING),
    (rec("confirmResize"), ir.RESIZING),
    (rec("live-migration"), ir.MIGRATING), (rec("evacuate"), ir.REBUILDING),
    (rec("rebuild"), ir.REBUILDING), (rec("delete"), ir.DELETED),
    (rec("shelveOffload"), ir.SHELVED), (rec("rescue"), ir.RESCUED),
    (rec("create"), None),
    (rec("resetState", "admin", "admin-project"), ir.ERROR),
    (rec("reboot"), ir.ERROR), (rec("attach_volume"), ir.ERROR),
])
def test_sweep_servers_in_error(newest, want):
    v = sweep("error", [newest, rec("create")])
    assert (v.kind if v else None) == want


def test_sweep_error_without_actions_is_error():
    v = sweep("error", [])
    assert v.kind == ir.ERROR and not v.by_user


def test_sweep_active_with_the_guest_off_waits_for_novas_own_stop():
    assert sweep("active", [rec("create")], power=4) is None
    assert sweep("active", [rec("create")], power=1) is None
    assert sweep("active", [rec("create")], power=3).kind == \
        ir.HYPERVISOR_PAUSED
