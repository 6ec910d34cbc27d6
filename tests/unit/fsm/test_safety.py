"""Safety decisions of the state machine (issue: never touch a host that
should not be touched), driven with explicit times."""

from instanceha.events import EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.states import Action as A, State as S

from tests.unit.fsm.test_machine import ev, run as _run

OURS = "instanceha: evacuating 2026-11-23T10:00:00Z"


def run(events, policy, rec=None):
    return _run(events, policy=policy, rec=rec)


# -- 1. a kdump message delays the power-off, it never replaces it ------------

KDUMP = machine.Policy(grace_period=10, kdump_enabled=True, kdump_timeout=5,
                       kdump_max_dump=100)


def test_default_kdump_action_is_fence_after_dump():
    assert machine.Policy().kdump_action == "fence_after_dump"


def test_one_stray_packet_from_a_suspect_host_does_not_skip_fencing():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.KDUMP, 1),
                    ev(E.TICK, 1), ev(E.TICK, 11)], KDUMP)
    assert S.FENCED not in [s for s, _ in out]
    assert out[-1] == (S.FENCING, [A.FENCE])
    assert "dump is over" in rec.reason


def test_power_off_waits_while_the_dump_runs_then_happens():
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.KDUMP, 1), ev(E.KDUMP, 4),
                    ev(E.KDUMP, 8), ev(E.TICK, 11), ev(E.KDUMP, 12),
                    ev(E.TICK, 16)], KDUMP)
    assert [s for s, _ in out] == [S.SUSPECT] * 7
    assert "powering off once the dump is over" in rec.reason
    assert machine.next_wakeup(rec, KDUMP) == 17       # 5 s after the last
    rec, out = run([ev(E.TICK, 17)], KDUMP, rec)
    assert out == [(S.FENCING, [A.FENCE])]
    assert "dump is over" in rec.reason


def test_a_sender_that_never_stops_holds_fencing_only_max_dump_time():
    events = [ev(E.HEARTBEAT_LOST, 0)]
    for t in range(1, 100, 2):
        events += [ev(E.KDUMP, t), ev(E.TICK, t)]
    rec, out = run(events, KDUMP)
    assert all(s is S.SUSPECT for s, _ in out)
    assert machine.next_wakeup(rec, KDUMP) == 101      # first message + 100
    rec, out = run([ev(E.KDUMP, 101), ev(E.TICK, 101)], KDUMP, rec)
    assert out[-1] == (S.FENCING, [A.FENCE])
    assert "max_dump_time" in rec.reason


def test_forged_packet_for_a_live_host_changes_nothing_lasting():
    rec, out = run([ev(E.HEARTBEAT_OK, 0), ev(E.KDUMP, 1), ev(E.TICK, 30),
                    ev(E.HEARTBEAT_OK, 31)], KDUMP)
    assert [s for s, _ in out] == [S.ACTIVE, S.SUSPECT, S.SUSPECT, S.ACTIVE]
    assert all(a == [] for _, a in out)


def test_evacuate_without_power_off_only_when_opted_in():
    p = machine.Policy(grace_period=10, kdump_enabled=True,
                       kdump_action="evacuate")
    rec, out = run([ev(E.HEARTBEAT_LOST, 0), ev(E.KDUMP, 1),
                    ev(E.TICK, 1)], p)
    assert out[-1] == (S.FENCED, [A.ISOLATE])
    assert "action = evacuate" in rec.reason


# -- 2. a host found isolated with no journal: held, then decided ---------------

def _adopted(written=100.0):
    """As engine._adopt_from_nova leaves it: pending, its boot time and
    grace to report, our own last write as the floor of a return."""
    return machine.HostRecord(id="h", name="c0", state=S.PENDING,
                              isolated=True, heartbeat_ok=False,
                              written_at=written, retry_at=410.0)


def test_adopted_host_that_reports_again_goes_to_the_cleanup_check():
    p = machine.Policy()
    rec, out = run([ev(E.HEARTBEAT_OK, 101, detail={"updated_at": 100.0}),
                    ev(E.TICK, 102),
                    ev(E.HEARTBEAT_OK, 111, detail={"updated_at": 110.0})],
                   p, _adopted())
    # Our own write's timestamp is not a heartbeat; the next one is.
    assert out == [(S.PENDING, []), (S.PENDING, []),
                   (S.RECOVERING, [A.CHECK_CLEANUP])]


