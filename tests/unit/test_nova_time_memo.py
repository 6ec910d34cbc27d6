"""nova_records.time_memo: one answer's rows share their updated_at strings
(Nova stamps whole seconds), so each distinct string is parsed once; a bad
one is still refused with its value named."""

import pytest

from instanceha.drivers.compute import base, nova_records


def test_each_distinct_string_is_parsed_once(monkeypatch):
    calls = []
    real = nova_records.parse_time

    def counting(value):
        calls.append(value)
        return real(value)
    monkeypatch.setattr(nova_records, "parse_time", counting)
    parse = nova_records.time_memo()
    rows = ["2026-11-26T10:00:0%d.000000" % (i % 3) for i in range(30)]
    out = [parse(v) for v in rows]
    assert sorted(set(calls)) == sorted(set(rows)) and len(calls) == 3
    assert out[0] == real(rows[0]) and out[1] == out[0] + 1
    assert parse(None) is None


def test_a_bad_time_is_refused_every_time():
    parse = nova_records.time_memo()
    for _ in range(2):
        with pytest.raises(base.ComputeError, match="soon"):
            parse("soon")
    with pytest.raises(base.ComputeError):
        parse(["2026-11-26"])           # unhashable, and not a time
