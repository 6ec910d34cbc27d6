"""Instance repair as passes of the engine (issue 25), against the unit
fake of Nova on a fake clock: the server's state, its markers and the
journal's rows after each step, not the calls made."""

from instanceha.engine import repair_markers as markers
from instanceha.events import Event, EventKind as E
from instanceha.policy import instance_repair as ir
from tests.unit.test_engine import World

SID = "compute-0-vm-0"


def _world(**opts):
    w = World(hosts=3, servers=2)
    settings = {"enabled": True, "min_uptime": 10, "action_timeout": 30}
    settings.update(opts)
    for key, value in settings.items():
        w.conf.set_override(key, value, "instance_repair")
    w.engine.repair.reload_settings()
    w.pass_()
    return w


def _break(w, sid=SID, kind=ir.STOPPED_BY_ITSELF, state="stopped"):
    v = w.compute.servers[sid]
    v.update(vm_state=state, status="SHUTOFF" if state == "stopped"
             else "ERROR", power_state=4)
    v.setdefault("actions", []).append(dict(action="stop"))
    w.engine.repair.news(ir.Verdict(kind, sid, "test", host=v["host"]),
                         w.clock(), "test")


def _settle(w, seconds=1.0, passes=60):
    for _ in range(passes):
        w.pass_(seconds)


def _rows(w, sid=SID):
    return [(r["action"], r["outcome"]) for r in w.journal.repairs(sid)]


def test_a_server_stopped_by_itself_is_started_and_marked_success():
    w = _world()
    _break(w)
    _settle(w, passes=15)
    v = w.compute.servers[SID]
    assert v["status"] == "ACTIVE"
    assert _rows(w) == [("start", "success")]
    meta = v["metadata"]
    assert meta[markers.RESULT].startswith("start success at ")
    assert markers.RUNNING not in meta and markers.PENDING not in meta
    assert w.engine.repair.cases == {}


def test_the_ladder_goes_on_to_hard_reboot_when_start_fails():
    w = _world()
    w.compute.servers[SID]["repair_faults"] = {"start": True}
    _break(w)
    _settle(w, passes=20)
    assert _rows(w) == [("start", "failure"), ("hard_reboot", "success")]
    assert w.compute.servers[SID]["status"] == "ACTIVE"


def test_max_repairs_marks_the_server_failed_until_cleared():
    w = _world(max_repairs=2)
    w.compute.servers[SID]["repair_faults"] = {"start": True,
                                               "reboot": True}
    _break(w)
    _settle(w, passes=20)
    assert _rows(w) == [("start", "failure"), ("hard_reboot", "failure"),
                        ("failed", "failed")]
    assert markers.FAILED in w.compute.servers[SID]["metadata"]
    # New news changes nothing while it is marked failed.
    _break(w, state="error", kind=ir.ERROR)
    _settle(w, passes=5)
    assert len(_rows(w)) == 3
    # Cleared: the ladder starts again.
    w.compute.servers[SID]["repair_faults"] = {}
    w.engine.repair.clear(SID, "fixed the image")
    assert markers.FAILED not in w.compute.servers[SID]["metadata"]
    _break(w, state="error", kind=ir.ERROR)
    _settle(w, passes=15)
    assert _rows(w)[-1] == ("hard_reboot", "success")


def test_maintenance_pauses_repair_until_the_host_is_resumed():
    w = _world()
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_MAINTENANCE, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.pass_()
    assert w.state("compute-0")[0] == "maintenance"
    _break(w)
    _settle(w, passes=5)
    assert getattr(w.compute, "repair_calls", []) == []
    case = w.engine.repair.cases[SID]
    assert case.state == "paused" and "maintenance" in case.why
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    _settle(w, passes=15)
    assert w.compute.servers[SID]["status"] == "ACTIVE"
    assert _rows(w) == [("start", "success")]


def test_a_lost_host_is_the_host_paths_and_never_repaired():
    w = _world()
    w.compute.kill("compute-0")
    for _ in range(10):
        w.pass_()
    assert w.state("compute-0")[0] != "active"
    _break(w)
    w.pass_()
    assert ("start", SID) not in getattr(w.compute, "repair_calls", [])


