"""A thread pool's map with a bounded number of calls outstanding.

``ThreadPoolExecutor.map`` submits every item at once: for a cloud of
20,000 hosts, 20,000 futures (each with its lock, condition and work
item: some 15 objects the garbage collector tracks) live until the last
read ends, which for a fencing audit takes minutes. Every full
collection walks them, and the engine's decisions wait for it (measured
at 20,000 hosts: 300,000 of the 400,000 objects collections walked, and
full collections of 200-400 ms while hosts were being fenced).
"""

import collections
import itertools


def bounded_map(pool, fn, items, window):
    """``pool.map(fn, items)`` with at most ``window`` calls submitted
    whose result was not yet taken: results in the items' order, and a
    call's exception raised when its result is reached (as ``map``)."""
    if window < 1:
        raise ValueError("window must be at least 1, not %r" % (window,))
    it = iter(items)
    pending = collections.deque(pool.submit(fn, item)
                                for item in itertools.islice(it, window))
    try:
        while pending:
            result = pending.popleft().result()
            for item in itertools.islice(it, 1):
                pending.append(pool.submit(fn, item))
            yield result
    finally:
        for future in pending:          # closed early: nothing more runs
            future.cancel()


def window_for(workers):
    """Calls kept outstanding for ``workers`` threads: enough that none
    idles while the oldest result is taken."""
    return 4 * max(1, workers)