def test_adopted_host_still_booting_is_not_fenced_before_its_time():
    p = machine.Policy()
    rec, out = run([ev(E.HEARTBEAT_LOST, 140), ev(E.TICK, 141),
                    ev(E.TICK, 409)], p, _adopted())
    assert [s for s, _ in out] == [S.PENDING] * 3
    rec, out = run([ev(E.TICK, 410)], p, rec)
    assert out == [(S.FENCING, [A.FENCE])]


# -- 3. a host its operator disabled is theirs --------------------------------

def _disabled(reason="RAID swap"):
    return {"status": "disabled", "disabled_reason": reason,
            "forced_down": False}


def test_host_disabled_by_operator_is_not_fenced_by_default():
    p = machine.Policy(grace_period=10)
    rec, out = run([ev(E.HEARTBEAT_OK, 0, detail=_disabled()),
                    ev(E.HEARTBEAT_LOST, 5, detail=_disabled()),
                    ev(E.TICK, 20), ev(E.TICK, 500)], p)
    assert [s for s, _ in out] == [S.ACTIVE, S.SUSPECT, S.SUSPECT, S.SUSPECT]
    assert all(a == [] for _, a in out)
    assert rec.reason == ("not recovering: disabled by operator: RAID swap "
                          "([policy] recover_disabled_hosts = false)")


def test_disabled_without_reason_and_by_notification_count_too():
    p = machine.Policy(grace_period=10)
    rec, out = run([ev(E.FORCED_DOWN, 0, detail={"disabled": True,
                                                 "disabled_reason": None}),
                    ev(E.TICK, 20)], p)
    assert out[-1] == (S.SUSPECT, [])
    assert "disabled by operator: no reason given" in rec.reason


def test_our_own_marker_is_not_an_operator_disable_and_enable_clears_it():
    p = machine.Policy(grace_period=10)
    rec, _ = run([ev(E.HEARTBEAT_OK, 0, detail=_disabled(OURS))], p)
    assert rec.operator_disabled is None
    rec, _ = run([ev(E.HEARTBEAT_OK, 1, detail=_disabled())], p, rec)
    assert rec.operator_disabled == "RAID swap"
    rec, _ = run([ev(E.HEARTBEAT_OK, 2, detail=_disabled(OURS))], p, rec)
    assert rec.operator_disabled == "RAID swap"      # kept under our marker
    rec, _ = run([ev(E.HEARTBEAT_OK, 3, detail={"status": "enabled"})], p,
                 rec)
    assert rec.operator_disabled is None


def test_host_disabled_by_operator_recovered_when_allowed():
    p = machine.Policy(grace_period=10, recover_disabled_hosts=True)
    rec, out = run([ev(E.HEARTBEAT_LOST, 5, detail=_disabled()),
                    ev(E.TICK, 20)], p)
    assert out[-1] == (S.FENCING, [A.FENCE])
    assert rec.operator_disabled == "RAID swap"      # restored at the end


# -- 4. leaving maintenance or a suspension starts a fresh observation -------

RESUME = machine.Policy(grace_period=10, resume_boot_time=120)


def test_resume_from_maintenance_gives_boot_time_and_grace():
    rec, out = run([ev(E.OPERATOR_MAINTENANCE, 0), ev(E.HEARTBEAT_LOST, 1),
                    ev(E.OPERATOR_RESUME, 200), ev(E.TICK, 200)], RESUME)
    assert out[-2:] == [(S.ACTIVE, []), (S.ACTIVE, [])]
    assert rec.lost_at is None and rec.heartbeat_ok
    rec, out = run([ev(E.HEARTBEAT_LOST, 201), ev(E.TICK, 212),
                    ev(E.TICK, 329)], RESUME, rec)
    assert [s for s, _ in out] == [S.SUSPECT, S.SUSPECT, S.SUSPECT]
    assert machine.next_wakeup(rec, RESUME) == 200 + 120 + 10
    rec, out = run([ev(E.TICK, 330)], RESUME, rec)
    assert out == [(S.FENCING, [A.FENCE])]


def test_suspension_expiry_gives_boot_time_and_grace():
    rec, out = run([ev(E.OPERATOR_SUSPEND, 0, detail={"until": 50}),
                    ev(E.HEARTBEAT_LOST, 1), ev(E.TICK, 50),
                    ev(E.HEARTBEAT_LOST, 51), ev(E.TICK, 61)], RESUME)
    assert [s for s, _ in out] == [S.SUSPENDED, S.SUSPENDED, S.ACTIVE,
                                   S.SUSPECT, S.SUSPECT]
    rec, out = run([ev(E.TICK, 180)], RESUME, rec)
    assert out == [(S.FENCING, [A.FENCE])]


