import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional.peers import harness  # noqa: E402
from functional.peers.errors import PeerMissing  # noqa: E402


@pytest.fixture(scope="session")
def bed():
    try:
        return harness.testbed()
    except PeerMissing as e:
        harness.handle_missing(e)


def pytest_sessionfinish(session, exitstatus):
    harness.stop()
