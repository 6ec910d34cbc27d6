from instanceha.engine.workqueue import WorkQueue, ShutDown

import pytest


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_duplicate_adds_merge():
    q = WorkQueue(Clock())
    q.add("a"); q.add("a"); q.add("b")
    assert len(q) == 2
    assert q.get() == "a" and q.get() == "b"


def test_key_never_processed_twice_at_once():
    q = WorkQueue(Clock())
    q.add("a")
    assert q.get() == "a"
    q.add("a")                     # re-add while processing: held back
    assert q.get(timeout=0) is None
    q.add("a")                     # merges with the held-back one
    q.done("a")
    assert q.get() == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_rate_limited_backoff_doubles_to_cap_and_forget_resets():
    clock = Clock()
    q = WorkQueue(clock, base_delay=1, max_delay=5)
    delays = [q.add_rate_limited("a") for _ in range(5)]
    assert delays == [1, 2, 4, 5, 5]
    q.forget("a")
    assert q.add_rate_limited("a") == 1


def test_delayed_key_released_by_pump_at_its_time():
    clock = Clock()
    q = WorkQueue(clock)
    q.add_after("a", 10)
    assert q.pump() == 10 and len(q) == 0
    clock.now += 10
    assert q.pump() is None and q.get(timeout=0) == "a"


def test_shutdown_wakes_getters():
    q = WorkQueue(Clock())
    q.shut_down()
    with pytest.raises(ShutDown):
        q.get()
