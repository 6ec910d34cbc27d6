"""Live and cold migrations through the simulator's Nova API: the real
NovaDriver against it (the requests and answers the drain pass will
meet), raw requests for Nova's microversion rules, and the control API's
stalls."""

import pytest

from instanceha.drivers.compute import base
from tests.unit.sim.conftest import control, run



def server(sim, host="compute-0", index=0):
    return sim.cloud.list_servers(host)[index].id



def test_driver_live_migrates_and_follows_progress(sim, clock, nova):
    sid = server(sim)
    nova.live_migrate(sid)
    assert nova.get_server(sid).status == "MIGRATING"
    # The conductor's checks ran in the request (2.30): the source
    # compute takes it a schedule_time (0.05 s) later.
    run(sim, clock, 0.05)
    mig, = nova.server_migrations(sid)
    assert mig.status == "queued" and mig.memory_total is None
    run(sim, clock, 0.1)
    mig, = nova.server_migrations(sid)
    assert mig.status == "running" and mig.memory_total == 2048 * 2 ** 20
    assert mig.source_host == "compute-0" and mig.uuid
    run(sim, clock, 0.5)
    mig, = nova.server_migrations(sid)
    assert 0 < mig.memory_remaining < mig.memory_total
    row, = nova.list_host_migrations("compute-0")
    assert (row.migration_type, row.status, row.dest_host) == (
        "live-migration", "running", mig.dest_host)
    assert row.id == mig.uuid
    run(sim, clock, 1.0)
    s = nova.get_server(sid)
    assert (s.status, s.host) == ("ACTIVE", mig.dest_host)
    assert nova.server_migrations(sid) == []
    assert nova.list_host_migrations(mig.dest_host)[0].status == "completed"


def test_driver_refusals(sim, clock, nova):
    sid, other = server(sim), server(sim, index=1)
    sim.cloud.stop_server(sid)
    with pytest.raises(base.Conflict) as e:
        nova.live_migrate(sid)
    assert e.value.status == 409
    with pytest.raises(base.NotFound):
        nova.live_migrate("0b45041e-acfd-4ffb-a4a9-c1f0d4e80000")
    for host in ("compute-1", "compute-2"):
        sim.cloud.update_service(sim.cloud.hosts[host].service_uuid,
                                 status="disabled", disabled_reason="t")
    # At 2.30 the scheduler answers within the request.
    with pytest.raises(base.ComputeError) as e:
        nova.live_migrate(other)
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)
    assert "No valid host" in str(e.value)
    assert nova.get_server(other).status == "ACTIVE"
    assert nova.list_host_migrations("compute-0")[0].status == "error"
    with pytest.raises(base.ComputeError) as e:
        nova.confirm_resize(other)
    assert isinstance(e.value, base.Conflict)   # not resized: 409


def test_driver_aborts_a_stalled_migration(sim, clock, nova):
    sid = server(sim)
    r = control(sim, "/servers/%s/stall-migration" % sid, {"stall": True})
    assert r.status_code == 200 and r.json()["servers"] == [sid]
    nova.live_migrate(sid)
    run(sim, clock, 0.3)
    mig, = nova.server_migrations(sid)
    run(sim, clock, 20)
    again, = nova.server_migrations(sid)
    assert again.status == "running"
    assert again.memory_remaining == mig.memory_remaining
    assert again.updated_at > mig.updated_at         # monitor saves
    nova.abort_migration(sid, mig.id)
    run(sim, clock, 0.1)
    s = nova.get_server(sid)
    assert (s.status, s.host, s.task_state) == ("ACTIVE", "compute-0", None)
    assert nova.list_host_migrations("compute-0")[0].status == "cancelled"
    # Nothing in progress: the task state refuses (409).
    with pytest.raises(base.Conflict):
        nova.abort_migration(sid, mig.id)


