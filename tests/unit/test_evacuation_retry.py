"""A destination dying mid-evacuation: the simulator's Nova behaviour, the
classification of per-server failures, and the evacuator's bounded retry."""

import pytest

from instanceha.sim import SimCloud
from tests.unit.sim.conftest import Clock


# -- the simulator: what Nova 34 does when the destination dies --------------

def _sim(**kw):
    clock = Clock()
    params = dict(hosts=4, servers_per_host=2, report_interval=1.0,
                  service_down_time=4.0, schedule_time=0.05,
                  evacuation_time=0.5, boot_time=2.0, clock=clock)
    params.update(kw)
    return SimCloud(**params), clock


def _fence(cloud, host):
    cloud.power(host, on=False)
    cloud.update_service(cloud.hosts[host].service_uuid, forced_down=True,
                         status="disabled", disabled_reason="instanceha: t")


def _migs(cloud, sid):
    return [(m.status, m.dest_compute) for m in
            sorted(cloud.list_migrations(instance_uuid=sid),
                   key=lambda m: m.id)]


def test_sim_destination_dead_at_cast_never_takes_the_rebuild():
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(10)
    s = cloud.get_server(sid)
    # Stuck for good: still on its source, rebuilding; no destination.
    assert (s.host, s.vm_state, s.task_state) == (
        "compute-0", "active", "rebuilding")
    assert _migs(cloud, sid) == [("accepted", None)]
    dead = [h for h in cloud.hosts.values() if not h.alive]
    assert [h.name for h in dead] == ["compute-0", "compute-1"]
    events = cloud.instance_actions(sid)[0]["events"]
    assert [(e["event"], e["result"]) for e in events] == [
        ("rebuild_server", "Success")]


def test_sim_destination_dying_during_the_rebuild_stays_pre_migrating():
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(10)
    s = cloud.get_server(sid)
    assert (s.host, s.task_state) == ("compute-0", "rebuilding")
    assert _migs(cloud, sid) == [("pre-migrating", "compute-1")]
    events = cloud.instance_actions(sid)[0]["events"]
    assert [(e["event"], e["host"], e["result"]) for e in events] == [
        ("rebuild_server", "conductor", "Success"),
        ("compute_rebuild_instance", "compute-1", None)]


def test_sim_second_evacuate_uses_the_oldest_accepted_migration():
    """Nova accepts evacuating a server stuck in 'rebuilding'; its conductor
    then works on the first evacuation's migration, and the new one stays
    'accepted' until the source host cleans up."""
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)                     # compute-1 seen down now
    cloud.evacuate(sid)
    clock.advance(2)
    s = cloud.get_server(sid)
    assert s.host not in ("compute-0", "compute-1") and s.status == "ACTIVE"
    assert _migs(cloud, sid) == [("done", s.host), ("accepted", None)]
    assert cloud.double_rebuilds == []


def test_sim_stopped_server_rebuilt_after_a_dead_destination_stays_stopped():
    cloud, clock = _sim()
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.servers[sid].vm_state = "stopped"
    _fence(cloud, "compute-0")
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)
    clock.advance(2)
    assert cloud.get_server(sid).status == "SHUTOFF"


def test_sim_returning_destination_runs_its_stale_rebuild():
    """The rebuild cast to a dead compute waits in its queue: when that
    host comes back, it fails the migration and sets the server (rebuilt
    elsewhere meanwhile) to error — what real Nova 34 did on the test bed."""
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)
    clock.advance(2)
    dest = cloud.get_server(sid).host
    cloud.power("compute-1", on=False)
    cloud.power("compute-1", on=True)
    clock.advance(3)
    s = cloud.get_server(sid)
    assert (s.host, s.vm_state, s.task_state) == (dest, "error",
                                                  "rebuilding")
    assert _migs(cloud, sid)[0] == ("failed", "compute-1")


def test_sim_stale_rebuild_while_another_runs_is_a_double_evacuation():
    cloud, clock = _sim(evacuation_time=5.0)
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="cast")
    cloud.evacuate(sid)
    clock.advance(6)
    cloud.evacuate(sid)                  # rebuilding on another host now
    clock.advance(0.1)
    cloud.power("compute-1", on=False)
    cloud.power("compute-1", on=True)
    clock.advance(2.5)                   # back while the retry still runs
    cloud.now()
    assert [d[1] for d in cloud.double_rebuilds] == [sid]


