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


#: test directories on the shared real-peer bed (functional/peers/harness.py)
BED_DIRS = tuple("functional/%s/" % suite.name for suite in harness.SUITES)


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (``./tools/test`` runs two workers): every test on
    the shared real-peer bed in one work unit, so one worker runs them all,
    in collection order, on one bed started once; every other test is a
    unit of its own, spread over the workers. (xdist's own ``loadgroup``
    marks no longer group anything under pytest 9: it renames nodeids
    through an attribute pytest 9 does not read.)"""
    from xdist.scheduler import LoadScopeScheduling

    class BedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return "realpeer-bed" if nodeid.startswith(BED_DIRS) else nodeid

    return BedScheduling(config, log)
