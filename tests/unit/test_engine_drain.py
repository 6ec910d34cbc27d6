"""The drain as passes of the engine, against the unit fake of Nova: the
world after each step (where the servers are, what the compute service
says), not the calls made."""

from instanceha.events import DrainRequest, Event, EventKind as E
from instanceha.util.marker import MARKER
from tests.unit.test_engine import World


def _world(hosts, servers):
    w = World(hosts=hosts, servers=servers)
    w.compute.report_capacity = True        # Placement's counts answer
    return w


def _drain(w, host, **request):
    rec = w.engine.find(host)
    w.engine.submit(Event(E.OPERATOR_DRAIN, rec.id, w.clock(), name=host,
                          reason="kernel update", source="operator",
                          payload=DrainRequest(**request)))


def _on(w, host):
    return sorted(s for s, v in w.compute.servers.items()
                  if v["host"] == host)


def _svc(w, host):
    return w.compute.services[host]


def test_a_drain_moves_every_server_then_the_host_is_in_maintenance():
    w = _world(3, 3)
    w.pass_()
    w.compute.servers["compute-0-vm-2"].update(status="SHUTOFF",
                                               vm_state="stopped")
    _drain(w, "compute-0")
    w.until("compute-0", "maintenance")
    assert _on(w, "compute-0") == []
    moved = [w.compute.servers["compute-0-vm-%d" % i] for i in range(3)]
    assert [v["status"] for v in moved] == ["ACTIVE", "ACTIVE", "SHUTOFF"]
    assert _svc(w, "compute-0")["status"] == "disabled"
    assert _svc(w, "compute-0")["disabled_reason"].startswith(
        MARKER + " draining")
    assert not _svc(w, "compute-0")["forced_down"]
    assert w.fencer.powered_off == []               # a live host: never
    state, reason = w.state("compute-0")
    assert "3/3 servers moved" in reason
    # Resumed: the drain's disable is undone, the host watched again.
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.until("compute-0", "active")
    assert _svc(w, "compute-0")["status"] == "enabled"


def test_a_refused_preflight_moves_nothing_and_changes_nothing():
    w = _world(2, 2)
    w.pass_()
    w.compute.kill("compute-1")          # the only destination is dead
    _drain(w, "compute-0")
    w.drain()
    assert w.state("compute-0")[0] in ("undraining", "active")
    w.until("compute-0", "active")
    assert _on(w, "compute-0") == ["compute-0-vm-0", "compute-0-vm-1"]
    assert _svc(w, "compute-0")["status"] == "enabled"
    assert w.compute.move_calls == []


def test_a_stuck_live_migration_is_aborted_then_given_up():
    w = _world(3, 2)
    w.conf.set_override("stuck_timeout", 10, "drain")
    w.conf.set_override("stuck_retries", 1, "drain")
    w.pass_()
    w.compute.stalled.add("compute-0-vm-1")
    _drain(w, "compute-0")
    w.until("compute-0", "maintenance", passes=200)
    assert _on(w, "compute-0") == ["compute-0-vm-1"]
    v = w.compute.servers["compute-0-vm-1"]
    assert v["status"] == "ACTIVE" and v["task_state"] is None
    assert "not migratable" in w.state("compute-0")[1]


def test_cancel_aborts_what_is_in_flight_and_re_enables():
    w = _world(3, 2)
    w.pass_()
    w.compute.stalled.update({"compute-0-vm-0", "compute-0-vm-1"})
    _drain(w, "compute-0")
    for _ in range(3):
        w.pass_()
    assert w.state("compute-0")[0] == "draining"
    assert w.compute.servers["compute-0-vm-0"]["status"] == "MIGRATING"
    rec = w.engine.find("compute-0")
    w.engine.submit(Event(E.OPERATOR_RESUME, rec.id, w.clock(),
                          name="compute-0", source="operator"))
    w.until("compute-0", "active")
    assert _on(w, "compute-0") == ["compute-0-vm-0", "compute-0-vm-1"]
    assert all(w.compute.servers[s]["status"] == "ACTIVE"
               for s in _on(w, "compute-0"))
    assert _svc(w, "compute-0")["status"] == "enabled"
    # Journalled as what happened: cancelled, not failed (at the drain's
    # next pass, which stops).
    for _ in range(10):
        w.pass_()
    drains = [a["outcome"] for a in w.journal.actions()
              if a["kind"] == "drain"]
    assert drains == ["drain_cancelled"], drains


