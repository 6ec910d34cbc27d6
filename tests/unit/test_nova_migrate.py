"""NovaDriver's live and cold migrations against a scripted compute proxy:
the request each call sends (path, microversion, body), how Nova's
answers come back (409 Conflict, 400 a plain ComputeError, 404 NotFound),
and the records read from Nova's bodies."""

import json
import types

import pytest

from instanceha import conf as conf_pkg
from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova import NovaDriver


class Resp:
    def __init__(self, status, body=None):
        self.status_code = status
        self._body = body
        self.content = b"" if body is None else json.dumps(body).encode()
        self.text = self.content.decode()

    def json(self):
        if self._body is None:
            raise ValueError("no body")
        return self._body


def fault(status, message):
    name = {400: "badRequest", 404: "itemNotFound",
            409: "conflictingRequest"}.get(status, "computeFault")
    return Resp(status, {name: {"code": status, "message": message}})


class Compute:
    """An openstacksdk compute proxy answering from a script, recording
    each request as (METHOD, path, microversion, json, params)."""

    def __init__(self, answers, max_mv):
        self.answers = list(answers)
        self.max_mv = max_mv
        self.calls = []

    def get_endpoint_data(self):
        return types.SimpleNamespace(max_microversion=self.max_mv)

    def _answer(self, method, path, kwargs):
        self.calls.append((method, path, kwargs.get("microversion"),
                           kwargs.get("json"), kwargs.get("params")))
        return self.answers.pop(0)

    def get(self, path, **kwargs):
        return self._answer("GET", path, kwargs)

    def post(self, path, **kwargs):
        return self._answer("POST", path, kwargs)

    def delete(self, path, **kwargs):
        return self._answer("DELETE", path, kwargs)


def driver(answers, max_mv=(2, 96)):
    conf = conf_pkg.make({"DEFAULT": {"api_read_retries": 0},
                          "evacuation": {"microversion": "2.53"}})
    compute = Compute(answers, max_mv)
    d = NovaDriver(conf, connection=types.SimpleNamespace(compute=compute),
                   sleep=lambda s: None)
    return d, compute


def test_live_migrate_asks_the_scheduler_at_2_30():
    d, c = driver([Resp(202)])
    d.live_migrate("s1")
    assert c.calls == [("POST", "/servers/s1/action", "2.30", {
        "os-migrateLive": {"host": None, "block_migration": "auto"}}, None)]


def test_live_migrate_block_migration_is_checked_before_sending():
    d, c = driver([Resp(202)])
    d.live_migrate("s1", block_migration=True)
    assert c.calls[0][3]["os-migrateLive"]["block_migration"] is True
    with pytest.raises(ValueError):
        d.live_migrate("s1", block_migration="yes")
    assert len(c.calls) == 1


def test_live_migrate_state_refused_is_a_conflict():
    d, c = driver([fault(409, "Cannot 'os-migrateLive' instance s1 while "
                               "it is in vm_state stopped")])
    with pytest.raises(base.Conflict) as e:
        d.live_migrate("s1")
    assert e.value.status == 409 and "vm_state stopped" in str(e.value)


def test_live_migrate_no_valid_host_is_a_compute_error_not_a_conflict():
    d, c = driver([fault(400, "No valid host was found. There are not "
                              "enough hosts available.")])
    with pytest.raises(base.ComputeError) as e:
        d.live_migrate("s1")
    assert not isinstance(e.value, base.Conflict)
    assert e.value.status == 400 and "No valid host" in str(e.value)
    assert not e.value.unanswered


def test_a_migration_write_is_sent_once():
    d, c = driver([fault(503, "busy")])
    with pytest.raises(base.ComputeError) as e:
        d.live_migrate("s1")
    assert e.value.status == 503 and len(c.calls) == 1


def test_live_migrate_unknown_server():
    d, c = driver([fault(404, "Instance s1 could not be found.")])
    with pytest.raises(base.NotFound):
        d.live_migrate("s1")


def test_cold_migrate_and_confirm():
    d, c = driver([Resp(202), Resp(204)])
    d.cold_migrate("s1")
    d.confirm_resize("s1")
    assert c.calls == [
        ("POST", "/servers/s1/action", "2.1", {"migrate": None}, None),
        ("POST", "/servers/s1/action", "2.1", {"confirmResize": None}, None)]


def test_confirm_without_a_resize_is_a_400():
    d, c = driver([fault(400, "Instance has not been resized.")])
    with pytest.raises(base.ComputeError) as e:
        d.confirm_resize("s1")
    assert not isinstance(e.value, base.Conflict) and e.value.status == 400


ROW = {"id": 7, "uuid": "0b1e6a8c-6f26-4c1f-9a53-ffab8e0f7a10",
       "server_uuid": "s1", "status": "running",
       "source_compute": "compute-0", "dest_compute": "compute-1",
       "source_node": "compute-0", "dest_node": "compute-1",
       "dest_host": "192.0.2.2",
       "memory_total_bytes": 4096, "memory_processed_bytes": 1024,
       "memory_remaining_bytes": 3072, "disk_total_bytes": 0,
       "disk_processed_bytes": 0, "disk_remaining_bytes": 0,
       "created_at": "2026-11-22T04:31:40.000000",
       "updated_at": "2026-11-22T04:31:45.000000",
       "user_id": "u", "project_id": "p"}


def test_server_migrations_read_at_2_80():
    d, c = driver([Resp(200, {"migrations": [ROW]})])
    m, = d.server_migrations("s1")
    assert c.calls[0][:3] == ("GET", "/servers/s1/migrations", "2.80")
    assert m == base.ServerMigration(
        id="7", server_id="s1", status="running", source_host="compute-0",
        dest_host="compute-1", memory_total=4096, memory_remaining=3072,
        disk_total=0, disk_remaining=0, updated_at=1795321905.0,
        uuid=ROW["uuid"])