def test_sim_instance_actions_over_http():
    from instanceha.sim import nova_api
    cloud, clock = _sim()
    _fence(cloud, "compute-0")
    sid = cloud.list_servers(host="compute-0")[0].id
    cloud.kill_next_destinations(1, stage="claim")
    cloud.evacuate(sid)
    clock.advance(1)
    api = nova_api.NovaAPI(cloud, None)
    listed = api.instance_actions(sid, [], (2, 62))["instanceActions"]
    assert [a["action"] for a in listed] == ["evacuate"]
    shown = api.instance_actions(sid, [listed[0]["request_id"]], (2, 62))
    hosts = [e["host"] for e in shown["instanceAction"]["events"]]
    assert hosts == ["conductor", "compute-1"]
    old = api.instance_actions(sid, [listed[0]["request_id"]], (2, 51))
    assert "host" not in old["instanceAction"]["events"][0]
    with pytest.raises(nova_api.ApiFault):
        api.instance_actions(sid, ["req-nope"], (2, 62))


# -- classification (pure) ----------------------------------------------------

from instanceha.drivers.compute import base as cb            # noqa: E402
from instanceha.engine import evacuator, failures   # noqa: E402
from instanceha.engine import evac_run, evac_state            # noqa: E402
from instanceha.engine.progress import ProgressBoard         # noqa: E402
from instanceha.events import EventKind as E                 # noqa: E402
from tests.unit.test_engine import World                     # noqa: E402
from tests.unit import fakes  # noqa: E402


def _svc(host, state="up", forced=False):
    return cb.ComputeService(id="id-" + host, host=host, state=state,
                             status="enabled", forced_down=forced,
                             disabled_reason=None, updated_at=0.0)


@pytest.mark.parametrize("error, status", [
    (cb.NotFound("gone", 404), "gone"),
    (cb.Conflict("Instance is locked", 409), "refused"),
    (cb.Conflict("vm_state building", 409), "refused"),
    (cb.ComputeError("HTTP 403: policy", 403), "refused"),
    (cb.ComputeError("HTTP 503", 503), "retry"),
    (cb.ComputeError("HTTP 500", 500), "retry"),
    (cb.ComputeError("POST /servers: ConnectFailure"), "retry"),
])
def test_request_errors_classified(error, status):
    assert failures.request_error(error).status == status


def test_rebuild_failures_classified():
    nvh = "No valid host was found. There are not enough hosts available."
    assert failures.rebuild_failed(nvh).status == "no_capacity"
    v = failures.rebuild_failed("Build aborted", "compute-7",
                                _svc("compute-7", "down"))
    assert v.retryable and "destination compute-7 went down" in v.reason
    assert failures.rebuild_failed(
        "MessagingTimeout: Timed out waiting for a reply").retryable
    # A rebuild failing on a live host fails again: an operator looks.
    v = failures.rebuild_failed("Image 42 could not be found", "compute-7",
                                _svc("compute-7"))
    assert v.status == "failed" and not v.retryable
    assert failures.rebuild_failed(None).status == "failed"


def _judge(dest=None, services=(), candidates=(), events=None, age=0.0,
           stall=60.0, via="migration"):
    """``candidates``: the hosts schedulable when the request was sent,
    every other host of ``services`` then was not."""
    unschedulable = frozenset(s.host for s in services) - set(candidates)
    return failures.in_flight("src", dest, via,
                              {s.host: s for s in services},
                              unschedulable, events, age, stall)


def test_in_flight_known_destination_retried_only_once_forced_down():
    assert _judge("b", [_svc("b")]) == (None, None)            # rebuilding
    verdict, waiting = _judge("b", [_svc("b", "down")])
    assert verdict is None and "once that host is fenced" in waiting
    verdict, waiting = _judge("b", [_svc("b", "down", forced=True)])
    assert verdict.retryable and waiting is None
    assert "destination b (from the migration)" in verdict.reason


