"""The one ISO 8601 parser (instanceha.util.timeparse)."""

import pytest

from instanceha.util import timeparse

T = 1795321905.0        # 2026-11-22T04:31:45Z


@pytest.mark.parametrize("text,want", [
    ("2026-11-22T04:31:45.000000", T), ("2026-11-22T04:31:45", T),
    ("2026-11-22T04:31:45Z", T), ("2026-11-22T05:31:45+01:00", T),
    ("2026-11-22 04:31:45", T), (" 2026-11-22T04:31:45Z ", T),
    ("2026-11-22T04:31:45.5Z", T + 0.5), ("20261122T043145Z", T)])
def test_reads_what_nova_and_operators_write_naive_is_utc(text, want):
    assert timeparse.epoch(text) == want
    assert timeparse.epoch_or_none(text) == want


@pytest.mark.parametrize("value", [
    "", "yesterday", "2026", "2026-11", "2026-11-22T25:00:00",
    "2026-11-22T04:31:45+25:00", None, 1795321905, b"2026-11-22"])
def test_refuses_what_is_no_full_time(value):
    with pytest.raises(ValueError):
        timeparse.epoch(value)
    assert timeparse.epoch_or_none(value) is None
