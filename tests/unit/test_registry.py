"""Each action is declared once (fsm.states.ACTIONS) and bound to one
runner (engine.registry); every table about actions is read from it."""

import inspect

from instanceha.engine import registry
from instanceha.fsm import states


def test_every_action_is_declared_once_and_has_one_runner():
    assert set(states.ACTIONS) == set(states.Action)
    assert set(registry.RUNNERS) == set(states.ACTIONS)


def test_the_tables_about_actions_are_read_from_the_declarations():
    for action, spec in states.ACTIONS.items():
        if spec.started_by is not None:
            assert states.ENTRY_ACTION[spec.started_by] is action
            assert spec.gave_up in spec.results
        else:
            assert action not in states.ENTRY_ACTION.values()
        assert states.RESULTS[action] == (spec.results, spec.gave_up)
        assert (action in states.ORDINARY_ACTIONS) is spec.ordinary
        assert (action in states.PASS_ACTIONS) is spec.passes
        assert spec.journal_kind == action.value


def test_an_action_run_in_passes_takes_the_carry():
    for action, spec in states.ACTIONS.items():
        params = inspect.signature(registry.RUNNERS[action]).parameters
        assert "carry" in params or not spec.passes, action
