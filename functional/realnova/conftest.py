"""Fixtures for the scenarios on real Nova (see doc/functional-testing.md)."""

import pytest

from functional.peers import harness
from functional.realnova.engine import Engine


@pytest.fixture(scope="function")
def bed():
    """The shared real-peer test bed (started on first use)."""
    return harness.testbed_or_missing()


@pytest.fixture
def clean_bed(bed):
    """The shared test bed, restored to a clean cloud after the test."""
    try:
        yield bed
    finally:
        bed.restore()


@pytest.fixture
def engine(clean_bed, request):
    """make(overrides) -> a real ``instanceha run`` on the bed, stopped
    after the test; kept with the peers' logs (pytest's tmp dirs are
    rotated by other runs)."""
    engines = []
    base = clean_bed.workdir / "engines" / request.node.name

    def make(overrides=None):
        e = Engine(clean_bed, base / ("engine%d" % len(engines)), overrides)
        engines.append(e)
        return e

    yield make
    for e in engines:
        e.stop()



def pytest_collection_modifyitems(session, config, items):
    """The cascade scenario runs last on the shared bed (right after the
    bed's other tests, so the bed is not started twice): it kills two of
    the three computes and leaves the most to restore."""
    last = [i for i in items if "realnova/test_cascade.py" in i.nodeid]
    if not last:
        return
    rest = [i for i in items if i not in last]
    on_bed = [n for n, i in enumerate(rest)
              if "/realnova/" in i.nodeid or "/conformance/" in i.nodeid
              or i.nodeid.startswith(("realnova/", "conformance/"))]
    at = on_bed[-1] + 1 if on_bed else len(rest)
    items[:] = rest[:at] + last + rest[at:]
