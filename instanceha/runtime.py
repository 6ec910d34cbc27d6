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
"""

import gc

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