def test_a_host_that_dies_while_draining_is_recovered_by_fencing():
    w = _world(3, 2)
    w.pass_()
    w.compute.stalled.add("compute-0-vm-1")
    _drain(w, "compute-0")
    w.until("compute-0", "draining")
    w.compute.kill("compute-0")
    w.until("compute-0", "evacuated", passes=200)
    assert w.fencer.powered_off == ["compute-0"]
    assert _on(w, "compute-0") == []


# -- through the operator API ------------------------------------------------

def _api(hosts=3, servers=2):
    from instanceha.api.server import OperatorAPI
    w = _world(hosts, servers)
    w.pass_()
    return w, OperatorAPI(w.conf, w.engine, w.clock)


def _post(api, host, body):
    import json
    status, _, out = api.handle("POST", "/hosts/%s/drain" % host,
                                json.dumps(body).encode())
    return status, json.loads(out)


def test_dry_run_reports_the_plan_and_changes_nothing():
    w, api = _api()
    status, out = _post(api, "compute-0", {"dry_run": True})
    assert status == 200 and out["preflight"]["ok"] is True
    assert [s["how"] for s in out["preflight"]["steps"]] == ["live", "live"]
    w.drain()
    assert w.state("compute-0")[0] == "active"
    assert w.compute.move_calls == []


def test_a_refused_preflight_is_409_with_every_reason_unless_forced():
    # Two hosts: the one left could not absorb the loss of its largest
    # (HA admission, [drain] ha_reserve_hosts = 1).
    w, api = _api(hosts=2)
    status, out = _post(api, "compute-0", {"reason": "bios"})
    assert status == 409 and "HA admission" in out["error"]
    assert out["preflight"]["ok"] is False
    w.drain()
    assert w.state("compute-0")[0] == "active"
    assert w.compute.move_calls == []
    # Forced: a soft refusal, so what can be drained is drained.
    status, out = _post(api, "compute-0", {"reason": "bios", "force": True})
    assert status == 202 and out["preflight"]["proceed"] is True
    w.until("compute-0", "maintenance")
    assert _on(w, "compute-0") == []


def test_bad_drain_requests_are_refused_naming_the_field():
    w, api = _api()
    for body, word in (({"then": "reboot"}, "then"),
                       ({"concurrency": 0}, "concurrency"),
                       ({"concurrency": "2"}, "concurrency"),
                       ({"force": "yes"}, "force")):
        status, out = _post(api, "compute-0", body)
        assert status == 400 and word in out["error"], (body, out)


def test_a_drain_through_the_api_ends_in_maintenance():
    w, api = _api()
    status, out = _post(api, "compute-1", {"reason": "kernel"})
    assert status == 202 and out["preflight"]["ok"]
    w.until("compute-1", "maintenance")
    assert _on(w, "compute-1") == []


def test_the_cli_prints_the_preflight_and_refuses_bad_options(capsys):
    import pytest
    from instanceha.cmd import host_commands
    text = host_commands.format_preflight({
        "ok": False, "refusals": ["HA admission: 1 host left"],
        "steps": [{"id": "a", "name": "web-1", "how": "live",
                   "why": "ACTIVE: live-migrated"}],
        "summary": ["room in any zone: enough"]})
    assert text.splitlines() == [
        "preflight: REFUSED", "  refused: HA admission: 1 host left",
        "  live     web-1 (ACTIVE: live-migrated)",
        "  room in any zone: enough"]
    p = host_commands.command_parser("drain")
    args = p.parse_args(["compute-0", "--then", "decommission",
                         "--concurrency", "3", "--dry-run"])
    assert (args.then, args.concurrency, args.dry_run) == (
        "decommission", 3, True)
    with pytest.raises(SystemExit):
        p.parse_args(["compute-0", "--then", "reboot"])
    assert "invalid choice" in capsys.readouterr().err


