"""util.pool.bounded_map: map's answers, never more than its window of
calls outstanding."""

import concurrent.futures
import threading

import pytest

from instanceha.util import pool as pool_mod


class CountingPool:
    """Runs each call at once in the caller (no threads, no waiting) and
    counts the futures submitted whose result was not yet taken."""

    def __init__(self):
        self.outstanding = 0
        self.most = 0
        self.cancelled = 0

    def submit(self, fn, item):
        pool = self
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(item))
        except Exception as e:   # noqa: BLE001 - as a pool does
            future.set_exception(e)
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)
        result = future.result

        def taken(timeout=None):
            pool.outstanding -= 1
            return result(timeout)
        future.result = taken
        cancel = future.cancel

        def cancelled():
            pool.cancelled += 1
            return cancel()
        future.cancel = cancelled
        return future


def test_results_in_order_with_at_most_window_outstanding():
    pool = CountingPool()
    out = list(pool_mod.bounded_map(pool, lambda x: x * x, range(1000), 8))
    assert out == [x * x for x in range(1000)]
    assert pool.most == 8 and pool.outstanding == 0


def test_an_exception_is_raised_at_its_result_and_the_rest_cancelled():
    pool = CountingPool()

    def fn(x):
        if x == 5:
            raise RuntimeError("BMC 5 unreachable")
        return x
    got = []
    with pytest.raises(RuntimeError, match="BMC 5"):
        for value in pool_mod.bounded_map(pool, fn, range(100), 4):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]
    assert pool.cancelled == 3          # 6, 7, 8 were submitted, not run


def test_with_real_threads_every_item_is_answered():
    lock = threading.Lock()
    running = [0, 0]

    def fn(x):
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        with lock:
            running[0] -= 1
        return -x
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        out = list(pool_mod.bounded_map(pool, fn, range(500),
                                        pool_mod.window_for(4)))
    assert out == [-x for x in range(500)]
    assert running[1] <= 4


def test_a_bad_window_is_refused():
    with pytest.raises(ValueError, match="window"):
        list(pool_mod.bounded_map(CountingPool(), str, [1], 0))
