"""Restart groups on the host path (issue 25; engine.evac_groups): within
one project, the evacuate requests of restart group N+1 leave only once
every server of the lower groups is settled (rebuilt, or given up), on
the lost host or on another host being evacuated. The evacuation's passes
run one by one on the injected clock, against in-memory Nova whose
rebuilds finish only when the test says so."""

import pytest
from structlog.testing import capture_logs

from instanceha.engine import evac_groups, evacuator
from tests.unit.test_engine import World

GROUP = "instanceha:restart_group"


def _world(hosts=3, servers=4):
    w = World(hosts=hosts, servers=servers)
    w.pass_()
    w.compute.complete = False        # rebuilds finish when _finish says
    return w


def _isolate(w, host):
    """The host is proven dead (BMC Off) and forced down, as the engine
    leaves it before evacuating; its record."""
    w.fencer.power_off(w.ctx.inventory[host])
    w.compute.force_down(w.compute.services[host]["id"],
                         "instanceha: evacuating x")
    return w.engine.find(host)


def _server(w, sid, project, group=None):
    v = w.compute.servers[sid]
    v["project"] = project
    if group is not None:
        v["metadata"] = {GROUP: str(group)}


def _finish(w, sid):
    """Nova finishes the rebuild of ``sid``: ACTIVE on its destination."""
    mig = next(m for m in w.compute.migrations
               if m["server"] == sid and m["status"] == "accepted")
    mig["status"] = "done"
    w.compute.servers[sid].update(host=mig["dest"], status="ACTIVE",
                                  vm_state="active", task_state=None)


def _passes(w, rec, carry=None, n=4):
    """``n`` passes (fewer if it ends): the Outcome, or the last Requeue."""
    out = None
    for _ in range(n):
        out = evacuator.evacuate_pass(w.ctx, rec, carry)
        if not isinstance(out, evacuator.Requeue):
            return out
        carry = out.carry
        w.ctx.board.wait(w.ctx.board.generation(), out.after)
    return out


def _sent(w):
    return [m["server"] for m in w.compute.migrations]


def _events(logs, name):
    return [e for e in logs if e["event"] == name]


def test_a_higher_group_waits_for_the_lower_one_of_its_project():
    w = _world()
    db, app, other, plain = ("compute-1-vm-%d" % i for i in range(4))
    _server(w, db, "p", 0)
    _server(w, app, "p", 1)
    _server(w, other, "q", 1)         # another project: waits for nobody
    _server(w, plain, "p")            # no group: waits for nobody
    rec = _isolate(w, "compute-1")
    with capture_logs() as logs:
        out = _passes(w, rec)
        assert isinstance(out, evacuator.Requeue)
        run = out.carry
        assert sorted(_sent(w)) == sorted([db, other, plain])
        why = ("restart group 1 waits for group 0 of project p: 1 "
               "server(s) not ACTIVE yet (%s)" % db)
        assert run.group_waits == {app: why}
        assert [t[0] for t in run.todo] == [app]
        assert ", 1 waiting for a lower restart group (%s)" % why \
            in run.status_text()
        # The other rebuilds finishing do not let it go; the database's
        # does.
        _finish(w, other)
        _finish(w, plain)
        out = _passes(w, rec, run)
        assert app not in _sent(w)
        _finish(w, db)
        out = _passes(w, rec, run)
        assert _sent(w)[-1] == app
    # One line when it starts waiting, one when it goes (not one a pass).
    waits = _events(logs, "evacuation_waits_for_restart_group")
    assert [(e["server"], e["reason"]) for e in waits] == [(app, why)]
    released = _events(logs, "evacuation_restart_group_released")
    assert [(e["server"], e["group"], e["project"]) for e in released] \
        == [(app, 1, "p")]
    _finish(w, app)
    out = _passes(w, rec, out.carry)
    assert sorted(out.done) == sorted([db, app, other, plain])
    assert not out.failed and not out.skipped


def test_a_wait_is_said_again_only_when_the_group_waited_for_changes():
    w = _world()
    db1, db2, app, web = ("compute-1-vm-%d" % i for i in range(4))
    for sid, group in ((db1, 0), (db2, 0), (app, 1), (web, 2)):
        _server(w, sid, "p", group)
    rec = _isolate(w, "compute-1")
    with capture_logs() as logs:
        out = _passes(w, rec)
        assert sorted(_sent(w)) == sorted([db1, db2])
        _finish(w, db1)               # group 0 shrinks: still waited for
        out = _passes(w, rec, out.carry)
        assert "1 server(s) not ACTIVE yet (%s)" % db2 \
            in out.carry.group_waits[web]
        _finish(w, db2)               # group 1 goes; group 2 waits for it
        out = _passes(w, rec, out.carry)
        assert _sent(w)[-1] == app
        _finish(w, app)
        out = _passes(w, rec, out.carry)
        assert _sent(w)[-1] == web
    said = [(e["server"], e["reason"].split(":")[0]) for e in
            _events(logs, "evacuation_waits_for_restart_group")]
    assert said == [(app, "restart group 1 waits for group 0 of project p"),
                    (web, "restart group 2 waits for group 0 of project p"),
                    (web, "restart group 2 waits for group 1 of project p")]


