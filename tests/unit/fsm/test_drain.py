"""The planned drain in the state machine: an operator's drain of a live
host, its end (maintenance or decommission), its cancel, and a death
while draining (the failure path takes what is left)."""

import pytest

from instanceha import conf as conf_pkg
from instanceha.events import DrainRequest, Event, EventKind as E
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


@pytest.mark.parametrize("then,state", [("maintenance", S.MAINTENANCE),
                                        ("decommission", S.DECOMMISSIONED)])
def test_a_finished_drain_ends_as_asked(then, state):
    rec, _ = _draining(then=then)
    new, actions = _step(rec, E.DRAIN_OK, reason="4/4 servers moved")
    assert new.state is state and actions == []
    assert "4/4 servers moved" in new.reason
    # Resumed later: the drained host is re-enabled first.
    back, actions = _step(new, E.OPERATOR_RESUME, at=20.0)
    assert back.state is S.UNDRAINING and actions == [Action.UNDRAIN]
    done, _ = _step(back, E.UNDRAIN_OK, at=21.0, reason="enabled")
    assert done.state is S.ACTIVE and done.drain_then == ""


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