def test_server_migrations_at_the_clouds_maximum_below_2_80():
    row = {k: v for k, v in ROW.items()
           if k not in ("user_id", "project_id")}
    d, c = driver([Resp(200, {"migrations": [row]})], max_mv=(2, 60))
    assert d.server_migrations("s1")[0].id == "7"
    assert c.calls[0][2] == "2.60"


def test_server_migrations_answer_without_migrations_is_an_error():
    d, c = driver([Resp(200, {"nothing": []})])
    with pytest.raises(base.ComputeError, match="lacks"):
        d.server_migrations("s1")


def test_abort_at_2_65_when_the_cloud_has_it_else_2_24():
    d, c = driver([Resp(202)])
    d.abort_migration("s1", "7")
    assert c.calls == [("DELETE", "/servers/s1/migrations/7", "2.65", None,
                        None)]
    d, c = driver([Resp(202)], max_mv=(2, 60))
    d.abort_migration("s1", 7)
    assert c.calls[0][:3] == ("DELETE", "/servers/s1/migrations/7", "2.24")


def test_abort_by_uuid_finds_novas_integer_id():
    d, c = driver([Resp(200, {"migrations": [ROW]}), Resp(202)])
    d.abort_migration("s1", ROW["uuid"])
    assert [x[:2] for x in c.calls] == [
        ("GET", "/servers/s1/migrations"),
        ("DELETE", "/servers/s1/migrations/7")]


def test_abort_by_uuid_of_no_migration_in_progress():
    d, c = driver([Resp(200, {"migrations": []})])
    with pytest.raises(base.NotFound):
        d.abort_migration("s1", ROW["uuid"])
    assert len(c.calls) == 1


def test_abort_refusals():
    d, c = driver([fault(400, "Migration 7 state of instance s1 is "
                              "completed. Cannot abort live migration "
                              "while the migration is in this state."),
                   fault(409, "Cannot 'abort live migration' instance s1 "
                              "while it is in task_state None"),
                   fault(404, "Migration 8 for instance s1 could not be "
                              "found.")])
    with pytest.raises(base.ComputeError) as e:
        d.abort_migration("s1", "7")
    assert not isinstance(e.value, base.Conflict) and e.value.status == 400
    with pytest.raises(base.Conflict):
        d.abort_migration("s1", "7")
    with pytest.raises(base.NotFound):
        d.abort_migration("s1", "8")


def test_force_complete_at_2_22():
    d, c = driver([Resp(202)])
    d.force_complete_migration("s1", "7")
    assert c.calls == [("POST", "/servers/s1/migrations/7/action", "2.22",
                        {"force_complete": None}, None)]


def os_migration(mid, kind, status, updated="2026-11-22T04:31:45.000000"):
    return {"id": mid, "uuid": "uuid-%d" % mid, "instance_uuid": "s%d" % mid,
            "source_compute": "compute-0", "dest_compute": "compute-1",
            "source_node": "compute-0", "dest_node": "compute-1",
            "dest_host": None, "status": status, "migration_type": kind,
            "old_instance_type_id": 1, "new_instance_type_id": 1,
            "created_at": "2026-11-22T04:31:40.000000",
            "updated_at": updated}


def test_host_migrations_both_kinds_with_their_type():
    rows = [os_migration(3, "migration", "finished"),
            os_migration(2, "live-migration", "running"),
            os_migration(1, "evacuation", "done")]
    d, c = driver([Resp(200, {"migrations": rows})])
    found = d.list_host_migrations("compute-0")
    method, path, mv, _, params = c.calls[0]
    assert (method, path, mv) == ("GET", "/os-migrations", "2.59")
    assert params == {"host": "compute-0"}
    assert [(m.id, m.migration_type, m.status) for m in found] == [
        ("uuid-3", "migration", "finished"),
        ("uuid-2", "live-migration", "running")]
    assert found[0].updated_at == 1795321905.0
    assert found[0].created_at == 1795321900.0


def test_host_migrations_since_is_novas_changes_since():
    d, c = driver([Resp(200, {"migrations": [
        os_migration(2, "live-migration", "running")]})])
    d.list_host_migrations("compute-0", since=1795321905.7)
    assert c.calls[0][4] == {"host": "compute-0",
                             "changes-since": "2026-11-22T04:31:45Z"}


def test_host_migrations_since_below_2_59_is_applied_here():
    rows = [os_migration(2, "live-migration", "running"),
            os_migration(1, "live-migration", "accepted", updated=None),
            os_migration(3, "migration", "finished",
                         updated="2026-11-22T04:30:00.000000")]
    d, c = driver([Resp(200, {"migrations": rows})], max_mv=(2, 53))
    found = d.list_host_migrations("compute-0", since=1795321905.0)
    assert c.calls[0][2] == "2.53"
    assert [m.id for m in found] == ["uuid-2"]


def test_host_migrations_follow_novas_pages():
    first = {"migrations": [os_migration(2, "live-migration", "running")],
             "migrations_links": [{"rel": "next", "href":
                                   "http://nova/v2.1/os-migrations?"
                                   "host=compute-0&marker=uuid-2"}]}
    second = {"migrations": [os_migration(1, "migration", "error")]}
    d, c = driver([Resp(200, first), Resp(200, second),
                   Resp(200, {"migrations": []})])
    found = d.list_host_migrations("compute-0")
    assert [m.id for m in found] == ["uuid-2", "uuid-1"]
    assert c.calls[1][:2] == ("GET", "http://nova/v2.1/os-migrations")
    assert c.calls[1][4] == {"host": ["compute-0"], "marker": ["uuid-2"]}
