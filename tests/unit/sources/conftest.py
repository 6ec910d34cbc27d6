import pytest

from tests.unit.sources import helpers


@pytest.fixture(autouse=True)
def _clear_conf_overrides():
    yield
    helpers.clear_overrides()