def test_metrics_and_status_say_what_the_drain_did():
    w, api = _api()
    w.compute.stalled.add("compute-0-vm-1")
    status, _ = _post(api, "compute-0", {"reason": "kernel"})
    assert status == 202
    for _ in range(8):                  # two passes of the drain (5 s)
        w.pass_()
    snap = w.engine.snapshot()
    host = next(h for h in snap["hosts"] if h["name"] == "compute-0")
    assert host["state"] == "draining"
    assert "1 of 2 servers moved, 1 moving" in w.engine.running_work(
        w.engine.find("compute-0").id)
    assert host["servers"] == {"compute-0-vm-0": "moved",
                               "compute-0-vm-1": "moving"}
    assert host["work"].startswith("drain: 1 of 2 servers moved")
    text = api.handle("GET", "/metrics")[2].decode()
    assert 'instanceha_drain_servers_total{event="sent_live"} 2.0' in text
    assert 'instanceha_drain_servers_total{event="moved"} 1.0' in text
    assert "instanceha_drain_migration_seconds_count 1.0" in text


def test_status_host_prints_the_drain_server_by_server(tmp_path):
    import json
    from instanceha.cmd import status as status_cmd
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"hosts": [{
        "id": "u0", "name": "compute-0", "state": "draining",
        "work": "drain: 1 of 2 servers moved, 1 moving",
        "servers": {"a": "moved", "b": "moving"}}]}))
    text = status_cmd.running_servers(str(path), {"id": "u0"})
    assert text.splitlines() == [
        "drain: 1 of 2 servers moved, 1 moving now (2 servers):",
        "  a" + " " * 39 + " moved", "  b" + " " * 39 + " moving"]
    assert status_cmd.running_servers(str(tmp_path / "none"),
                                      {"id": "u0"}) == ""


def test_a_host_that_dies_before_the_engine_notices_is_never_declared_drained():
    # Found on the simulator: Nova refused every move from the dead host
    # ('compute service unavailable'), the refusals counted as tries, the
    # drain ended in maintenance (heartbeat loss ignored there) with the
    # servers on a dead, powered host.
    w = _world(3, 2)
    w.pass_()
    w.compute.stalled.add("compute-0-vm-1")
    _drain(w, "compute-0")
    w.until("compute-0", "draining")
    w.compute.kill("compute-0")          # the reconciler has not seen it
    svc = w.compute.services["compute-0"]
    svc["updated_at"] -= 100             # Nova already calls it down
    rec = w.engine.find("compute-0")
    for _ in range(6):                   # drain passes only
        w.clock.advance(5)
        w.engine.queue.pump()
        w.drain()
        assert w.state("compute-0")[0] == "draining"
    assert w.engine.find("compute-0").id == rec.id
    w.until("compute-0", "evacuated", passes=200)
    assert w.fencer.powered_off == ["compute-0"]
    assert _on(w, "compute-0") == []


def test_the_drains_summary_names_each_server_moved_and_where():
    w = _world(3, 2)
    w.pass_()
    _drain(w, "compute-0")
    w.until("compute-0", "maintenance")
    reason = w.state("compute-0")[1]
    for sid in ("compute-0-vm-0", "compute-0-vm-1"):
        dest = w.compute.servers[sid]["host"]
        assert "%s to %s" % (sid, dest) in reason, reason


