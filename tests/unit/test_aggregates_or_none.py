"""drivers.compute.base.aggregates_or_none: the list, or None and one
warning saying why and what the caller does without it."""

import structlog
from structlog.testing import capture_logs

from instanceha.drivers.compute import base


class Stub:
    def __init__(self, answer):
        self.answer = answer

    def list_aggregates(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


LOG = structlog.get_logger("test")


def test_the_list_when_nova_answers():
    found = [base.Aggregate("rack-a", ("c0",))]
    with capture_logs() as logs:
        assert base.aggregates_or_none(Stub(found), LOG, "x") == found
    assert logs == []


def test_none_and_a_warning_when_nova_refuses_or_has_none():
    for error, why in ((base.ComputeError("HTTP 503"), "HTTP 503"),
                       (NotImplementedError(), "NotImplementedError")):
        with capture_logs() as logs:
            assert base.aggregates_or_none(Stub(error), LOG, "zone only",
                                           host="c1") is None
        assert logs == [{"event": "aggregates_unavailable", "host": "c1",
                         "reason": why, "effect": "zone only",
                         "log_level": "warning"}]


def test_no_logger_says_nothing():
    with capture_logs() as logs:
        assert base.aggregates_or_none(
            Stub(base.ComputeError("x")), None, "zone only") is None
    assert logs == []
