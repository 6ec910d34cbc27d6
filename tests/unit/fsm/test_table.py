"""Walk the whole transition table."""

import collections

import pytest

from instanceha.events import Event, EventKind as E
from instanceha.fsm import machine, table
from instanceha.fsm.states import ENTRY_ACTION, State as S


def test_every_pair_is_declared_or_ignored():
    for s in S:
        for k in E:
            declared = bool(machine.rules_for(s, k))
            ignored = (s, k) in table.IGNORED
            assert declared != ignored, (s, k)


def test_every_guard_exists_and_every_rule_is_well_formed():
    for src, kind, guard, dst, reason in table.RULES:
        assert guard in machine.GUARDS, guard
        assert isinstance(src, S) and isinstance(dst, S)
        assert reason


def _graph():
    g = collections.defaultdict(set)
    for src, _, _, dst, _ in table.RULES:
        g[src].add(dst)
    return g


def _reach(g, start):
    seen, todo = {start}, [start]
    while todo:
        for nxt in g[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_state_reachable_from_active():
    assert _reach(_graph(), S.ACTIVE) == set(S)


def test_no_state_is_a_trap():
    g = _graph()
    for s in S:
        assert S.ACTIVE in _reach(g, s), "%s cannot get back to active" % s


def test_undeclared_pair_raises(monkeypatch):
    monkeypatch.setattr(table, "IGNORED", frozenset())
    rec = machine.HostRecord(id="h", state=S.ACTIVE)
    with pytest.raises(machine.UndeclaredTransition):
        machine.step(rec, Event(E.HEARTBEAT_OK, "h", 1.0), machine.Policy())


def test_entry_actions_only_for_states_that_wait_on_a_result():
    for state, action in ENTRY_ACTION.items():
        kinds = {k for (s, k, _, _, _) in table.RULES if s is state}
        assert kinds, state


@pytest.mark.parametrize("state", list(S))
def test_ignored_pairs_change_nothing_but_observations(state):
    p = machine.Policy()
    rec = machine.HostRecord(id="h", state=state, since=5.0, reason="r")
    for k in E:
        if (state, k) not in table.IGNORED:
            continue
        new, actions = machine.step(rec, Event(k, "h", 10.0), p)
        assert actions == []
        assert (new.state, new.since, new.reason) == (state, 5.0, "r")
        assert table.explain_ignored(state, k)


def test_state_diagram_document_is_current():
    import os
    from instanceha.fsm import diagram
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "doc",
                        "states.md")
    with open(path) as f:
        assert f.read() == diagram.render(), (
            "doc/states.md is stale: python -m instanceha.fsm.diagram > "
            "doc/states.md")
