"""Fixtures for the scenarios on real Nova (see doc/functional-testing.md)."""

import pytest

from functional.peers import harness


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
