"""Behaviour of the state machine, driven with explicit times."""

from instanceha.events import Event, EventKind as E
from instanceha import conf as conf_pkg
from instanceha.fsm import machine
from instanceha.fsm.states import Action as A, State as S

P = machine.Policy(grace_period=10, retry_backoff=30, retry_backoff_max=100,
                   max_attempts=3, cleanup_check_interval=5)


def run(events, policy=P, rec=None):
    rec = rec or machine.HostRecord(id="h", name="c0")
    out = []
    for kind, at, kw in events:
        rec, actions = machine.step(rec, Event(kind, "h", at, **kw), policy)
        out.append((rec.state, actions))
    return rec, out


def ev(kind, at, **kw):
    return (kind, at, kw)


def test_full_recovery_cycle():
    rec, out = run([
        ev(E.HEARTBEAT_LOST, 100, reason="down"),
        ev(E.TICK, 105),
        ev(E.TICK, 110),
        ev(E.FENCE_OK, 111),
        ev(E.ISOLATE_OK, 112),
        ev(E.EVACUATE_OK, 120, reason="5/5 evacuated"),
        ev(E.HEARTBEAT_OK, 200, detail={"updated_at": 199.5}),
        ev(E.CLEANUP_PENDING, 201, reason="2 migrations not completed"),
        ev(E.TICK, 203),
        ev(E.TICK, 206),
        ev(E.CLEANUP_CONFIRMED, 207, reason="re-enabled"),
    ])
    assert out == [
        (S.SUSPECT, []), (S.SUSPECT, []), (S.FENCING, [A.FENCE]),
        (S.FENCED, [A.ISOLATE]), (S.EVACUATING, [A.EVACUATE]),
        (S.EVACUATED, []), (S.RECOVERING, [A.CHECK_CLEANUP]),
        (S.RECOVERING, []), (S.RECOVERING, []),
        (S.RECOVERING, [A.CHECK_CLEANUP]), (S.ACTIVE, []),
    ]
    assert rec.reason == "re-enabled" and rec.since == 207
    assert not rec.isolated and rec.attempts == 0 and not rec.busy


def test_heartbeat_back_within_grace_clears_suspect():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.HEARTBEAT_OK, 5),
                    ev(E.TICK, 50)])
    assert [s for s, _ in out] == [S.SUSPECT, S.ACTIVE, S.ACTIVE]


def test_threshold_holds_fencing_and_says_why():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0),
                    ev(E.TICK, 20, cluster_ok=False, reason="4 of 6 down")])
    assert out[-1] == (S.SUSPECT, [])
    assert "4 of 6 down" in rec.reason
    rec, out = run([ev(E.TICK, 21)], rec=rec)
    assert out[-1] == (S.FENCING, [A.FENCE])


def test_fence_failure_is_failed_and_nothing_evacuated():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.TICK, 10),
                    ev(E.FENCE_FAILED, 11, reason="BMC unreachable"),
                    ev(E.TICK, 100), ev(E.HEARTBEAT_LOST, 101)])
    assert out[-1] == (S.FAILED, [])
    assert "BMC unreachable" in rec.reason
    assert not any(A.EVACUATE in a for _, a in out)
    # The host comes back by itself: never isolated, so it is active again.
    rec, out = run([ev(E.HEARTBEAT_OK, 200)], rec=rec)
    assert out[-1] == (S.ACTIVE, [])


def test_no_capacity_backs_off_then_gives_up():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.TICK, 10),
                    ev(E.FENCE_OK, 11), ev(E.ISOLATE_OK, 12),
                    ev(E.EVACUATE_NO_CAPACITY, 13, reason="no valid host")])
    assert rec.state is S.PENDING and rec.retry_at == 13 + 30
    rec, out = run([ev(E.TICK, 42)], rec=rec)
    assert out[-1] == (S.PENDING, [])
    # Each retry proves the host dead again before evacuating.
    rec, out = run([ev(E.TICK, 43), ev(E.FENCE_OK, 43.5),
                    ev(E.ISOLATE_OK, 43.6), ev(E.EVACUATE_NO_CAPACITY, 44)],
                   rec=rec)
    assert [s for s, _ in out] == [S.FENCING, S.FENCED, S.EVACUATING,
                                   S.PENDING]
    assert out[0][1] == [A.FENCE]
    assert rec.retry_at == 44 + 60
    rec, out = run([ev(E.TICK, 104), ev(E.FENCE_OK, 104.5),
                    ev(E.ISOLATE_OK, 104.6),
                    ev(E.EVACUATE_NO_CAPACITY, 105)], rec=rec)
    assert rec.state is S.FAILED and rec.attempts == 3
    assert "3 attempts" in rec.reason


