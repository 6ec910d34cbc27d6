"""The fuzz targets' input counter, and how many inputs each ran (short
and long variants), printed at the end."""

import pytest

from tests.fuzz import budget


@pytest.fixture
def counter(request):
    """Counts a target's inputs; fails the test if a line logged at error
    level (in production's logging set-up) came out of the run."""
    c = budget.Counter()
    with budget.production_logging() as failures:
        yield c
    assert not failures
    c.finish(request, request.node.name)


def pytest_terminal_summary(terminalreporter):
    counts = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "fuzz_inputs":
                    counts.append(value)
    if counts:
        terminalreporter.write_sep("-", "fuzz inputs per target")
        for target, n in sorted(counts):
            terminalreporter.write_line("%s: %d inputs" % (target, n))
