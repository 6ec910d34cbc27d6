"""Polling the world until a condition holds (functional tests only)."""

import time


def poll(predicate, timeout, interval=0.1):
    """Call ``predicate`` until it returns something true or ``timeout``
    seconds pass; return its last value either way."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_for(predicate, timeout, what, interval=0.1):
    """poll(), but a timeout is an AssertionError naming ``what`` (a string
    or a callable giving one, evaluated only on failure)."""
    value = poll(predicate, timeout, interval)
    if not value:
        raise AssertionError("timed out after %ss waiting for %s" % (
            timeout, what() if callable(what) else what))
    return value