def test_a_host_dying_while_nova_still_says_up_is_not_declared_drained():
    # The window before Nova calls a dead compute down (its
    # service_down_time): moves fail, servers are given up on; the drain
    # must not end while no heartbeat came after the last failure.
    w = _world(3, 2)
    w.conf.set_override("stuck_retries", 0, "drain")
    w.pass_()
    w.compute.stalled.add("compute-0-vm-1")
    _drain(w, "compute-0")
    w.until("compute-0", "draining")
    w.compute.kill("compute-0")          # heartbeats stop; Nova: up (8 s)
    from instanceha.drivers.compute.base import ComputeError
    w.compute.fail["live_migrate"] = [ComputeError("migration failed")] * 50
    w.until("compute-0", "evacuated", passes=300)
    assert w.fencer.powered_off == ["compute-0"]
    assert _on(w, "compute-0") == []


def test_a_migration_queued_behind_another_is_never_called_stuck():
    # Found on real Nova: it runs one live migration per compute at a
    # time (max_concurrent_live_migrations = 1), so the drain's second
    # waits 'queued' with no memory figures; it was aborted as stuck.
    from instanceha.engine import drain as drain_mod
    from instanceha.drivers.compute.base import ServerMigration
    w = _world(3, 2)
    w.pass_()
    w.conf.set_override("stuck_timeout", 10, "drain")
    carry = drain_mod.Carry(ctx=w.ctx, host="compute-0")
    rec = w.engine.find("compute-0")
    settings = drain_mod.settings_for(w.ctx)
    queued = [ServerMigration(id="2", server_id="s", status="queued")]
    w.compute.server_migrations = lambda sid: queued
    aborted = []
    w.compute.abort_migration = lambda sid, mid: aborted.append(mid)
    for t in range(0, 100, 5):
        drain_mod.watch(w.ctx, rec, carry, "s", settings, 1000.0 + t)
    assert aborted == [] and carry.stuck == {}
    # Running, its figures frozen: stuck after the timeout, aborted.
    frozen = [ServerMigration(id="2", server_id="s", status="running",
                              memory_remaining=500, disk_remaining=0)]
    w.compute.server_migrations = lambda sid: frozen
    for t in range(100, 125, 5):
        drain_mod.watch(w.ctx, rec, carry, "s", settings, 1000.0 + t)
    assert aborted == ["2"]


def test_a_stuck_migration_is_handled_at_its_deadline_not_at_a_poll():
    # The pass after a send comes within QUICK (the stuck clock starts
    # when a pass sees the copy), and the pass that judges it comes at
    # its deadline: at poll_interval 5 a stuck try was aborted 15 s after
    # its request (first look at +5, judged at the poll after +15).
    from instanceha.engine import drain as drain_mod
    w = _world(3, 1)
    w.conf.set_override("poll_interval", 5, "drain")
    w.conf.set_override("stuck_timeout", 10, "drain")
    w.conf.set_override("stuck_retries", 0, "drain")
    w.pass_()
    w.compute.stalled.add("compute-0-vm-0")
    sent, aborted = [], []
    live, abort = w.compute.live_migrate, w.compute.abort_migration

    def live_migrate(sid, **kw):
        sent.append(w.clock())
        return live(sid, **kw)

    def abort_migration(sid, mid):
        aborted.append(w.clock())
        return abort(sid, mid)
    w.compute.live_migrate = live_migrate
    w.compute.abort_migration = abort_migration
    _drain(w, "compute-0")
    w.until("compute-0", "maintenance", passes=200)
    assert len(sent) == 1 and len(aborted) == 1
    # Seen copying within QUICK of the request (+1 s of the world's step),
    # judged at its deadline (+1 s of the world's step).
    assert aborted[0] - sent[0] <= 10 + drain_mod.QUICK + 2
    assert "not migratable" in w.state("compute-0")[1]


