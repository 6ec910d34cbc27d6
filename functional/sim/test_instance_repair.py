"""Instance repair (issue 25) on the simulator: the real ``instanceha
run`` repairs single servers that break on healthy hosts, found by its
sweep ([instance_repair] sweep_interval 5 s here) or by Nova's
notifications (the simulator's, published on a vhost of the machine's
RabbitMQ), through Nova's API (os-start, reboot HARD, migrate). Each test
asserts the world: the server's status in the simulator, its markers in
Nova's metadata, and its journal rows through the operator API.
"""


import pytest

from functional import operator_api as op
from functional.sim.conftest import wait_for as _wait_for


def wait_for(predicate, timeout):
    return _wait_for(predicate, timeout, "the repair (see the engine's log)")

PREFIX = "instanceha:instance_repair."
FAST = {"enabled": True, "sweep_interval": 5, "min_uptime": 1,
        "action_timeout": 10}


def _cloud(make_cloud, extra=None, **sim):
    repair = dict(FAST, **(extra or {}))
    c = make_cloud({"instance_repair": repair}, server_boot_time=0.5, **sim)
    return c


def _server(c, name):
    with c.sim.lock:
        return next(s for s in c.sim.servers.values() if s.name == name)


def _status(c, sid):
    c.sim.now()
    with c.sim.lock:
        return c.sim.servers[sid].status


def _rows(c, sid):
    status, body = op.api(c, "GET", "/servers/%s/repair" % sid)
    assert status == 200, body
    return [(r["action"], r["outcome"]) for r in body["rows"]], body


def _wait_rows(c, sid, want, timeout=60):
    wait_for(lambda: _rows(c, sid)[0] == want, timeout=timeout)
    return _rows(c, sid)[1]


def test_the_ladder_then_the_limit_then_clear(make_cloud):
    c = _cloud(make_cloud, {"max_repairs": 2})
    c.start_engine()
    s = _server(c, "compute-1-vm-0")
    # start does not fix it: the ladder goes on to hard reboot.
    c.sim.fail_repairs(s.id, ["start"])
    c.sim.crash_server(s.id)
    body = _wait_rows(c, s.id, [("start", "failure"),
                                ("hard_reboot", "success")])
    assert _status(c, s.id) == "ACTIVE"
    wait_for(lambda: (with_meta(c, s.id, PREFIX + "result") or "")
             .startswith("hard_reboot success"), timeout=10)
    # Neither fixes it: max_repairs within the window, then failed.
    other = _server(c, "compute-2-vm-0")
    c.sim.fail_repairs(other.id, ["start", "reboot"])
    c.sim.crash_server(other.id, how="shutdown")
    body = _wait_rows(c, other.id, [("start", "failure"),
                                    ("hard_reboot", "failure"),
                                    ("failed", "failed")])
    # The journal row comes first, the server's markers right after (the
    # old ones removed, then the new set): wait for them (CI read them
    # between the two once).
    wait_for(lambda: "failed" in _rows(c, other.id)[1]["markers"],
             timeout=10)
    assert with_meta(c, other.id, PREFIX + "failed")
    # The operator clears it and asks for a repair: it comes back.
    c.sim.fail_repairs(other.id, [])
    r = c.cli("repair", "--clear", other.id)
    assert r.returncode == 0, r.stderr
    assert not with_meta(c, other.id, PREFIX + "failed")
    r = c.cli("repair", other.id, "--level", "reboot")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: _rows(c, other.id)[0][-1] == ("hard_reboot",
                                                   "success"), timeout=60)
    assert _status(c, other.id) == "ACTIVE"
    r = c.cli("status", other.id)
    assert r.returncode == 0 and "marker result: hard_reboot success" \
        in r.stdout, r.stdout + r.stderr


def with_meta(c, sid, key):
    with c.sim.lock:
        return c.sim.servers[sid].metadata.get(key)


def test_a_users_stop_is_left_alone_and_an_unknown_server_refused(
        make_cloud):
    c = _cloud(make_cloud)
    c.start_engine()
    s = _server(c, "compute-0-vm-1")
    c.sim.user_stop(s.id)
    crashed = _server(c, "compute-0-vm-2")
    c.sim.crash_server(crashed.id)
    wait_for(lambda: _status(c, crashed.id) == "ACTIVE", timeout=60)
    assert _status(c, s.id) == "SHUTOFF"
    assert _rows(c, s.id)[0] == []
    status, body = op.api(c, "POST", "/servers/nope/repair", {})
    assert status == 404 and "nope" in body["error"]


