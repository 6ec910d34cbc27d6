"""The marker instanceha writes at the start of a compute service's
``disabled_reason`` in Nova: ``instanceha: evacuating 2026-11-22T04:31:45Z``.

Fixed, not configurable: the engine writes it, and every reader (the
reconciler, the notification filter, the state machine, the reserved-host
check) must recognise what the engine wrote, also what an earlier run or
another node wrote. One constant serves all of them.
"""

MARKER = "instanceha:"


def is_ours(reason) -> bool:
    """True when a ``disabled_reason`` (None or a string) is instanceha's."""
    return isinstance(reason, str) and reason.startswith(MARKER)