def test_watch_says_when_to_look_again():
    from instanceha.engine import drain as drain_mod
    from instanceha.drivers.compute.base import ServerMigration
    w = _world(3, 2)
    w.pass_()
    w.conf.set_override("stuck_timeout", 10, "drain")
    settings = drain_mod.settings_for(w.ctx)
    carry = drain_mod.Carry(ctx=w.ctx, host="compute-0")
    rec = w.engine.find("compute-0")
    migs = []
    w.compute.server_migrations = lambda sid: migs
    aborted = []
    w.compute.abort_migration = lambda sid, mid: aborted.append(mid)

    def look(status, left, t):
        migs[:] = [ServerMigration(id="7", server_id="s", status=status,
                                   memory_remaining=left, disk_remaining=0)]
        return drain_mod.watch(w.ctx, rec, carry, "s", settings, t)
    assert look("queued", None, 100.0) is None           # at the poll
    assert look("preparing", None, 101.0) == 101.0 + drain_mod.QUICK
    assert look("running", 500, 102.0) == 112.0          # clock starts
    assert look("running", 400, 104.0) == 114.0          # progress
    assert look("running", 400, 110.0) == 114.0          # not yet
    assert aborted == []
    assert look("running", 400, 114.0) == 114.0 + drain_mod.QUICK
    assert aborted == ["7"]
    migs[:] = []
    assert drain_mod.watch(w.ctx, rec, carry, "s", settings, 115.0) is None
    # The pass's wait: the poll, or sooner for the earliest look.
    assert drain_mod.next_pass(settings, 100.0, [None]) == \
        settings.poll_interval
    assert drain_mod.next_pass(settings, 100.0, [None, 103.0, 102.0]) == 2.0
    assert drain_mod.next_pass(settings, 100.0, [99.0]) == drain_mod.MIN_WAIT


def test_a_stuck_server_is_retried_on_another_destination():
    # "retried up to N times on another destination": each retry is aimed
    # at a host its stuck migrations did not go to, while one is left.
    w = _world(4, 1)
    w.conf.set_override("stuck_timeout", 10, "drain")
    w.conf.set_override("stuck_retries", 2, "drain")
    w.pass_()
    sid = "compute-0-vm-0"
    w.compute.stalled.add(sid)
    _drain(w, "compute-0")
    w.until("compute-0", "maintenance", passes=300)
    dests = [m["dest"] for m in w.compute.moves
             if m["server"] == sid and m["type"] == "live-migration"]
    assert len(dests) == 3, dests
    assert sorted(dests) == ["compute-1", "compute-2", "compute-3"], dests
    assert "not migratable" in w.state("compute-0")[1]


def test_retry_destination_skips_tried_hosts_and_other_zones():
    from instanceha.policy import drain_hosts
    from instanceha.policy.facts import HostFacts
    from instanceha.drivers.compute.base import ComputeService, HostCapacity

    def cap(host, used):
        return HostCapacity(host=host, vcpus=8, vcpus_used=0, ram_mb=1000,
                            ram_mb_used=used, disk_gb=100, disk_gb_used=0)
    hosts = {"src": HostFacts("src", zone="az1", capacity=cap("src", 0)),
             "a": HostFacts("a", zone="az1", capacity=cap("a", 600)),
             "b": HostFacts("b", zone="az1", capacity=cap("b", 100)),
             "c": HostFacts("c", zone="az2", capacity=cap("c", 0)),
             "d": HostFacts("d", zone="az1", enabled=False,
                            capacity=cap("d", 0))}
    services = [ComputeService("id-" + h, h, "up",
                               "disabled" if h == "d" else "enabled",
                               False, None, 1.0, hosts[h].zone)
                for h in hosts]
    pick = drain_hosts.retry_destination
    assert pick("src", hosts, services, {"x"}) == "b"     # most free RAM
    assert pick("src", hosts, services, {"b"}) == "a"
    assert pick("src", hosts, services, {"a", "b"}) is None  # c: az2