def test_driver_aborts_by_uuid_and_force_completes(sim, clock, nova):
    a, b = server(sim), server(sim, index=1)
    r = control(sim, "/hosts/compute-0/stall-migrations", {"stall": True})
    assert r.json()["hosts"] == ["compute-0"]
    nova.live_migrate(a)
    nova.live_migrate(b)
    run(sim, clock, 1)
    rows = {m.server_id: m for m in nova.list_host_migrations("compute-0")}
    nova.abort_migration(a, rows[a].id)              # an os-migrations id
    mig, = nova.server_migrations(b)
    nova.force_complete_migration(b, mig.id)
    run(sim, clock, 0.1)
    assert nova.get_server(a).host == "compute-0"
    assert nova.get_server(b).host == mig.dest_host
    assert {m.status for m in nova.list_host_migrations("compute-0")} == {
        "cancelled", "completed"}


def test_force_complete_of_a_migration_not_running_is_a_400(sim, clock,
                                                              nova):
    sid = server(sim)
    nova.live_migrate(sid)
    run(sim, clock, 0.1)                             # queued
    mig = sim.cloud.list_migrations(instance_uuid=sid)[0]
    with pytest.raises(base.ComputeError) as e:
        nova.force_complete_migration(sid, mig.id)
    assert e.value.status == 400 and not isinstance(e.value, base.Conflict)


def test_driver_cold_migrates_and_confirms(sim, clock, nova):
    sid = server(sim)
    nova.cold_migrate(sid)
    assert nova.get_server(sid).status == "RESIZE"
    run(sim, clock, 0.2)
    row, = nova.list_host_migrations("compute-0")
    assert (row.migration_type, row.status) == ("migration", "migrating")
    run(sim, clock, 1.1)
    s = nova.get_server(sid)
    assert s.status == "VERIFY_RESIZE" and s.host == row.dest_host
    nova.confirm_resize(sid)
    run(sim, clock, 0.1)
    assert nova.get_server(sid).status == "ACTIVE"
    assert nova.list_host_migrations("compute-0")[0].status == "confirmed"


def test_host_migrations_since_and_evacuations_left_out(sim, clock, nova):
    a, b = server(sim), server(sim, index=1)
    nova.live_migrate(a)
    run(sim, clock, 5)
    since = clock()
    run(sim, clock, 1)
    nova.cold_migrate(b)
    run(sim, clock, 0.1)
    assert [m.server_id for m in nova.list_host_migrations(
        "compute-0", since=since)] == [b]
    assert len(nova.list_host_migrations("compute-0")) == 2
    # An evacuation from compute-1 is not a move of the drain's.
    sim.cloud.kill("compute-1")
    run(sim, clock, sim.cloud.service_down_time + 1)
    sim.cloud.evacuate(server(sim, "compute-1"))
    assert all(m.migration_type != "evacuation"
               for m in nova.list_host_migrations("compute-1"))


def test_microversion_rules(sim, clock, api):
    sid = server(sim)
    assert api("GET", "/servers/%s/migrations" % sid, "2.22").status_code \
        == 404
    assert api("GET", "/servers/%s/migrations" % sid, "2.23").json() == {
        "migrations": []}
    # Before 2.25 disk_over_commit is required; "auto" only from 2.25.
    r = api("POST", "/servers/%s/action" % sid, "2.24",
            {"os-migrateLive": {"host": None, "block_migration": "auto"}})
    assert r.status_code == 400
    r = api("POST", "/servers/%s/action" % sid, "2.68",
            {"os-migrateLive": {"host": None, "block_migration": "auto",
                                "force": False}})
    assert r.status_code == 400                      # force gone at 2.68
    r = api("POST", "/servers/%s/action" % sid, "2.30",
            {"os-migrateLive": {"host": None, "block_migration": "auto",
                                "force": True}})
    assert r.status_code == 400
    assert "non-provided destination" in r.json()["badRequest"]["message"]
    r = api("POST", "/servers/%s/action" % sid, "2.1",
            {"migrate": {"host": "compute-1"}})
    assert r.status_code == 400                      # host from 2.56