def test_a_users_stop_drops_the_case():
    w = _world()
    w.compute.servers[SID]["repair_faults"] = {"start": True}
    _break(w)
    w.engine.repair.news(ir.Verdict(ir.USER_STOP, SID, "user",
                                    by_user=True), w.clock(), "test")
    _settle(w, passes=5)
    assert SID not in w.engine.repair.cases


def test_the_cloud_wide_hold_stops_every_repair():
    w = _world(hold_count=3, hold_percent=0)
    sids = sorted(w.compute.servers)[:4]
    for sid in sids:
        _break(w, sid)
    _settle(w, passes=5)
    assert getattr(w.compute, "repair_calls", []) == []
    snap = w.engine.snapshot()["instance_repair"]
    assert snap["hold"]["held"] and snap["hold"]["failing"] == 4
    assert markers.PENDING in w.compute.servers[sids[0]]["metadata"]


def test_excluded_service_servers_are_left_alone():
    w = _world(excluded_tags=["amphora"])
    w.compute.servers[SID]["tags"] = ["amphora"]
    _break(w)
    _settle(w, passes=5)
    assert _rows(w) == [("excluded", "not permitted")]
    assert w.compute.servers[SID]["status"] == "SHUTOFF"


def test_disabled_instance_repair_ignores_news():
    w = World(hosts=2, servers=1)
    w.pass_()
    assert not w.engine.repair.news(
        ir.Verdict(ir.CRASHED, "compute-0-vm-0", "x"), w.clock(), "test")


def test_the_sweep_finds_a_stop_by_nova_and_leaves_a_users_stop():
    from instanceha.sources.repair_sweep import RepairSweep
    w = _world(sweep_interval=5)
    nova_stop, user_stop = "compute-0-vm-0", "compute-1-vm-0"
    for sid, user in ((nova_stop, None), (user_stop, "u1")):
        v = w.compute.servers[sid]
        v.update(vm_state="stopped", status="SHUTOFF", power_state=4)
        v["actions"] = [dict(action="start", user_id="u1",
                             project_id="p1"),
                        dict(action="stop", user_id=user,
                             project_id="p1" if user else None)]
    sweep = RepairSweep(w.conf, w.compute, w.engine.repair.from_sweep,
                        w.clock, skip=w.engine.repair.sweep_skips)
    assert len(sweep.run_once()) == 2
    _settle(w, passes=15)
    assert w.compute.servers[nova_stop]["status"] == "ACTIVE"
    assert w.compute.servers[user_stop]["status"] == "SHUTOFF"
    assert _rows(w, user_stop) == []


def _power_off_start(server_id, host, crashed):
    """instance.power_off.start as the listener reads it: a guest that
    crashed (Nova's own sync, no user), or a user's stop."""
    from instanceha.sources import nova_payloads as np
    user = {} if crashed else dict(initiator_user="u",
                                   initiator_project="p")
    return np.InstanceFacts(
        server_id=server_id, event="instance.power_off.start", host=host,
        node=host, state="active", task_state="powering-off",
        power_state="crashed" if crashed else "running",
        has_initiator=True, **user)


def _crashed(w, server_id=SID):
    w.compute.servers[server_id].update(vm_state="stopped",
                                        status="SHUTOFF", power_state=4)
    return _power_off_start(server_id, "compute-0", crashed=True)


def test_a_crash_notification_opens_a_case():
    w = _world()
    facts = _crashed(w)
    assert w.engine.repair.from_notification(facts, w.clock())
    assert w.engine.repair.cases[SID].verdict == ir.CRASHED
    users = _power_off_start("compute-1-vm-1", "compute-1", crashed=False)
    assert not w.engine.repair.from_notification(users, w.clock())
    _settle(w, passes=15)
    assert _rows(w) == [("start", "success")]


def _api(w):
    import json
    from instanceha.api.server import OperatorAPI

    api = OperatorAPI(w.conf, w.engine, w.clock)

    def call(method, path, body=None):
        status, _, data = api.handle(method, path, json.dumps(
            body).encode() if body is not None else b"")
        return status, json.loads(data)
    return call


def test_operator_api_refuses_an_unknown_server_and_changes_nothing():
    w = _world()
    call = _api(w)
    status, body = call("POST", "/servers/nope/repair", {"reason": "x"})
    assert status == 404 and "'nope'" in body["error"]
    assert w.engine.repair.cases == {} and w.journal.repairs() == []
    status, body = call("POST", "/servers/%s/repair" % SID,
                        {"level": "sideways"})
    assert status == 400 and "sideways" in body["error"]
    status, body = call("GET", "/servers/nope/repair")
    assert status == 404