def test_in_flight_unknown_destination_needs_stall_conductor_and_fencing():
    sent = [cb.ActionEvent("rebuild_server", "ctl", True,
                           "Success")]
    down_b = [_svc("b", "down"), _svc("c")]
    fenced_b = [_svc("b", "down", forced=True), _svc("c")]
    cands = ("b", "c")
    # Before stall_timeout, or without instance actions: wait, silently.
    assert _judge(None, fenced_b, cands, sent, age=30) == (None, None)
    assert _judge(None, fenced_b, cands, None, age=300) == (None, None)
    # The conductor has not sent it yet (or failed): wait.
    pending = [cb.ActionEvent("rebuild_server", "ctl", False)]
    assert _judge(None, fenced_b, cands, pending, age=300) == (None, None)
    # Every host it could have gone to is up: a slow live one; wait.
    verdict, waiting = _judge(None, [_svc("b"), _svc("c")], cands, sent, 300)
    assert verdict is None and "is up" in waiting
    # A candidate is down but not fenced yet: wait for it.
    verdict, waiting = _judge(None, down_b, cands, sent, age=300)
    assert verdict is None and "waiting for b" in waiting
    # Down since it was sent, and fenced: send again.
    verdict, _ = _judge(None, fenced_b, cands, sent, age=300)
    assert verdict.retryable and "forced down: b" in verdict.reason
    # A host already down when it was sent cannot have been chosen.
    verdict, waiting = _judge(None, fenced_b, ("c",), sent, age=300)
    assert verdict is None


def test_in_flight_suspects_from_the_hosts_unschedulable_at_the_send():
    sent = [cb.ActionEvent("rebuild_server", "ctl", True, "Success")]
    fenced = [_svc("b", "down", forced=True), _svc("c"),
              _svc("d", "down")]
    services = {s.host: s for s in fenced}
    # d was down at the send (could not be chosen); b was up: b alone.
    verdict, _ = failures.in_flight("src", None, "migration", services,
                                    frozenset({"d"}), sent, 300, 60)
    assert verdict.retryable and verdict.reason.endswith("forced down: b")
    # A host not known at the send (added since) may have been chosen:
    # it is waited for like any other until fenced.
    verdict, waiting = failures.in_flight("src", None, "migration",
                                          services, frozenset(), sent, 300,
                                          60)
    assert verdict is None and "waiting for d" in waiting
    # A request found in Nova (sent by an earlier process): who could
    # take it is not known, so no host is suspected: it is waited for.
    verdict, waiting = failures.in_flight("src", None, "migration",
                                          services, None, sent, 300, 60)
    assert verdict is None and "is up: waiting" in waiting


def test_in_flight_destination_from_a_compute_event():
    events = [cb.ActionEvent("rebuild_server", "ctl", True,
                             "Success"),
              cb.ActionEvent("compute_rebuild_instance", "b", False)]
    verdict, _ = _judge(None, [_svc("b", "down", forced=True)], (), events,
                        age=1)
    assert verdict.retryable and "instance action" in verdict.reason


def test_destination_from_a_rebuild_scheduled_notification():
    facts = {"event": "instance.rebuild_scheduled", "publisher_host": "b",
             "at": 10.0}
    assert failures.destination_from_notification(facts, 9.0) == "b"
    assert failures.destination_from_notification(facts, 11.0) is None
    assert failures.destination_from_notification(
        dict(facts, event="instance.update"), 9.0) is None


# -- the retry loop, on the fakes -----------------------------------------

class _Board(ProgressBoard):
    """Each wait lets one second of the world pass instead of sleeping."""

    def __init__(self, tick):
        super().__init__()
        self._tick = tick

    def wait(self, since_generation, timeout):
        self._tick()
        return self.generation()


