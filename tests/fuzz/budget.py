"""How much each fuzz target runs, and the strategies they share.

Short (the normal suite): a few hundred examples per target, derandomized so
a CI run is repeatable. Long (``INSTANCEHA_LONG_TESTS=1``): 100,000 inputs
per target, drawn afresh each run. Every target counts the inputs it really
ran (``record``); ``tests/fuzz/conftest.py`` prints the counts.
"""

import contextlib
import os
import sys

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

LONG = os.environ.get("INSTANCEHA_LONG_TESTS") == "1"
LONG_EXAMPLES = 100_000


#: inputs made by :mod:`tests.fuzz.gen` per Hypothesis example
BATCH = 60 if LONG else 3


def fuzz_settings(short=300):
    """Short: ``short`` examples (each with BATCH generated inputs besides
    its own). Long: enough examples that with their batches every target
    runs at least LONG_EXAMPLES inputs."""
    return settings(
        max_examples=(LONG_EXAMPLES // (BATCH + 1) + 200) if LONG else short,
        deadline=None, database=None, derandomize=not LONG,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck), print_blob=True)


class Counter:
    """Inputs a target ran; put on the test's report by ``finish``."""

    def __init__(self):
        self.n = 0

    def __call__(self, k=1):
        self.n += k

    def finish(self, request, target):
        request.node.user_properties.append(("fuzz_inputs", (target, self.n)))
        if LONG:
            sys.__stderr__.write("\nfuzz %s: %d inputs\n" % (target, self.n))
            assert self.n >= LONG_EXAMPLES, (target, self.n)


def json_like(keys=(), max_leaves=25):
    """JSON values as json.loads returns them, with dict keys drawn partly
    from ``keys`` (names the parser reads) so nesting reaches its checks."""
    scalars = (st.none() | st.booleans() | st.integers()
               | st.floats(allow_nan=True, allow_infinity=True)
               | st.text(max_size=30))
    key = (st.sampled_from(sorted(keys)) | st.text(max_size=12)
           if keys else st.text(max_size=12))
    return st.recursive(
        scalars,
        lambda inner: (st.lists(inner, max_size=4)
                       | st.dictionaries(key, inner, max_size=6)),
        max_leaves=max_leaves)


def mutate(draw, value, replacement, keys=(), steps=None):
    """A copy of a JSON-like ``value`` with a few random edits: a field
    replaced (by ``replacement``, a strategy), deleted or added, a container
    swapped for a scalar, a string cut."""
    import copy
    value = copy.deepcopy(value)
    count = draw(st.integers(1, 4)) if steps is None else steps
    for _ in range(count):
        # walk down to a random container
        path = []
        node = value
        while isinstance(node, (dict, list)) and node \
                and draw(st.integers(0, 3)) > 0:
            if isinstance(node, dict):
                k = draw(st.sampled_from(sorted(node, key=repr)))
            else:
                k = draw(st.integers(0, len(node) - 1))
            if not isinstance(node[k], (dict, list)):
                path.append(k)
                break
            path.append(k)
            node = node[k]
        parent = value
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["replace", "delete", "add", "cut",
                                   "retype"]))
        if not path:
            if op == "add" and isinstance(value, dict):
                k = draw(st.sampled_from(sorted(keys)) | st.text(max_size=8)
                         if keys else st.text(max_size=8))
                value[k] = draw(replacement)
            elif op in ("replace", "retype"):
                value = draw(replacement)
            continue
        k = path[-1]
        if op == "delete":
            del parent[k]
        elif op == "add" and isinstance(parent, dict):
            nk = draw(st.sampled_from(sorted(keys)) | st.text(max_size=8)
                      if keys else st.text(max_size=8))
            parent[nk] = draw(replacement)
        elif op == "cut" and isinstance(parent[k], str):
            parent[k] = parent[k][:draw(st.integers(0, len(parent[k])))]
        elif op == "retype":
            old = parent[k]
            parent[k] = draw(st.sampled_from(
                [str(old), [old], {"v": old}, None, 0, True, 1.5, "",
                 repr(old)]))
        else:
            parent[k] = draw(replacement)
    return value


@contextlib.contextmanager
def production_logging():
    """structlog and the root logger set up as ``instanceha run`` does
    (:func:`instanceha.log.setup`), writing to a UTF-8 stream like stderr's,
    so that the fuzzed inputs go through the real processors and
    renderer; the previous set-up is restored afterwards."""
    import io
    import logging

    import structlog

    from instanceha import log

    old_config = structlog.get_config()
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8",
                              errors="backslashreplace")
    handler = log.setup(fmt="console", stream=stream)
    failures = []
    handler.handleError = failures.append   # a line that could not be written
    try:
        yield failures
    finally:
        structlog.configure(**old_config)
        root.handlers[:] = old_handlers
        root.setLevel(old_level)
