"""Process-wide runtime settings applied once startup is over.

CPython's cyclic garbage collector walks every tracked object in a full
(generation 2) collection. After importing oslo.messaging, openstacksdk and
SQLAlchemy a process holds some 80,000 such objects that live as long as it
does, and walking them takes tens of milliseconds (45-48 ms measured on the
development machine), during which no notification, kdump packet or action
moves: one such pause pushed the p99 of notification latency over 50 ms.
:func:`freeze_startup_heap` moves everything alive at the end of startup into
the permanent generation, so later full collections walk only what was made
since and take about a millisecond.

The price: an object frozen at startup is never freed by the collector,
even if it later becomes part of a garbage cycle (say, the first broker
connection after a reconnect replaced it), and so is what such a cycle
holds. Objects made after startup are collected as before, so this is a
one-time cost bounded by the start-up heap, not a leak that grows with
traffic.

:func:`collection_paused` keeps the collector out of a bulk read (the
reconcile pass, the status file, a read of every compute service or
capacity of the cloud), whose thousands of short-lived objects would
otherwise be promoted to the old generation and trigger full collections.
"""

import contextlib
import gc
import threading

import structlog

LOG = structlog.get_logger("instanceha.runtime")


def freeze_startup_heap(where="instanceha"):
    """Collect the start-up garbage, then exempt every surviving object
    from future collections. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    LOG.info("startup_heap_frozen", objects=frozen, process=where,
             reason="objects alive after startup live as long as the "
                    "process; keeping them out of full collections keeps "
                    "GC pauses at about a millisecond")
    return frozen


_pause_lock = threading.Lock()
_pausers = 0
_paused_by_us = False


@contextlib.contextmanager
def collection_paused():
    """No cyclic collection while the block runs (any thread's).

    For a pass that makes tens of thousands of short-lived objects and
    drops them all at its end (a reconcile pass reads every service row of
    the cloud): collections during it would find nothing to free, yet
    each one moves the objects still in use to an older generation, and
    enough of those trigger a full collection that walks the whole heap
    (100-200 ms at 20,000 hosts). Paused, the objects die young by
    reference counting and never reach the old generation. Collection
    resumes when the last pauser leaves; what other threads made in the
    meantime is collected then."""
    global _pausers, _paused_by_us
    with _pause_lock:
        if _pausers == 0:
            _paused_by_us = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausers -= 1
            if _pausers == 0 and _paused_by_us:
                gc.enable()
                _paused_by_us = False
