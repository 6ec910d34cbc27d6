"""Print how many inputs each fuzz target ran (short and long variants)."""


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
