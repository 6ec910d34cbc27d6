"""Fixtures for the scenarios on real Nova (see doc/functional-testing.md)."""

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional.peers import harness  # noqa: E402
from functional.peers.errors import PeerMissing  # noqa: E402


@pytest.fixture(scope="function")
def bed():
    """The shared real-peer test bed (started on first use)."""
    try:
        return harness.testbed()
    except PeerMissing as e:
        harness.handle_missing(e)


@pytest.fixture
def clean_bed(bed):
    """The shared test bed, restored to a clean cloud after the test."""
    try:
        yield bed
    finally:
        bed.restore()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield                      # fixtures (restore) run first
    harness.leaving(nextitem)


def pytest_sessionfinish(session, exitstatus):
    harness.stop()
