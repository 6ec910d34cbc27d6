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