def test_asynchronous_no_valid_host_from_2_34(sim, clock, api):
    sid = server(sim)
    for host in ("compute-1", "compute-2"):
        sim.cloud.update_service(sim.cloud.hosts[host].service_uuid,
                                 status="disabled", disabled_reason="t")
    r = api("POST", "/servers/%s/action" % sid, "2.34",
            {"os-migrateLive": {"host": None, "block_migration": "auto"}})
    assert r.status_code == 202
    run(sim, clock, 0.1)
    rows = api("GET", "/os-migrations?host=compute-0", "2.59").json()
    row, = rows["migrations"]
    assert (row["migration_type"], row["status"]) == ("live-migration",
                                                      "error")
    body = api("GET", "/servers/%s" % sid, "2.1").json()["server"]
    assert body["status"] == "ACTIVE"


def test_abort_of_a_queued_migration_needs_2_65(sim, clock, api):
    sid = server(sim)
    r = api("POST", "/servers/%s/action" % sid, "2.30",
            {"os-migrateLive": {"host": None, "block_migration": "auto"}})
    assert r.status_code == 202
    run(sim, clock, 0.05)
    mig, = api("GET", "/servers/%s/migrations" % sid, "2.80").json()[
        "migrations"]
    assert mig["status"] == "queued"
    assert set(mig) >= {"memory_total_bytes", "memory_remaining_bytes",
                        "uuid", "user_id", "project_id", "server_uuid"}
    path = "/servers/%s/migrations/%d" % (sid, mig["id"])
    assert api("DELETE", path, "2.23").status_code == 404
    r = api("DELETE", path, "2.24")
    assert r.status_code == 400 and "queued" in r.text
    assert api("DELETE", path, "2.65").status_code == 202
    run(sim, clock, 0.05)
    rows = api("GET", "/os-migrations?host=compute-0", "2.23").json()
    assert rows["migrations"][0]["status"] == "cancelled"
    assert "links" not in rows["migrations"][0]


def test_os_migrations_links_and_changes_since(sim, clock, api):
    sid = server(sim)
    api("POST", "/servers/%s/action" % sid, "2.30",
        {"os-migrateLive": {"host": None, "block_migration": "auto"}})
    run(sim, clock, 0.5)
    row, = api("GET", "/os-migrations?host=compute-0", "2.59").json()[
        "migrations"]
    assert row["links"][0]["href"].endswith(
        "/servers/%s/migrations/%d" % (sid, row["id"]))
    assert "memory_total" not in row
    later = "2099-01-01T00:00:00Z"
    assert api("GET", "/os-migrations?changes-since=" + later,
               "2.59").json()["migrations"] == []
    # Below 2.59 Nova drops the filter.
    assert len(api("GET", "/os-migrations?changes-since=" + later,
                   "2.58").json()["migrations"]) == 1
    assert api("GET", "/os-migrations?changes-since=soon",
               "2.59").status_code == 400


def test_pause_and_unpause(sim, api):
    sid = server(sim)
    assert api("POST", "/servers/%s/action" % sid, "2.1",
               {"pause": None}).status_code == 202
    assert api("GET", "/servers/%s" % sid).json()["server"]["status"] \
        == "PAUSED"
    assert api("POST", "/servers/%s/action" % sid, "2.1",
               {"pause": None}).status_code == 409
    assert api("POST", "/servers/%s/action" % sid, "2.1",
               {"unpause": None}).status_code == 202


def test_control_stall_body_checked(sim):
    assert control(sim, "/servers/nope/stall-migration",
                   {"stall": True}).status_code == 404
    assert control(sim, "/hosts/compute-0/stall-migrations",
                   {"stall": "yes"}).status_code == 400
    r = control(sim, "/hosts/compute-0/stall-migrations", {"stall": False})
    assert r.status_code == 200 and r.json()["hosts"] == []
