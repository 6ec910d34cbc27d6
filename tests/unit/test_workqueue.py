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


def _waiters(q):
    return len(q._cond._waiters)


def _until(cond, what, budget=10.0):
    import time
    end = time.monotonic() + budget
    while not cond():
        assert time.monotonic() < end, "timed out waiting for " + what
        time.sleep(0.001)


def _worker_behind_the_delayer(q):
    """A delayer thread waiting on the queue's condition first, then one
    worker waiting in get(): a single notify() would reach the delayer."""
    import threading
    delayer = threading.Thread(target=q.run_delayer, daemon=True)
    delayer.start()
    _until(lambda: _waiters(q) == 1, "the delayer to wait")
    got = []
    worker = threading.Thread(target=lambda: got.append(q.get(timeout=5)),
                              daemon=True)
    worker.start()
    _until(lambda: _waiters(q) == 2, "the worker to wait")
    return worker, got


def test_a_key_added_wakes_a_worker_even_when_the_delayer_waits_first():
    """The delayer thread and the workers wait on one condition, and a
    notify() wakes the longest waiter. When that was the delayer, it only
    pumped and slept again: the key stayed queued with every worker asleep
    until some other key was added (11 s in the real engine: a suspect
    host's events and timers not applied while Nova's API failed)."""
    import time
    q = WorkQueue(time.monotonic)
    worker, got = _worker_behind_the_delayer(q)
    q.add("compute-7")
    worker.join(10)
    q.shut_down()
    assert got == ["compute-7"]


def test_a_key_readded_during_processing_wakes_a_worker_when_done():
    import time
    q = WorkQueue(time.monotonic)
    q.add("a")
    assert q.get() == "a"
    q.add("a")                       # dirty while processing
    worker, got = _worker_behind_the_delayer(q)
    q.done("a")
    worker.join(10)
    q.shut_down()
    assert got == ["a"]


def test_an_urgent_key_is_taken_before_ordinary_ones_queued_earlier():
    q = WorkQueue(Clock())
    q.add("evacuating-1")
    q.add("evacuating-2")
    q.add("suspect", urgent=True)
    assert [q.get(timeout=0) for _ in range(3)] == [
        "suspect", "evacuating-1", "evacuating-2"]


def test_a_waiting_key_added_urgent_moves_ahead_once():
    q = WorkQueue(Clock())
    q.add("a")
    q.add("b")
    q.add("b", urgent=True)
    q.add("b")                      # still urgent: one entry
    assert [q.get(timeout=0) for _ in range(2)] == ["b", "a"]
    assert q.get(timeout=0) is None and len(q) == 0


def test_ordinary_keys_never_take_the_workers_kept_for_urgent_ones():
    q = WorkQueue(Clock(), ordinary_limit=1)
    q.add("pass-1")
    q.add("pass-2")
    assert q.get(timeout=0) == "pass-1"
    # The one ordinary slot is taken: pass-2 waits, an urgent key goes.
    assert q.get(timeout=0) is None
    q.add("dying", urgent=True)
    assert q.get(timeout=0) == "dying"
    q.done("dying")
    assert q.get(timeout=0) is None
    q.done("pass-1")
    assert q.get(timeout=0) == "pass-2"
    assert not q.settled()
    q.done("pass-2")
    assert q.settled()


def test_a_key_made_urgent_while_processed_comes_back_urgent():
    q = WorkQueue(Clock(), ordinary_limit=1)
    q.add("h")
    assert q.get(timeout=0) == "h"
    q.add("other")
    q.add("h", urgent=True)         # an event for it while it runs
    q.done("h")
    assert q.get(timeout=0) == "h"  # ahead of "other", and not counted
    assert q.get(timeout=0) == "other"   # as ordinary: other may run


def test_a_key_backing_off_is_handed_to_no_worker_before_its_time():
    """The back-off is the queue's alone (issue 36 part 5): news added for
    a key while it backs off waits for the back-off, added while it is
    processed or not."""
    clock = Clock()
    q = WorkQueue(clock, base_delay=2, max_delay=60)
    q.add("a")
    assert q.get() == "a"
    q.add("a", urgent=True)        # news while it is processed
    assert q.add_rate_limited("a") == 2
    q.done("a")
    assert q.holding("a") and q.get(timeout=0) is None
    q.add("a", urgent=True)        # news while it backs off
    clock.now += 1.9
    q.pump()
    assert q.get(timeout=0) is None
    clock.now += 0.1
    q.pump()
    assert not q.holding("a") and q.get(timeout=0) == "a"
    q.done("a")
    q.hold("a", 5)
    q.forget("a")                  # its work went well: not held back
    q.add("a")
    assert q.get(timeout=0) == "a"
