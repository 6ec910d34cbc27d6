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


# -- the standard library's fast path gives iso8601's instant -----------------

import datetime as _dt  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402
from oslo_utils import timeutils as _tu  # noqa: E402


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=_dt.datetime(1971, 1, 1),
                    max_value=_dt.datetime(2200, 1, 1)),
       st.sampled_from([None, 0, 1, 3, 6]),
       st.sampled_from(["", "Z", "+00:00", "+01:00", "-05:30", "+14:00"]))
def test_the_fast_path_reads_the_same_instant_as_iso8601(when, digits,
                                                          offset):
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + ("%06d" % when.microsecond)[:digits]
    text += offset
    assert timeparse._COMMON.match(text), text
    assert timeparse.epoch(text) == _tu.parse_isotime(text).timestamp(), text


def test_what_the_fast_path_does_not_read_still_goes_to_iso8601():
    # Basic form, a space for T, seven fraction digits, 24:00.
    for text in ("20261122T043145Z", "2026-11-22 04:31:45",
                 "2026-11-22T04:31:45.1234567", "2026-11-22T24:00:00"):
        try:
            expected = _tu.parse_isotime(text).timestamp()
        except ValueError:
            with pytest.raises(ValueError):
                timeparse.epoch(text)
        else:
            assert timeparse.epoch(text) == expected, text
