"""Polling a condition with a time budget: :func:`wait_until` (for the
demo and the benchmarks, which watch a running engine from outside)."""

import time


def wait_until(pred, timeout, step=0.05, clock=time.monotonic,
               sleep=time.sleep):
    """Ask ``pred()`` every ``step`` seconds until it answers something
    true or ``timeout`` seconds have passed; returns its last answer."""
    end = clock() + timeout
    while True:
        value = pred()
        if value or clock() >= end:
            return value
        sleep(step)
