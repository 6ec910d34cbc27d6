"""The start-up heap leaves the collector's full walks."""

import gc
import weakref

from instanceha import runtime


def test_objects_alive_at_startup_are_frozen_and_garbage_is_not():
    class Node:
        pass
    kept = [Node() for _ in range(1000)]
    garbage = Node()
    garbage.self = garbage          # a cycle only the collector frees
    gone = weakref.ref(garbage)
    del garbage
    try:
        frozen = runtime.freeze_startup_heap("test")
        assert frozen == gc.get_freeze_count() >= len(kept)
        assert gone() is None           # collected first, not frozen
        tracked = {id(o) for o in gc.get_objects(generation=2)}
        assert not any(id(k) in tracked for k in kept)
    finally:
        gc.unfreeze()


def test_collection_paused_nests_across_threads_and_restores():
    import threading
    assert gc.isenabled()
    entered, leave = threading.Event(), threading.Event()

    def other():
        with runtime.collection_paused():
            entered.set()
            leave.wait(30)

    t = threading.Thread(target=other)
    with runtime.collection_paused():
        assert not gc.isenabled()
        t.start()
        assert entered.wait(30)
    # This block left first: the other thread's pass still runs paused.
    assert not gc.isenabled()
    leave.set()
    t.join(30)
    assert gc.isenabled()


def test_collection_paused_leaves_a_disabled_collector_disabled():
    gc.disable()
    try:
        with runtime.collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collection_paused_restores_after_an_exception():
    try:
        with runtime.collection_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_bulk_reads_run_with_the_collector_paused():
    """The reconcile pass, and an evacuation's shared reads of every
    service and capacity of the cloud."""
    from instanceha import conf as conf_pkg
    from instanceha.engine.context import Context
    from instanceha.journal import Journal
    from instanceha.sources.reconciler import Reconciler
    seen = []

    class Nova:
        def list_services(self):
            seen.append(("services", gc.isenabled()))
            return []

        def host_capacities(self):
            seen.append(("capacities", gc.isenabled()))
            return {}

    conf = conf_pkg.make({})
    Reconciler(conf, Nova(), lambda event: None, lambda: 100.0)._pass()
    journal = Journal("sqlite://")
    try:
        ctx = Context(conf, Nova(), journal, {}, lambda name: None,
                      lambda: 100.0, board=None)
        ctx.shared_services()
        ctx.shared_capacities()
    finally:
        journal.close()
    assert seen == [("services", False), ("services", False),
                    ("capacities", False)]
    assert gc.isenabled()
