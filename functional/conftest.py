"""Hooks for every functional suite."""

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional.peers import harness  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield                      # fixtures (restore) run first
    harness.leaving(nextitem)  # stops the real-peer bed when its suites end


def pytest_sessionfinish(session, exitstatus):
    harness.stop()


@pytest.fixture(scope="module")
def vhost():
    """A RabbitMQ vhost of the test module's own on the machine's broker."""
    from functional import events_fixtures as fx
    with fx.RabbitVhost() as v:
        yield v


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """With pytest-xdist (``./tools/test`` runs two workers), every test on
    the shared real-peer bed goes to one worker (``--dist loadgroup``): one
    bed, started once, its tests in their collection order."""
    for item in items:
        path = pathlib.Path(str(item.fspath)).resolve()
        if any(suite in path.parents for suite in harness.SUITES):
            item.add_marker(pytest.mark.xdist_group("realpeer-bed"))
