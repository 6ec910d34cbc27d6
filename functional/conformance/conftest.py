import pytest

from functional.peers import harness


@pytest.fixture(scope="module")
def bed():
    """The shared real-peer test bed (started on first use)."""
    return harness.testbed_or_missing()
