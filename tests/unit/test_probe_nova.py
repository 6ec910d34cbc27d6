"""actions.probe_nova: the engine's read of one silent host's own Nova row
is judged as the reconciler judges every row (fsm.nova_row.classify)."""

import types

from instanceha.engine import actions
from instanceha.events import EventKind as E
from instanceha.util.marker import MARKER
from tests.unit import fakes


def _probe(mutate):
    clock = fakes.Clock()
    compute = fakes.FakeCompute(clock, hosts=2, servers_per_host=0)
    mutate(compute.services["compute-1"])
    ctx = types.SimpleNamespace(
        clock=clock, compute=compute,
        conf=types.SimpleNamespace(detection=types.SimpleNamespace(delta=30)))
    record = types.SimpleNamespace(name="compute-1", id="uuid-1")
    return actions.probe_nova(ctx, record)


def test_a_row_reporting_clears_the_host():
    ev = _probe(lambda s: None)
    assert ev.kind is E.HEARTBEAT_OK and ev.source == "nova"
    assert ev.payload.read_at is not None


def test_a_row_nova_calls_down_is_lost():
    ev = _probe(lambda s: s.update(updated_at=s["updated_at"] - 60))
    assert ev.kind is E.HEARTBEAT_LOST
    assert "down" in ev.reason


def test_a_host_an_operator_forced_down_says_so():
    # Not "heartbeat lost": somebody else's forced_down is theirs to undo.
    ev = _probe(lambda s: s.update(forced_down=True,
                                   disabled_reason="rack 12 power work"))
    assert ev.kind is E.FORCED_DOWN
    assert "rack 12 power work" in ev.reason


def test_our_own_forced_down_is_not_an_operators():
    ev = _probe(lambda s: s.update(forced_down=True,
                                   disabled_reason=MARKER + " fenced"))
    assert ev.kind is E.HEARTBEAT_LOST


def test_a_row_of_another_service_is_no_answer():
    ev = _probe(lambda s: s.update(id="uuid-other"))
    assert ev is None