class _Storm:
    """compute-1 dead and isolated; destinations that die are forced down
    ``fence_after`` seconds later (their own recovery, which the engine
    runs beside this evacuation). Records what each request found."""

    def __init__(self, fence_after=10.0, servers=2, hosts=4, **conf):
        self.w = World(hosts=hosts, servers=servers)
        self.w.pass_()
        for k, v in dict(dict(stall_timeout=30, server_retry_delay=2,
                              server_timeout=600), **conf).items():
            self.w.conf.set_override(k, v, "evacuation")
        self.c = self.w.compute
        self.fence_after = fence_after
        self.died = {}
        self.requests = []
        self.w.ctx.board = _Board(self.tick)
        real = self.c.evacuate

        def evacuate(sid):
            # What Nova had when the request came: the previous request's
            # destination must be forced down by now (never two at once).
            busy = [m["dest"] for m in self.c.migrations
                    if m["server"] == sid and m["status"] in (
                        "accepted", "pre-migrating") and m["dest"]]
            self.requests.append((sid, [
                self.c.services[d]["forced_down"] for d in busy]))
            real(sid)
        self.c.evacuate = evacuate
        real_kill = self.c.kill

        def kill(host):
            self.died.setdefault(host, self.w.clock())
            real_kill(host)
        self.c.kill = kill
        self.w.fencer.power_off(self.w.ctx.inventory["compute-1"])
        svc = self.c.force_down("uuid-1", "instanceha: evacuating x")
        rec = self.w.engine.find("compute-1")
        self.rec = rec.__class__(**dict(
            rec.__dict__, fenced_at=self.w.clock() - 1,
            written_at=svc.updated_at))

    def tick(self):
        self.w.clock.advance(1.0)
        self.c.heartbeat()
        for host, at in self.died.items():
            svc = self.c.services[host]
            if self.w.clock() - at >= self.fence_after \
                    and not svc["forced_down"]:
                svc.update(forced_down=True, status="disabled")

    def run(self):
        return fakes.evacuate_to_end(self.w.ctx, self.rec)

    def rows(self, sid):
        return [(r["status"], r["dest_host"])
                for r in self.w.journal.evacuations() if r["server_id"] == sid]


def test_destination_dying_during_rebuild_is_retried_once_fenced():
    st = _Storm(fence_after=10)
    st.c.doomed.append(["claim", 1])
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert not out.failed and out.retried == {"compute-1-vm-0": 1}
    dest = out.done["compute-1-vm-0"]
    assert dest not in ("compute-1", "compute-0") and \
        st.c.services[dest]["alive"]
    assert st.rows("compute-1-vm-0") == [("retry", None), ("done", dest)]
    detail = [r["detail"] for r in st.w.journal.evacuations()
              if r["status"] == "retry"][0]
    assert "destination compute-0 (from the migration) went down" in detail
    # Sent again only once the first destination was forced down, and
    # not before the fencing delay.
    assert [r for r in st.requests if r[0] == "compute-1-vm-0"] == [
        ("compute-1-vm-0", []), ("compute-1-vm-0", [True])]
    assert st.c.servers["compute-1-vm-0"]["task_state"] is None


def test_destination_dead_when_sent_is_retried_after_stall_and_fencing():
    st = _Storm(fence_after=5, stall_timeout=30)
    st.c.doomed.append(["cast", 1])
    start = st.w.clock()
    out = st.run()
    assert not out.failed and out.retried == {"compute-1-vm-0": 1}
    # The migration never named a destination: the retry waited for
    # stall_timeout, then for every possible destination to be fenced.
    retry_at = [r["finished_at"] for r in st.w.journal.evacuations()
                if r["status"] == "retry"][0]
    assert retry_at - start >= 30
    detail = [r["detail"] for r in st.w.journal.evacuations()
              if r["status"] == "retry"][0]
    assert "no compute took the rebuild" in detail and "compute-0" in detail
    # Nova's conductor reused the first migration; the second stays
    # accepted, and the server is done all the same.
    statuses = [m["status"] for m in st.c.migrations
                if m["server"] == "compute-1-vm-0"]
    assert statuses == ["done", "accepted"]
    assert out.done["compute-1-vm-0"] not in ("compute-0", "compute-1")


def test_unknown_destination_without_instance_actions_is_not_retried():
    st = _Storm(fence_after=5, stall_timeout=30, server_timeout=120)
    st.c.rebuild_events = lambda sid: None       # a driver that cannot tell
    st.c.doomed.append(["cast", 1])
    out = st.run()
    assert out.retried == {}
    assert "migration still accepted after 120s" in \
        out.failed["compute-1-vm-0"]
    assert len([r for r in st.requests if r[0] == "compute-1-vm-0"]) == 1