def test_kdump_from_suspect_host_skips_power_off():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_action="evacuate", kdump_fence_delay=30)
    rec, out = run([ev(E.HEARTBEAT_OK, 0), ev(E.HEARTBEAT_LOST, 5),
                    ev(E.TICK, 16), ev(E.KDUMP, 17)], policy=p)
    assert out[2] == (S.SUSPECT, [])     # kdump window holds fencing
    assert out[3] == (S.SUSPECT, [])     # the proof is recorded...
    assert machine.next_wakeup(rec, p) == 17   # ...and decided at once
    rec, out = run([ev(E.TICK, 17)], policy=p, rec=rec)
    assert out[-1] == (S.FENCED, [A.ISOLATE])


def test_kdump_before_nova_notices_then_heartbeat_lost():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_action="evacuate")
    rec, out = run([ev(E.HEARTBEAT_OK, 0), ev(E.KDUMP, 1),
                    ev(E.HEARTBEAT_LOST, 6), ev(E.TICK, 7),
                    ev(E.KDUMP, 11), ev(E.TICK, 11)], policy=p)
    # A message from before the loss is not enough; the next one (the
    # sender repeats every few seconds while dumping) is.
    assert [s for s, _ in out] == [S.ACTIVE, S.SUSPECT, S.SUSPECT, S.SUSPECT,
                                   S.SUSPECT, S.FENCED]


def test_old_kdump_is_no_proof_after_host_was_seen_alive():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_timeout=600)
    rec, out = run([ev(E.KDUMP, 1), ev(E.HEARTBEAT_OK, 50),
                    ev(E.HEARTBEAT_LOST, 60), ev(E.TICK, 61),
                    ev(E.TICK, 70)], policy=p)
    assert [s for s, _ in out][-2:] == [S.SUSPECT, S.FENCING]


def test_kdump_wait_holds_fencing_while_dumping():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_action="wait", kdump_timeout=60)
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.KDUMP, 1),
                    ev(E.TICK, 20), ev(E.TICK, 62)], policy=p)
    assert [s for s, _ in out] == [S.SUSPECT, S.SUSPECT, S.SUSPECT,
                                   S.FENCING]


def test_stale_result_does_not_clear_busy_of_another_action():
    rec = machine.HostRecord(id="h", state=S.RECOVERING, busy=True)
    new, actions = machine.step(rec, Event(E.FENCE_OK, "h", 1), P)
    assert new.busy and actions == []


def test_suspend_with_expiry_and_resume_of_isolated_host():
    rec, _ = run([ev(E.HEARTBEAT_LOST, 0), ev(E.TICK, 10), ev(E.FENCE_OK, 11),
                  ev(E.ISOLATE_OK, 12)])
    rec, out = run([ev(E.OPERATOR_SUSPEND, 13, reason="hands off",
                       detail={"until": 50}),
                    ev(E.TICK, 20), ev(E.TICK, 50)], rec=rec)
    # Not evacuated straight away: the host gets its boot time and grace
    # period to report, then is proven dead again first.
    assert [s for s, _ in out] == [S.SUSPENDED, S.SUSPENDED, S.PENDING]
    assert out[-1][1] == [] and rec.retry_at == 50 + 300 + 10
    rec, out = run([ev(E.TICK, 359), ev(E.TICK, 360)], rec=rec)
    assert out == [(S.PENDING, []), (S.FENCING, [A.FENCE])]


def _isolated(at=12):
    rec, _ = run([ev(E.HEARTBEAT_LOST, 0), ev(E.TICK, 10),
                  ev(E.FENCE_OK, 11),
                  ev(E.ISOLATE_OK, at, detail={"written_at": at})])
    return rec


def test_returned_host_is_never_evacuated_on_suspension_expiry():
    rec = _isolated()
    rec, out = run([ev(E.EVACUATE_OK, 20),
                    ev(E.HEARTBEAT_OK, 30, detail={"updated_at": 29}),
                    ev(E.OPERATOR_SUSPEND, 31, detail={"until": 60}),
                    ev(E.TICK, 61)], rec=rec)
    assert [s for s, _ in out] == [S.EVACUATED, S.RECOVERING, S.SUSPENDED,
                                   S.RECOVERING]
    assert out[-1][1] == [A.CHECK_CLEANUP]


def test_returned_host_is_never_evacuated_on_maintenance_resume():
    rec = _isolated()
    rec, out = run([ev(E.EVACUATE_FAILED, 20, reason="one server failed"),
                    ev(E.OPERATOR_MAINTENANCE, 21),
                    ev(E.HEARTBEAT_OK, 40, detail={"updated_at": 39}),
                    ev(E.OPERATOR_RESUME, 41)], rec=rec)
    assert [s for s, _ in out] == [S.FAILED, S.MAINTENANCE, S.MAINTENANCE,
                                   S.RECOVERING]