def test_operator_one_off_repair_and_clear_through_the_api():
    w = _world()
    call = _api(w)
    status, body = call("POST", "/servers/%s/repair" % SID,
                        {"reason": "stuck app", "level": "reboot"})
    assert status == 202, body
    _settle(w, passes=15)
    assert _rows(w) == [("hard_reboot", "success")]
    status, body = call("POST", "/servers/%s/repair" % SID, {"clear": True})
    assert status == 202
    status, body = call("GET", "/servers/%s/repair" % SID)
    assert status == 200
    assert [r["action"] for r in body["rows"]] == ["hard_reboot", "cleared"]
    assert body["markers"]["result"].startswith("hard_reboot success")


def test_the_cli_formats_a_servers_repair():
    from instanceha.cmd import repair
    text = repair.format_server({
        "server": SID, "name": "vm", "status": "ACTIVE", "host": "h",
        "enabled": True, "case": None,
        "markers": {"result": "start success at T"},
        "rows": [{"started_at": 0, "action": "start", "outcome":
                  "success", "step": 1, "host_name": "h", "detail": "x"}]})
    assert "marker result: start success at T" in text
    assert "start         success" in text


def test_a_restart_group_waits_for_a_lower_group_not_read_yet():
    """Servers that broke together: the application server's (group 1)
    pass comes before the database's (group 0) was ever read; it waits for
    that read, then for the database to be ACTIVE for min_uptime."""
    key = "instanceha:restart_group"
    w = _world(hold_percent=0)
    db, app = "compute-0-vm-0", "compute-1-vm-0"
    w.compute.servers[db]["metadata"] = {key: "0"}
    w.compute.servers[app]["metadata"] = {key: "1"}
    _break(w, db)
    _break(w, app)
    repair = w.engine.repair
    repair.process(app)
    assert getattr(w.compute, "repair_calls", []) == []
    assert repair.cases[app].state == "waiting"
    assert "not read yet" in repair.cases[app].why
    repair.process(db)
    assert w.compute.repair_calls == [("start", db)]
    repair.process(app)
    assert "restart group 1 waits for group 0" in repair.cases[app].why
    assert markers.PENDING in w.compute.servers[app]["metadata"]
    _settle(w, passes=40)
    assert w.compute.repair_calls == [("start", db), ("start", app)]
    assert _rows(w, db) == [("start", "success")]
    assert _rows(w, app) == [("start", "success")]
    assert w.journal.repairs(app)[0]["started_at"] >= \
        w.journal.repairs(db)[0]["finished_at"]


def test_a_stale_notification_opens_a_case_but_never_drops_one():
    w = _world()
    crash = _crashed(w)
    assert w.engine.repair.from_notification(crash, w.clock(), stale=True)
    users = _power_off_start(SID, "compute-0", crashed=False)
    assert not w.engine.repair.from_notification(users, w.clock(),
                                                 stale=True)
    assert SID in w.engine.repair.cases


def test_nova_s_own_stop_is_waited_for_before_the_ladder():
    """The power state saved as crashed (the news) while the server is
    still active: instanceha waits for Nova's stop and then starts it; a
    stop that never comes is given NOVA_STOP_GRACE, then hard reboot."""
    from instanceha.engine import repair_pass
    w = _world()
    for sid in (SID, "compute-1-vm-0"):
        w.compute.servers[sid].update(power_state=6)
        w.engine.repair.news(ir.Verdict(ir.CRASHED, sid, "test",
                                        host=w.compute.servers[sid]["host"]),
                             w.clock(), "test")
    _settle(w, passes=5)
    assert getattr(w.compute, "repair_calls", []) == []
    assert "stopping" in w.engine.repair.cases[SID].why
    # Nova stops the first one: start.
    w.compute.servers[SID].update(vm_state="stopped", status="SHUTOFF",
                                  power_state=4)
    _settle(w, passes=15)
    assert _rows(w) == [("start", "success")]
    # The other is never stopped by Nova: hard reboot after the grace.
    _settle(w, passes=int(repair_pass.NOVA_STOP_GRACE) + 15)
    assert _rows(w, "compute-1-vm-0") == [("hard_reboot", "success")]