def test_retries_are_bounded_per_server():
    st = _Storm(fence_after=3, hosts=6, servers=1, server_retries=2)
    st.c.doomed.append(["claim", 3])
    out = st.run()
    # Its destination died three times: two retries, then it failed.
    assert out.retried == {"compute-1-vm-0": 2}
    assert out.failed["compute-1-vm-0"].startswith(
        "gave up after 3 failed attempts ([evacuation] server_retries = 2)")
    assert [s for s, _ in st.rows("compute-1-vm-0")] == [
        "retry", "retry", "retry"]
    # The budget is in the journal: the next attempt of the host (after
    # a restart, say) does not send it again.
    sent = len(st.requests)
    result = fakes.evacuate_to_end(st.w.ctx, st.rec, evacuator.evacuate)
    assert result.kind == E.EVACUATE_FAILED and "gave up" in result.reason
    assert len(st.requests) == sent


def test_stopped_server_retried_ends_stopped():
    st = _Storm(fence_after=3)
    st.c.servers["compute-1-vm-0"].update(vm_state="stopped",
                                          status="SHUTOFF")
    st.c.doomed.append(["claim", 1])
    out = st.run()
    assert "compute-1-vm-0" in out.done
    assert st.c.servers["compute-1-vm-0"]["status"] == "SHUTOFF"


def test_failed_request_taken_by_nova_after_all_is_not_sent_twice():
    st = _Storm()
    real = st.c.evacuate

    def flaky(sid):
        real(sid)
        if sid == "compute-1-vm-0" and len(st.requests) == 1:
            raise cb.ComputeError("HTTP 504 from the proxy", 504)
    st.c.complete = False
    st.c.evacuate = flaky
    st.c.on_evacuate = None

    def finish_later():
        # Nova completes what it took, a few seconds on.
        for m in st.c.migrations:
            if m["status"] == "accepted" and m["dest"] and \
                    st.w.clock() - m["created_at"] > 3:
                m["status"] = "done"
                st.c.servers[m["server"]].update(host=m["dest"],
                                                 task_state=None)
    tick = st.tick
    st.w.ctx.board._tick = lambda: (tick(), finish_later())
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len([r for r in st.requests if r[0] == "compute-1-vm-0"]) == 1


def test_restart_resumes_a_stuck_server_without_sending_it_again():
    st = _Storm(fence_after=10_000)              # never fenced: stays stuck
    st.c.doomed.append(["claim", 1])
    st.w.conf.set_override("server_timeout", 20, "evacuation")
    first = st.run()
    assert "compute-1-vm-0" in first.failed and first.retried == {}
    # A new process: the server still rebuilding is waited for, not sent.
    st.fence_after = 0
    st.w.conf.set_override("server_timeout", 600, "evacuation")
    sent_before = len(st.requests)
    st.c.servers["compute-1-vm-0"]["task_state"] = "rebuilding"
    out = st.run()
    assert out.done.keys() == {"compute-1-vm-0"}
    sends = st.requests[sent_before:]
    assert sends == [("compute-1-vm-0", [True])]  # after its dest's fencing
    assert out.retried == {"compute-1-vm-0": 1}


def test_evacuate_action_succeeds_when_retries_save_every_server():
    st = _Storm(fence_after=5)
    st.c.doomed.append(["claim", 1])
    result = fakes.evacuate_to_end(st.w.ctx, st.rec, evacuator.evacuate)
    assert result.kind == E.EVACUATE_OK, result.reason
    assert "1 sent again after a failure" in result.reason
    assert result.detail["retried"] == 1


def test_nova_driver_reads_rebuild_events_from_instance_actions(tmp_path):
    from instanceha import conf as conf_pkg
    from instanceha.drivers.compute.nova import NovaDriver
    from instanceha.sim import SimServer
    cloud = SimCloud(hosts=3, servers_per_host=1, schedule_time=0.0,
                     evacuation_time=0.0)
    srv = SimServer(cloud).start()
    try:
        clouds, _ = srv.write_client_files(str(tmp_path))
        nova = NovaDriver(conf_pkg.make({"DEFAULT": {
            "cloud": "sim", "clouds_file": clouds}}))
        sid = cloud.list_servers(host="compute-0")[0].id
        assert nova.rebuild_events(sid) == []
        _fence(cloud, "compute-0")
        cloud.kill_next_destinations(1, stage="claim")
        nova.evacuate(sid)
        events = nova.rebuild_events(sid)
        assert events == [
            cb.ActionEvent("rebuild_server", "conductor", True,
                           "Success"),
            cb.ActionEvent("compute_rebuild_instance", "compute-1", False)]
    finally:
        srv.stop()