def test_our_own_write_does_not_count_as_a_return():
    rec = _isolated(at=12)
    rec, out = run([ev(E.EVACUATE_OK, 20),
                    ev(E.HEARTBEAT_OK, 21, detail={"updated_at": 12}),
                    ev(E.HEARTBEAT_OK, 22)], rec=rec)      # no timestamp
    assert [s for s, _ in out] == [S.EVACUATED, S.EVACUATED, S.EVACUATED]
    rec, out = run([ev(E.OPERATOR_SUSPEND, 23),
                    ev(E.OPERATOR_RESUME, 24), ev(E.TICK, 24 + 310)],
                   rec=rec)
    assert out[-2:] == [(S.PENDING, []), (S.FENCING, [A.FENCE])]


def test_pending_host_that_came_back_is_recovered_not_evacuated():
    rec = _isolated()
    rec, out = run([ev(E.EVACUATE_NO_CAPACITY, 20),
                    ev(E.HEARTBEAT_OK, 30, detail={"updated_at": 29}),
                    ev(E.TICK, 100)], rec=rec)
    assert out[-2] == (S.RECOVERING, [A.CHECK_CLEANUP])


def test_kdump_proof_respects_the_threshold():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_action="evacuate")
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.KDUMP, 1),
                    ev(E.TICK, 1, cluster_ok=False, reason="3 of 4 dead")],
                   policy=p)
    assert out[-1] == (S.SUSPECT, [])
    assert "3 of 4 dead" in rec.reason


def test_maintenance_ignores_heartbeat_loss():
    rec, out = run([ev(E.OPERATOR_MAINTENANCE, 0, reason="BIOS"),
                    ev(E.HEARTBEAT_LOST, 1), ev(E.TICK, 100),
                    ev(E.OPERATOR_RESUME, 200)])
    assert [s for s, _ in out] == [S.MAINTENANCE] * 3 + [S.ACTIVE]


def test_external_force_down_starts_recovery():
    rec, out = run([ev(E.FORCED_DOWN, 0, reason="operator tool"),
                    ev(E.TICK, 10)])
    assert out[-1] == (S.FENCING, [A.FENCE])


def test_next_wakeup():
    rec, _ = run([ev(E.HEARTBEAT_LOST, 100)])
    assert machine.next_wakeup(rec, P) == 110
    assert machine.next_wakeup(machine.HostRecord(id="x"), P) is None


def test_a_failed_host_comes_back_only_on_a_heartbeat_newer_than_its_loss():
    # Found by the Prometheus drill: an agent-detected host whose fence
    # failed went back to active on a reconcile row read before Nova
    # noticed the death (its updated_at still fresh), was suspected and
    # fenced again, failed again: a loop.
    import dataclasses as dc
    from instanceha.events import ServiceReport
    p = machine.Policy.from_conf(conf_pkg.make({}))
    r = machine.HostRecord(id="h", name="h", nova_updated=100.0)
    r, _ = machine.step(r, Event(E.HEARTBEAT_LOST, "h", 10.0), p)
    assert r.state is S.SUSPECT and r.lost_updated == 100.0
    r = dc.replace(r, state=S.FAILED)
    stale = Event(E.HEARTBEAT_OK, "h", 20.0,
                  payload=ServiceReport(updated_at=100.0))
    assert machine.step(r, stale, p)[0].state is S.FAILED
    fresh = Event(E.HEARTBEAT_OK, "h", 30.0,
                  payload=ServiceReport(updated_at=112.0))
    assert machine.step(r, fresh, p)[0].state is S.ACTIVE


def test_only_timed_states_ever_have_a_timer():
    # The engine's tick looks only at records in machine.TIMED.
    import itertools
    from instanceha.fsm.machine import HostRecord
    p = machine.Policy()
    times = [None, 5.0, 100.0]
    for state in S:
        for lost, kdump, retry, until in itertools.product(times, repeat=4):
            rec = HostRecord(id="u", name="c", state=state, since=0.0,
                             heartbeat_ok=lost is None, lost_at=lost,
                             kdump_at=kdump, kdump_first_at=kdump,
                             retry_at=retry, until=until)
            if state not in machine.TIMED:
                assert machine.next_wakeup(rec, p) is None, (state, rec)
    # ...and each timed state does have one, given its time.
    assert machine.next_wakeup(HostRecord(
        id="u", name="c", state=S.SUSPECT, since=0.0, heartbeat_ok=False,
        lost_at=5.0), p) is not None


def test_heartbeat_back_after_the_grace_period_does_not_claim_within():
    # Held past the grace period (here by the storm threshold), then back.
    rec, _ = run([ev(E.HEARTBEAT_LOST, 0),
                  ev(E.TICK, 20, cluster_ok=False, reason="4 of 6 down"),
                  ev(E.HEARTBEAT_OK, 25)])
    assert rec.state is S.ACTIVE
    assert rec.reason == ("heartbeat back after the grace period (the host "
                          "was held, never fenced)")
