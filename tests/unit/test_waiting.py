"""util.waiting.wait_until: the predicate's answer once true, its last
answer when the budget runs out; never a real sleep here."""

from instanceha.util import waiting


def test_returns_the_first_true_answer():
    now = [0.0]
    answers = iter([None, 0, "ready"])
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s
    assert waiting.wait_until(lambda: next(answers), 10, 0.5,
                              clock=lambda: now[0], sleep=sleep) == "ready"
    assert slept == [0.5, 0.5]


def test_returns_the_last_answer_when_the_budget_runs_out():
    now = [0.0]

    def sleep(s):
        now[0] += s
    assert waiting.wait_until(lambda: [], 2, 0.5, clock=lambda: now[0],
                              sleep=sleep) == []
    assert now[0] == 2.0