def test_destination_named_by_a_notification_needs_no_stall_timeout():
    st = _Storm(fence_after=5, stall_timeout=3600)
    st.c.doomed.append(["cast", 1])
    board = st.w.ctx.board

    def scheduled(sid, dest):
        # What the conductor publishes: nova-conductor:<destination>.
        board.record(sid, at=st.w.clock(), event="instance.rebuild_scheduled",
                     publisher_host="compute-0", host="compute-1",
                     state="active", task_state="rebuilding")
    real = st.c.evacuate

    def evacuate(sid):
        real(sid)
        if len(st.requests) == 1:
            scheduled(sid, "compute-0")
    st.c.evacuate = evacuate
    start = st.w.clock()
    out = st.run()
    assert not out.failed and out.retried == {"compute-1-vm-0": 1}
    retry = [r for r in st.w.journal.evacuations() if r["status"] == "retry"]
    assert "destination compute-0 (from the notification)" in \
        retry[0]["detail"]
    assert retry[0]["finished_at"] - start < 60


def test_failed_request_taken_and_finished_at_once_is_not_sent_twice():
    """The request was applied and the answer lost (a 500 from a proxy),
    and Nova rebuilt the server before the check: found on its new host,
    it is done. Sending it again made Nova refuse ('Compute service of
    <new host> is still in use') and the host failed (found by the Nova
    fault test)."""
    st = _Storm()
    real = st.c.evacuate

    def flaky(sid):
        real(sid)
        if sid == "compute-1-vm-0" and len(st.requests) == 1:
            raise cb.ComputeError("HTTP 500: applied, the answer lost", 500)
    st.c.evacuate = flaky
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert out.failed == {} and out.retried == {}
    assert len([r for r in st.requests if r[0] == "compute-1-vm-0"]) == 1
    new_host = st.c.servers["compute-1-vm-0"]["host"]
    assert new_host != "compute-1"
    # The journal says what happened: the one request was taken.
    assert st.rows("compute-1-vm-0") == [("done", new_host)]


def test_failed_requests_back_off_and_do_not_spend_the_rebuild_retries():
    """Nova's API failing the evacuate request three times running: each
    failure is checked and sent again after a back-off doubling from
    server_retry_delay, without spending the server's retries (which
    are for failed rebuilds). Found by the real-Nova fault test: four
    refused requests within 2 s failed the host, the last of them
    applied by Nova all the same."""
    st = _Storm()
    real = st.c.evacuate
    refused = []

    def flaky(sid):
        if sid == "compute-1-vm-0" and len(refused) < 3:
            refused.append(st.w.clock())
            raise cb.ComputeError("HTTP 503: injected", 503)
        real(sid)
    st.c.evacuate = flaky
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert out.failed == {}
    gaps = [b - a for a, b in zip(refused, refused[1:])]
    assert len(gaps) == 2 and gaps[0] >= 2 and gaps[1] >= 4, gaps
    statuses = [s for s, _ in st.rows("compute-1-vm-0")]
    assert statuses == ["request_failed"] * 3 + ["done"], statuses


def test_requests_failing_past_the_budget_hand_over_to_the_action_back_off():
    """More failed requests in a row than server_retries: the action
    raises (the engine backs off and runs it again); the server is not
    declared failed."""
    st = _Storm()
    real = st.c.evacuate

    def down(sid):
        if sid == "compute-1-vm-0":
            raise cb.ComputeError("HTTP 503: injected", 503)
        real(sid)
    st.c.evacuate = down
    with pytest.raises(cb.ComputeError) as e:
        st.run()
    assert "compute-1-vm-0" in str(e.value) and "in a row" in str(e.value)


