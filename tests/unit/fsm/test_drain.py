"""The planned drain in the state machine: an operator's drain of a live
host, its end (maintenance or decommission), its cancel, and a death
while draining (the failure path takes what is left)."""

import pytest

from instanceha import conf as conf_pkg
from instanceha.events import (DrainRequest, DrainSummary, Event,
                               EventKind as E, ResumeRequest)
from instanceha.fsm import machine
from instanceha.fsm.states import Action, State as S

P = machine.Policy.from_conf(conf_pkg.make({}))


def _step(rec, kind, at=10.0, **kw):
    return machine.step(rec, Event(kind, "h", at, name="h", **kw), P)


def _draining(then="maintenance", concurrency=None, force=False):
    rec = machine.HostRecord(id="h", name="h")
    new, actions = _step(rec, E.OPERATOR_DRAIN, reason="kernel update",
                         payload=DrainRequest(then=then,
                                              concurrency=concurrency,
                                              force=force))
    return new, actions


def test_a_drain_starts_the_drain_pass_and_keeps_the_request():
    new, actions = _draining(then="decommission", concurrency=3, force=True)
    assert new.state is S.DRAINING and actions == [Action.DRAIN]
    assert "kernel update" in new.reason
    assert (new.drain_then, new.drain_concurrency, new.drain_force) == (
        "decommission", 3, True)


def test_a_finished_drain_ends_in_maintenance_and_resumes_through_undrain():
    rec, _ = _draining()
    new, actions = _step(rec, E.DRAIN_OK, reason="4/4 servers moved",
                         payload=DrainSummary(moved=("a", "b")))
    assert new.state is S.MAINTENANCE and actions == []
    assert "4/4 servers moved" in new.reason
    assert new.drain_moved == ("a", "b")
    # Resumed later: the drained host is re-enabled first (smoke test),
    # then, when asked, its servers move back.
    back, actions = _step(new, E.OPERATOR_RESUME, at=20.0,
                          payload=ResumeRequest(fail_back=True))
    assert back.state is S.UNDRAINING and actions == [Action.UNDRAIN]
    assert back.from_maintenance and back.fail_back
    moving, actions = _step(back, E.UNDRAIN_OK, at=21.0, reason="enabled")
    assert moving.state is S.FAILING_BACK and actions == [Action.FAIL_BACK]
    done, _ = _step(moving, E.FAIL_BACK_OK, at=30.0, reason="2/2 back")
    assert done.state is S.ACTIVE and done.drain_then == ""
    assert done.drain_moved == () and not done.fail_back
    # Without fail-back: active once re-enabled.
    plain, _ = _step(new, E.OPERATOR_RESUME, at=20.0)
    assert not plain.fail_back
    assert _step(plain, E.UNDRAIN_OK, at=21.0)[0].state is S.ACTIVE


def test_a_failed_fail_back_leaves_the_host_active_and_says_why():
    rec = machine.HostRecord(id="h", name="h", state=S.FAILING_BACK,
                             drain_moved=("a",), fail_back=True)
    new, _ = _step(rec, E.FAIL_BACK_FAILED, reason="a: SHUTOFF")
    assert new.state is S.ACTIVE and "a: SHUTOFF" in new.reason


def test_decommission_after_a_complete_drain_or_maintenance_with_why():
    rec, _ = _draining(then="decommission")
    new, actions = _step(rec, E.DRAIN_OK, reason="2/2 servers moved",
                         payload=DrainSummary(moved=("a", "b")))
    assert new.state is S.DECOMMISSIONING
    assert actions == [Action.DECOMMISSION]
    done, _ = _step(new, E.DECOMMISSION_OK, reason="service deleted")
    assert done.state is S.DECOMMISSIONED
    # Nothing brings a decommissioned host back: its service is gone.
    assert _step(done, E.OPERATOR_RESUME)[0].state is S.DECOMMISSIONED
    refused, _ = _step(new, E.DECOMMISSION_FAILED,
                       reason="1 server(s) still on the host")
    assert refused.state is S.MAINTENANCE
    assert "still on the host" in refused.reason


def test_cancel_and_refusal_put_the_host_back():
    rec, _ = _draining()
    new, actions = _step(rec, E.OPERATOR_RESUME)
    assert new.state is S.UNDRAINING and actions == [Action.UNDRAIN]
    new, actions = _step(rec, E.DRAIN_FAILED, reason="preflight refused")
    assert new.state is S.UNDRAINING and "preflight refused" in new.reason


def test_a_host_that_dies_while_draining_takes_the_failure_path():
    rec, _ = _draining()
    for kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN, E.AGENT_SILENT):
        new, _ = _step(rec, kind)
        assert new.state is S.SUSPECT


def test_maintenance_without_a_drain_resumes_straight_to_active():
    rec = machine.HostRecord(id="h", name="h", state=S.MAINTENANCE)
    new, actions = _step(rec, E.OPERATOR_RESUME)
    assert new.state is S.ACTIVE and actions == []


def test_a_drain_is_refused_where_a_recovery_runs():
    for state in (S.FENCING, S.EVACUATING, S.RECOVERING):
        rec = machine.HostRecord(id="h", name="h", state=state)
        new, actions = _step(rec, E.OPERATOR_DRAIN,
                             payload=DrainRequest())
        assert new.state is state and actions == []


def test_a_bad_request_is_refused_naming_it():
    with pytest.raises(ValueError, match="then must be"):
        DrainRequest(then="reboot")
    with pytest.raises(ValueError, match="concurrency"):
        DrainRequest(concurrency=0)