def test_a_lower_group_left_on_the_host_holds_nobody():
    w = _world(servers=2)
    db, app = "compute-1-vm-0", "compute-1-vm-1"
    _server(w, db, "p", 0)
    w.compute.servers[db]["metadata"]["instanceha:repair"] = "none"
    _server(w, app, "p", 1)
    rec = _isolate(w, "compute-1")
    out = _passes(w, rec, n=1)
    assert _sent(w) == [app]
    assert out.carry.group_waits == {}


def test_an_invalid_group_goes_without_one_and_is_said_once():
    w = _world(servers=2)
    bad, app = "compute-1-vm-0", "compute-1-vm-1"
    _server(w, bad, "p")
    w.compute.servers[bad]["metadata"] = {GROUP: "database"}
    _server(w, app, "p", 1)
    rec = _isolate(w, "compute-1")
    with capture_logs() as logs:
        out = _passes(w, rec)
        assert sorted(_sent(w)) == sorted([bad, app])
        for sid in (bad, app):
            _finish(w, sid)
        out = _passes(w, rec, out.carry)
    assert sorted(out.done) == sorted([bad, app])
    said = _events(logs, "restart_group_invalid")
    assert len(said) == 1 and said[0]["server"] == bad, said
    assert "'database' is not a restart group" in said[0]["reason"]


def test_groups_hold_across_hosts_being_evacuated():
    w = _world(hosts=4, servers=1)
    db, app = "compute-1-vm-0", "compute-2-vm-0"
    _server(w, db, "p", 0)
    _server(w, app, "p", 1)
    rec1 = _isolate(w, "compute-1")
    rec2 = _isolate(w, "compute-2")
    first = evacuator.evacuate_pass(w.ctx, rec1, None)
    assert _sent(w) == [db]
    second = evacuator.evacuate_pass(w.ctx, rec2, None)
    assert _sent(w) == [db]
    assert app in second.carry.group_waits
    # Nothing of its own in flight: it comes back after poll_interval,
    # not at once (no busy loop while another host's server rebuilds).
    assert second.after == pytest.approx(w.conf.evacuation.poll_interval)
    w.ctx.board.wait(w.ctx.board.generation(), second.after)
    second = evacuator.evacuate_pass(w.ctx, rec2, second.carry)
    assert _sent(w) == [db]
    # compute-1's run sees its server rebuilt (and says so to the others).
    _finish(w, db)
    out = _passes(w, rec1, first.carry)
    assert list(out.done) == [db]
    second = evacuator.evacuate_pass(w.ctx, rec2, second.carry)
    assert _sent(w) == [db, app]


def test_a_lower_group_still_in_flight_after_a_restart_holds_the_next():
    w = _world(servers=2)
    db, app = "compute-1-vm-0", "compute-1-vm-1"
    _server(w, db, "p", 0)
    _server(w, app, "p", 1)
    rec = _isolate(w, "compute-1")
    out = evacuator.evacuate_pass(w.ctx, rec, None)
    assert _sent(w) == [db]
    out.close()                       # the process stops
    # A new process: the database's request is found in flight.
    out = _passes(w, rec)
    assert db in out.carry.inflight and _sent(w) == [db]
    assert app in out.carry.group_waits
    _finish(w, db)
    out = _passes(w, rec, out.carry)
    assert _sent(w) == [db, app]


def test_behind_capacity_holds_the_higher_groups_of_a_held_server():
    known = {"db": ("p", 0), "app": ("p", 1), "web": ("p", 2),
             "db2": ("p", 0), "other": ("q", 1)}
    send, behind = evac_groups.behind_capacity(
        known, ["app", "db2", "other", "plain", "web"],
        {"db": "no room"})
    assert send == ["db2", "other", "plain"]
    assert behind == {
        "app": "restart group 1 waits for group 0 of project p, which "
               "waits for capacity",
        "web": "restart group 2 waits for group 0 of project p, which "
               "waits for capacity"}
    assert evac_groups.behind_capacity(known, ["app"], {}) == (["app"], {})


def test_a_higher_group_waits_with_a_lower_one_that_has_no_room():
    # One free slot in the cloud (compute-0 holds 1 of 2, compute-2 2 of
    # 2): the application server comes first by priority and would take
    # it, while its database (group 0) waits for capacity.
    w = World(hosts=3, servers=2, capacity=2)
    w.compute.report_capacity = True
    del w.compute.servers["compute-0-vm-1"]
    w.pass_()
    db, app = "compute-1-vm-0", "compute-1-vm-1"
    _server(w, db, "p", 0)
    _server(w, app, "p", 1)
    w.compute.servers[app]["metadata"]["instanceha:priority"] = "10"
    rec = _isolate(w, "compute-1")
    out = _passes(w, rec)
    assert _sent(w) == []
    assert sorted(out.no_capacity) == [db, app]
    assert out.no_capacity[app] == ("restart group 1 waits for group 0 of "
                                    "project p, which waits for capacity")
    rows = {r["server_id"]: r for r in w.journal.evacuations()}
    assert rows[app]["status"] == "no_capacity"
    assert "which waits for capacity" in rows[app]["detail"]