def test_maintenance_pauses_repair_and_service_servers_are_excluded(
        make_cloud):
    c = _cloud(make_cloud, {"excluded_tags": "amphora"})
    c.start_engine()
    amp = _server(c, "compute-3-vm-0")
    c.sim.set_metadata(amp.id, tags=["amphora"])
    c.sim.crash_server(amp.id)
    paused = _server(c, "compute-2-vm-1")
    status, body = op.api(c, "POST", "/hosts/compute-2/maintenance",
                          {"reason": "bios"})
    assert status == 202, body
    c.sim.crash_server(paused.id)
    _wait_rows(c, amp.id, [("excluded", "not permitted")])
    assert _status(c, amp.id) == "SHUTOFF"
    wait_for(lambda: with_meta(c, paused.id, PREFIX + "pending"),
             timeout=60)
    assert "maintenance" in with_meta(c, paused.id, PREFIX + "pending")
    assert _status(c, paused.id) == "SHUTOFF"
    status, body = op.api(c, "POST", "/hosts/compute-2/resume",
                          {"reason": "done"})
    assert status == 202, body
    wait_for(lambda: _status(c, paused.id) == "ACTIVE", timeout=60)


def test_the_cloud_wide_hold(make_cloud):
    c = _cloud(make_cloud, {"hold_count": 4, "hold_percent": 0})
    c.start_engine()
    crashed = [_server(c, "compute-%d-vm-%d" % (h, i))
               for h in range(4) for i in range(2)]
    for s in crashed:
        c.sim.crash_server(s.id)
    wait_for(lambda: (op.api(c, "GET", "/status")[1].get(
        "instance_repair") or {}).get("hold", {}).get("held"), timeout=60)
    snap = op.api(c, "GET", "/status")[1]["instance_repair"]
    assert snap["hold"]["failing"] == 8
    assert all(_status(c, s.id) == "SHUTOFF" for s in crashed)
    with c.sim.lock:
        assert c.sim.repair_requests == []


def test_a_move_waits_for_capacity(make_cloud):
    # Two hosts, each full: a cold migration has nowhere to go.
    c = _cloud(make_cloud, {"actions": "cold_migrate"}, hosts=2,
               servers_per_host=2, host_vcpus=4, server_vcpus=2)
    c.start_engine()
    s = _server(c, "compute-0-vm-0")
    c.sim.crash_server(s.id)
    wait_for(lambda: "room" in (with_meta(c, s.id, PREFIX + "pending")
                                or ""), timeout=60)
    # Room appears (a server deleted on the other host): the move goes.
    c.sim.delete_server(_server(c, "compute-1-vm-0").id)
    _wait_rows(c, s.id, [("cold_migrate", "success")], timeout=90)
    assert _status(c, s.id) == "ACTIVE"
    assert _server(c, "compute-0-vm-0").host == "compute-1"


@pytest.fixture(scope="module")
def own_vhost():
    """A vhost with a broker user of its own: the shared user's password
    'guest' is an ordinary word of the repair log's reasons ("the guest
    crashed"), which the harness's secret-leak check would report."""
    from functional import events_fixtures as fx
    with fx.RabbitVhost(own_user=True) as v:
        yield v


def test_a_crash_notification_is_repaired_within_seconds(make_cloud,
                                                        own_vhost):
    vhost = own_vhost
    from instanceha.sim.notify import Publisher
    c = make_cloud({"instance_repair": dict(FAST, sweep_interval=600),
                    "notifications": {"enabled": True,
                                      "transport_url": vhost.url}},
                   server_boot_time=0.5)
    c.start_engine()
    pub = Publisher(vhost.url)
    c.sim.notifiers.append(pub)
    try:
        s = _server(c, "compute-1-vm-1")
        wait_for(lambda: op.api(c, "GET", "/status")[1]["sources"]
                 ["notifications"]["connected"], timeout=30)
        c.sim.crash_server(s.id)
        wait_for(lambda: _status(c, s.id) == "ACTIVE", timeout=30)
        _wait_rows(c, s.id, [("start", "success")], timeout=30)
        # Found by the notifications, not by the sweep (its first pass
        # comes 5 s after the start, then every 600 s here).
        with open(c.log_path) as f:
            opened = [line for line in f
                      if "repair_case_opened" in line and s.id in line]
        assert len(opened) == 1 and "source='notification'" in opened[0], \
            opened
    finally:
        c.sim.notifiers.remove(pub)
        pub.close()