def test_resumed_isolated_host_that_reports_is_never_fenced():
    rec = machine.HostRecord(id="h", name="c0", state=S.FAILED,
                             isolated=True, heartbeat_ok=False, fenced_at=10,
                             written_at=11)
    rec, out = run([ev(E.OPERATOR_RESUME, 100),
                    ev(E.HEARTBEAT_OK, 150, detail={"updated_at": 149})],
                   RESUME, rec)
    assert out == [(S.PENDING, []), (S.RECOVERING, [A.CHECK_CLEANUP])]


def test_plain_heartbeat_return_from_failed_has_no_boot_hold():
    rec = machine.HostRecord(id="h", name="c0", state=S.FAILED,
                             heartbeat_ok=False)
    rec, _ = run([ev(E.HEARTBEAT_OK, 100)], RESUME, rec)
    assert rec.state is S.ACTIVE and rec.hold_until is None


# -- 6. a return is judged on Nova's clock ----------------------------------------

def test_return_judged_against_our_write_on_novas_clock_not_local_time():
    """Local clock 100 s ahead of Nova's: fenced at local 1000, our
    force-down written at Nova's 905; a heartbeat at Nova's 950 is back."""
    p = machine.Policy(grace_period=10)
    rec, _ = run([ev(E.HEARTBEAT_LOST, 985), ev(E.TICK, 995),
                  ev(E.FENCE_OK, 1000),
                  ev(E.ISOLATE_OK, 1005, detail={"written_at": 905}),
                  ev(E.EVACUATE_OK, 1010)], p)
    rec, out = run([ev(E.HEARTBEAT_OK, 1050, detail={"updated_at": 904}),
                    ev(E.HEARTBEAT_OK, 1051, detail={"updated_at": 950})],
                   p, rec)
    assert out == [(S.EVACUATED, []), (S.RECOVERING, [A.CHECK_CLEANUP])]


def test_a_new_fencing_forgets_the_write_of_the_last_recovery():
    p = machine.Policy(grace_period=10)
    rec = machine.HostRecord(id="h", name="c0", state=S.ACTIVE,
                             written_at=500.0)
    rec, _ = run([ev(E.HEARTBEAT_LOST, 985), ev(E.TICK, 995)], p, rec)
    assert rec.state is S.FENCING and rec.written_at is None
    assert machine.returned_floor(rec) == float("-inf")
    rec, _ = run([ev(E.FENCE_OK, 1000)], p, rec)
    assert machine.returned_floor(rec) == 1000


# -- found in review ----------------------------------------------------------

def test_operator_enabling_a_host_again_gives_it_boot_time():
    p = machine.Policy(grace_period=10, resume_boot_time=120)
    rec, out = run([ev(E.HEARTBEAT_OK, 0, detail=_disabled("BIOS")),
                    ev(E.HEARTBEAT_LOST, 40, detail=_disabled("BIOS")),
                    ev(E.TICK, 100),
                    ev(E.HEARTBEAT_LOST, 3600, detail={"status": "enabled"}),
                    ev(E.TICK, 3601), ev(E.TICK, 3729)], p)
    assert all(a == [] for _, a in out)
    assert rec.state is S.SUSPECT and rec.operator_disabled is None
    rec, out = run([ev(E.TICK, 3730)], p, rec)
    assert out == [(S.FENCING, [A.FENCE])]


def test_suspending_again_replaces_the_length():
    p = machine.Policy()
    rec, out = run([ev(E.OPERATOR_SUSPEND, 0, reason="a",
                       detail={"until": 3600}),
                    ev(E.OPERATOR_SUSPEND, 10, reason="b",
                       detail={"until": 7200}),
                    ev(E.TICK, 3600)], p)
    assert rec.state is S.SUSPENDED and rec.until == 7200
    rec, out = run([ev(E.OPERATOR_SUSPEND, 20, reason="c")], p, rec)
    assert rec.until is None and rec.reason == "suspended by operator: c"
    assert machine.next_wakeup(rec, p) is None


def test_pending_retry_waits_while_the_cluster_is_held():
    rec = machine.HostRecord(id="h", name="c0", state=S.PENDING,
                             isolated=True, heartbeat_ok=False, retry_at=50)
    rec, out = run([ev(E.TICK, 60, cluster_ok=False,
                       reason="3 of 4 look dead")], machine.Policy(), rec)
    assert out == [(S.PENDING, [])] and "3 of 4 look dead" in rec.reason
    rec, out = run([ev(E.TICK, 61)], machine.Policy(), rec)
    assert out == [(S.FENCING, [A.FENCE])]
