from instanceha.drivers.compute.base import ComputeService
from instanceha.events import EventKind as E
from instanceha.sources.reconciler import classify


def svc(**kw):
    base = dict(id="u", host="c0", state="up", status="enabled",
                forced_down=False, disabled_reason=None, updated_at=100.0)
    base.update(kw)
    return ComputeService(**base)


def test_up_and_fresh_is_ok():
    assert classify(svc(), 105, 30)[0] is E.HEARTBEAT_OK


def test_nova_down_is_lost():
    kind, reason = classify(svc(state="down"), 105, 30)
    assert kind is E.HEARTBEAT_LOST and "Nova reports the service down" in reason


def test_stale_while_nova_says_up_is_lost():
    kind, reason = classify(svc(), 200, 30)
    assert kind is E.HEARTBEAT_LOST and "Nova still says up" in reason


def test_forced_down_by_us_uses_heartbeat_freshness():
    ours = "instanceha: evacuating 2026-01-01T00:00:00Z"
    assert classify(svc(state="down", forced_down=True,
                        disabled_reason=ours), 105, 30)[0] is E.HEARTBEAT_OK
    assert classify(svc(state="down", forced_down=True,
                        disabled_reason=ours), 200, 30)[0] is E.HEARTBEAT_LOST


def test_forced_down_by_someone_else():
    kind, reason = classify(svc(state="down", forced_down=True,
                                disabled_reason="maintenance by bob"), 105, 30)
    assert kind is E.FORCED_DOWN and "maintenance by bob" in reason


def test_never_reported():
    kind, reason = classify(svc(state="down", updated_at=None), 105, 30)
    assert kind is E.HEARTBEAT_LOST