def _late(st, sid, lands_after):
    """The first request of ``sid`` gets no answer (the client timed out)
    and, if ``lands_after`` is not None, reaches Nova that many seconds
    later (queued in a proxy or the API's backlog). Returns the times of
    the requests sent for ``sid`` as the client saw them."""
    real = st.c.evacuate
    sent, late = [], []

    def evacuate(s):
        if s == sid:
            sent.append(st.w.clock())
            if len(sent) == 1:
                if lands_after is not None:
                    late.append(st.w.clock() + lands_after)
                raise cb.ComputeError("POST /servers/%s/action: "
                                      "ConnectTimeout" % s, unanswered=True)
        real(s)
    st.c.evacuate = evacuate
    tick = st.tick

    def ticked():
        tick()
        if late and st.w.clock() >= late[0]:
            late.pop()
            real(sid)
    st.w.ctx.board._tick = ticked
    return sent


def test_unanswered_request_landing_late_is_not_sent_twice():
    """Found in CI: the fault proxy held an evacuate request 3 s, the
    client gave up at 2 s, the check at 2.5 s found nothing and sent the
    server again; then the first request landed: two evacuations of one
    server (Nova does not refuse a server already rebuilding). A request
    without an answer is not checked or sent again before
    [evacuation] unanswered_request_wait."""
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    sent = _late(st, sid, lands_after=8)
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len([m for m in st.c.migrations if m["server"] == sid]) == 1
    assert len(sent) == 1, sent
    # The one row: the request that seemed lost was taken.
    assert st.rows(sid) == [("done", st.c.servers[sid]["host"])]


def test_unanswered_request_lost_for_good_is_sent_after_the_wait():
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    sent = _late(st, sid, lands_after=None)
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len(sent) == 2 and sent[1] - sent[0] >= 20, sent
    assert len([m for m in st.c.migrations if m["server"] == sid]) == 1


def test_past_the_budget_an_unanswered_request_is_waited_for_first():
    """The request that spends the budget got no answer: the action does
    not hand over to the engine's back-off (which may be shorter than the
    wait, and its next run would send the server again) before the wait
    is over and Nova is seen not to have taken it."""
    st = _Storm(unanswered_request_wait=30, server_retries=0)
    sid = "compute-1-vm-0"
    real = st.c.evacuate

    def lost(s):
        if s == sid:
            raise cb.ComputeError("POST: ConnectTimeout", unanswered=True)
        real(s)
    st.c.evacuate = lost
    start = st.w.clock()
    with pytest.raises(cb.ComputeError) as e:
        st.run()
    assert "got no answer and Nova did not take it" in str(e.value)
    assert st.w.clock() - start >= 30


def _predecessor_left_a_row(age):
    """A previous process journalled a request of compute-1-vm-0 ``age``
    seconds ago (after the fencing) and stopped; Nova has none of it."""
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    row = st.w.journal.evacuation_requested(st.rec.id, "compute-1", sid,
                                            st.rec.fenced_at + 0.5)
    st.w.clock.advance(age - 0.5)
    st.c.heartbeat()
    return st, sid, row


def test_restart_waits_for_a_request_its_predecessor_left_unanswered():
    """A process journalled a request and stopped before Nova answered
    it: the request may still land. The next process checks and sends
    the server only once unanswered_request_wait has passed since."""
    st, sid, row = _predecessor_left_a_row(age=5)
    real = st.c.evacuate
    sent = []

    def evacuate(s):
        if s == sid:
            sent.append(st.w.clock())
        real(s)
    st.c.evacuate = evacuate
    start = st.w.clock()
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len(sent) == 1 and sent[0] - start >= 15, (sent, start)
    rows = {r["id"]: r for r in st.w.journal.evacuations()}
    assert rows[row]["status"] == "interrupted"
    assert "had not taken it" in rows[row]["detail"]
    assert st.rows(sid)[-1][0] == "done"


def test_restart_waits_for_a_row_that_looks_old_on_a_skewed_clock():
    """Hole 7 of issue 21: the row's time is the predecessor's clock. Its
    stamp says 30.5 s ago, but that clock may have run behind ours (the
    request was sent just before it stopped, and may still reach
    nova-api): the wait counts from when this process first read the row,
    so the server is sent only once unanswered_request_wait has passed on
    our clock."""
    st, sid, row = _predecessor_left_a_row(age=30.5)
    real = st.c.evacuate
    sent = []

    def evacuate(s):
        if s == sid:
            sent.append(st.w.clock())
        real(s)
    st.c.evacuate = evacuate
    start = st.w.clock()
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len(sent) == 1 and sent[0] - start >= 19, (sent, start)
    rows = {r["id"]: r for r in st.w.journal.evacuations()}
    assert rows[row]["status"] == "interrupted"