GROUP_KEY = "instanceha:restart_group"


def _row_times(c, sid):
    """[(action, outcome, started_at, finished_at)] of the server's rows."""
    status, body = op.api(c, "GET", "/servers/%s/repair" % sid)
    assert status == 200, body
    return [(r["action"], r["outcome"], r["started_at"], r["finished_at"])
            for r in body["rows"]]


def test_restart_groups_send_the_lower_group_first(make_cloud):
    # A database (group 0) and its application server (group 1) of one
    # project, and a group-1 server of another project that waits for
    # nobody. min_uptime 6: the database's case stays open across a sweep.
    c = _cloud(make_cloud, {"min_uptime": 6, "hold_percent": 0})
    db = _server(c, "compute-0-vm-0")
    app = _server(c, "compute-1-vm-0")
    other = _server(c, "compute-2-vm-0")
    c.sim.set_metadata(db.id, metadata={GROUP_KEY: "0"})
    c.sim.set_metadata(app.id, metadata={GROUP_KEY: "1"})
    c.sim.set_metadata(other.id, metadata={GROUP_KEY: "1"})
    with c.sim.lock:
        c.sim.servers[other.id].project_id = "0" * 31 + "2"
    # The database's start does not fix it: it needs a hard reboot too.
    c.sim.fail_repairs(db.id, ["start"])
    c.start_engine()
    c.sim.crash_server(db.id)
    c.sim.crash_server(app.id)
    c.sim.crash_server(other.id)
    wait_for(lambda: "restart group 1 waits for group 0" in (
        with_meta(c, app.id, PREFIX + "pending") or ""), timeout=60)
    assert _status(c, app.id) == "SHUTOFF"
    _wait_rows(c, db.id, [("start", "failure"), ("hard_reboot", "success")])
    wait_for(lambda: _status(c, app.id) == "ACTIVE", timeout=60)
    _wait_rows(c, app.id, [("start", "success")])
    _wait_rows(c, other.id, [("start", "success")])
    db_up = _row_times(c, db.id)[-1][3]
    # The application server was sent only once the database had been
    # ACTIVE for min_uptime; the other project's server did not wait.
    assert _row_times(c, app.id)[0][2] >= db_up
    assert _row_times(c, other.id)[0][2] < db_up
    with c.sim.lock:
        sent = [(sid, what) for _, sid, what in c.sim.repair_requests]
    assert sent.index((app.id, "start")) > sent.index((db.id, "reboot"))


def test_a_drain_pauses_repair_on_its_host_until_resume(make_cloud):
    # compute-1's live migrations stall and the drain sends one at a time:
    # the drain stays under way with vm-1 and vm-2 still on the host.
    c = make_cloud({"instance_repair": dict(FAST, hold_percent=0),
                    "drain": {"concurrency": 1, "poll_interval": 1}},
                   server_boot_time=0.5)
    c.sim.stall_migrations(host="compute-1")
    c.start_engine()
    status, body = op.api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "firmware"})
    assert status == 202, body

    def moving():
        return {m["instance_uuid"] for m in c.sim.snapshot()["migrations"]
                if m["status"] == "running"}
    wait_for(lambda: len(moving()) == 1, timeout=60)
    with c.sim.lock:
        left = sorted(s.id for s in c.sim.servers.values()
                      if s.host == "compute-1" and s.id not in moving())
    crashed = left[0]
    c.sim.crash_server(crashed)
    wait_for(lambda: "draining" in (with_meta(c, crashed, PREFIX + "pending")
                                    or ""), timeout=60)
    assert "planned work pauses repair" in with_meta(
        c, crashed, PREFIX + "pending")
    assert _status(c, crashed) == "SHUTOFF"
    with c.sim.lock:
        assert [r for r in c.sim.repair_requests if r[1] == crashed] == []
    assert _rows(c, crashed)[0] == []
    # The operator ends the drain: the host is active again, the repair
    # goes on where the server is.
    status, body = op.api(c, "POST", "/hosts/compute-1/resume",
                          {"reason": "window closed"})
    assert status == 202, body
    wait_for(lambda: _status(c, crashed) == "ACTIVE", timeout=90)
    _wait_rows(c, crashed, [("start", "success")])
    with c.sim.lock:
        assert c.sim.servers[crashed].host == "compute-1"
