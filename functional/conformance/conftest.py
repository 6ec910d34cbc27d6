import pathlib

import pytest

from functional.peers import harness

HERE = pathlib.Path(__file__).resolve().parent

#: why these tests break the invariant the functional suites check
#: (functional/conftest.py): the walk (scenario.py) asks real Nova and the
#: simulator to evacuate servers whose host's compute is up and powered on,
#: to compare how each refuses
UNSAFE = ("the conformance walk sends evacuate requests for servers on a "
          "running host on purpose, to compare Nova's and the simulator's "
          "refusals")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.allows_unsafe_evacuation(UNSAFE))


@pytest.fixture(scope="module")
def bed():
    """The shared real-peer test bed (started on first use)."""
    return harness.testbed_or_missing()
