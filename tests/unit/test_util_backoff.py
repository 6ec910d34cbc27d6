"""The one exponential back-off (instanceha.util.backoff)."""

from instanceha.util import backoff


def test_doubles_from_the_base_up_to_the_cap():
    assert [backoff.exponential(30.0, n, 600.0) for n in range(0, 8)] == \
        [30.0, 30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0]


def test_a_long_failing_key_stays_at_the_cap():
    assert backoff.exponential(0.005, 10 ** 6, 1000.0) == 1000.0
    assert backoff.exponential(1, 3, 10) == 4