def test_a_row_this_process_wrote_is_waited_for_from_its_own_stamp():
    """A request this process sent and left open (the action raised and
    runs again) is not waited for twice: its stamp is on our clock."""
    st, sid, row = _predecessor_left_a_row(age=0.5)
    st.w.ctx.rows_seen[row] = st.rec.fenced_at + 0.5
    st.w.clock.advance(30)
    st.c.heartbeat()
    start = st.w.clock()
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    sent = [r for r in st.requests if r[0] == sid]
    assert len(sent) == 1 and st.w.clock() - start < 15
    rows = {r["id"]: r for r in st.w.journal.evacuations()}
    assert rows[row]["status"] == "interrupted"


def test_restart_finds_the_unanswered_request_landed_meanwhile():
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    st.w.journal.evacuation_requested(st.rec.id, "compute-1", sid,
                                      st.rec.fenced_at + 0.5)
    real = st.c.evacuate
    landed = []
    tick = st.w.ctx.board._tick

    def ticked():
        tick()
        if not landed and st.w.clock() >= st.rec.fenced_at + 5:
            landed.append(st.w.clock())
            real(sid)        # the predecessor's request reaches Nova
    st.w.ctx.board._tick = ticked
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    # The one request is the predecessor's, landed late: none sent here.
    assert landed and [r for r in st.requests if r[0] == sid] == [
        (sid, [])]
    assert len([m for m in st.c.migrations if m["server"] == sid]) == 1


def test_host_back_during_the_wait_closes_the_unanswered_row():
    """The lost host reports back while an unanswered request is waited
    for: nothing more is sent, and its journal row is closed (not left
    'requested' for ever)."""
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    _late(st, sid, lands_after=None)
    tick = st.w.ctx.board._tick

    def ticked():
        tick()
        if st.w.clock() - st.rec.fenced_at >= 8:
            st.c.boot("compute-1")
    st.w.ctx.board._tick = ticked
    out = st.run()
    assert out.returned
    assert out.failed[sid] == "not evacuated: the host reported back"
    [row] = [r for r in st.w.journal.evacuations() if r["server_id"] == sid]
    assert row["status"] == "request_failed" and row["finished_at"]
    assert "the host reported back" in row["detail"]


def test_a_row_stamped_before_the_fencing_on_another_clock_is_not_lost():
    """Hole 7 of issue 21: the fencing time and a request row may come
    from different replicas. A request sent after the fencing by a replica
    whose clock runs 5 s behind the one that fenced is stamped before
    fenced_at: it is this recovery's all the same (its row id is above
    the last row written before the proof of death), so it is waited for,
    not forgotten and sent again at once."""
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    st.rec = st.rec.__class__(**dict(st.rec.__dict__, evac_floor=0))
    row = st.w.journal.evacuation_requested(st.rec.id, "compute-1", sid,
                                            st.rec.fenced_at - 5)
    real = st.c.evacuate
    sent = []

    def evacuate(s):
        if s == sid:
            sent.append(st.w.clock())
        real(s)
    st.c.evacuate = evacuate
    start = st.w.clock()
    out = st.run()
    assert sorted(out.done) == ["compute-1-vm-0", "compute-1-vm-1"]
    assert len(sent) == 1 and sent[0] - start >= 19, (sent, start)
    rows = {r["id"]: r for r in st.w.journal.evacuations()}
    assert rows[row]["status"] == "interrupted"


def test_an_earlier_recoverys_rows_stay_out_by_row_id():
    """Rows written before this proof of death (an earlier recovery's
    spent retries) are not this recovery's, whatever their stamps say."""
    st = _Storm(unanswered_request_wait=20)
    sid = "compute-1-vm-0"
    old = st.w.journal.evacuation_requested(st.rec.id, "compute-1", sid,
                                            st.rec.fenced_at + 100)
    st.w.journal.evacuation_finished(old, st.rec.fenced_at + 101, "retry")
    st.rec = st.rec.__class__(**dict(st.rec.__dict__, evac_floor=old))
    run = evac_run.Run(st.w.ctx, st.rec, evac_state.Outcome(2), {})
    assert run.retries[sid] == 0 and run.open_rows == {}
