"""Issue 25's policies on the host path, on the simulator with the real
engine: service-owned servers ([instance_repair] excluded_projects and
excluded_tags) stay on a lost host, and restart groups order the
evacuate requests of a project's servers, on one lost host and across
two. Instance repair stays off: both apply all the same. Each test
asserts the world: where the servers are, the simulator's migrations
(when each request arrived, when each rebuild finished), the journal and
the invariant (no request while a server's host was powered on)."""

from functional.sim.conftest import wait_for as _wait_for

GROUP = "instanceha:restart_group"
#: the simulator's projects are 32 hex digits; its own is another
SERVICE = "0" * 31 + "5"
OTHER = "0" * 31 + "6"


def wait_for(predicate, timeout):
    return _wait_for(predicate, timeout, "the evacuation (see the engine's "
                     "log)")


def _server(c, name):
    with c.sim.lock:
        return next(s for s in c.sim.servers.values() if s.name == name)


def _migrations(c):
    """{server id: [its evacuation migrations, oldest first]} (the
    simulator's view: created_at when the request arrived, updated_at of
    a 'done' one when the server was ACTIVE on its new host)."""
    out = {}
    for m in c.sim.snapshot()["migrations"]:
        if m["migration_type"] == "evacuation":
            out.setdefault(m["instance_uuid"], []).append(m)
    return out


def _rebuilt_at(migs):
    """When the server's evacuation finished (its 'done' migration)."""
    done = [m["updated_at"] for m in migs if m["status"] == "done"]
    assert len(done) == 1, migs
    return done[0]


def _first_request(migs):
    return min(m["created_at"] for m in migs)


def test_service_owned_servers_stay_on_the_lost_host(make_cloud):
    c = make_cloud({"instance_repair": {"excluded_projects": SERVICE,
                                        "excluded_tags": "amphora"}},
                   hosts=4, servers_per_host=4)
    victim = "compute-3"
    amp, amp_image, service, tenant = (_server(c, "%s-vm-%d" % (victim, i))
                                       for i in range(4))
    c.sim.set_metadata(amp.id, tags=["amphora"])
    image = c.sim.set_image(name="amphora-x64-haproxy", tags=["amphora"])
    c.sim.set_server_image(amp_image.id, image)
    with c.sim.lock:
        c.sim.servers[service.id].project_id = SERVICE
    c.start_engine()
    c.sim.kill(victim)
    state, reason = c.wait_state(victim, "evacuated", timeout=120)
    assert "1/1 servers evacuated, 3 not evacuable" in reason, reason
    snap = c.sim.snapshot()
    for s in (amp, amp_image, service):
        assert snap["servers"][s.id]["host"] == victim
        assert s.id not in snap["evacuate_calls"]
    assert snap["servers"][tenant.id]["host"] != victim
    assert snap["servers"][tenant.id]["status"] == "ACTIVE"
    skipped = {r["server_id"]: r["detail"] for r in c.journal().evacuations()
               if r["status"] == "skipped"}
    assert sorted(skipped) == sorted([amp.id, amp_image.id, service.id])
    assert "server tag amphora is in [instance_repair] excluded_tags" \
        in skipped[amp.id]
    assert "image amphora-x64-haproxy has the tag amphora" \
        in skipped[amp_image.id]
    assert "project %s is in [instance_repair] excluded_projects" % SERVICE \
        in skipped[service.id]
    # The operator sees each one in the host's history, with its reason.
    out = c.cli("history", victim)
    assert out.returncode == 0, out.stderr
    for sid, why in skipped.items():
        assert sid in out.stdout and why in out.stdout, out.stdout
    assert c.sim.unsafe_evacuate_requests() == []


def test_restart_groups_order_the_evacuations(make_cloud):
    # Rebuilds take 5 s: a request of group 1 sent with group 0's would
    # arrive well before group 0's rebuild ends.
    c = make_cloud(hosts=6, servers_per_host=4, evacuation_time=5.0)
    db, app, other, plain = (_server(c, "compute-1-vm-%d" % i)
                             for i in range(4))
    app2 = _server(c, "compute-2-vm-0")
    for s, group in ((db, 0), (app, 1), (other, 1), (app2, 1)):
        c.sim.set_metadata(s.id, {GROUP: str(group)})
    with c.sim.lock:
        c.sim.servers[other.id].project_id = OTHER   # waits for nobody
    c.start_engine()
    c.sim.kill("compute-1")
    # The database's request is out (compute-1's run has planned and told
    # the others its groups): compute-2 dies while it rebuilds.
    wait_for(lambda: db.id in _migrations(c), timeout=120)
    c.sim.kill("compute-2")
    for host in ("compute-1", "compute-2"):
        c.wait_state(host, "evacuated", timeout=180)
    migs = _migrations(c)
    # A server's request may have been sent again (compute-2, dying
    # second, may have been a destination of compute-1's first requests):
    # its first request counts, and the rebuild that finished.
    db_up = _rebuilt_at(migs[db.id])        # ACTIVE on its new host
    for s in (app, other, plain, app2):
        _rebuilt_at(migs[s.id])
    # Group 1 of the database's project, on its host and on the other
    # lost host, was requested only once the database was rebuilt; the
    # other project's group 1 and the server without a group did not wait.
    assert _first_request(migs[app.id]) >= db_up
    assert _first_request(migs[app2.id]) >= db_up
    assert _first_request(migs[other.id]) < db_up
    assert _first_request(migs[plain.id]) < db_up
    with open(c.log_path) as f:
        waits = [line for line in f
                 if "evacuation_waits_for_restart_group" in line]
    assert any(app.id in line and "restart group 1 waits for group 0"
               in line for line in waits), waits
    assert c.sim.unsafe_evacuate_requests() == []
