"""One exponential back-off: base, 2 x base, 4 x base, ... up to a cap.

Used wherever a retry waits longer each time (the state machine's pending
retries, the evacuator's per-server retries, the work queue's per-key
back-off, the listener workers' restarts). Retries around a single driver
call use tenacity's waits instead.
"""

#: 2**64 times any base we use is past any cap; the exponent stops there so
#: a long-failing key cannot overflow a float.
_MAX_EXPONENT = 64


def exponential(base, attempt, cap):
    """The wait before retry number ``attempt`` (1: the first retry, which
    waits ``base``; an attempt below 1 counts as 1), doubling with each
    attempt and never over ``cap``."""
    exponent = min(max(int(attempt) - 1, 0), _MAX_EXPONENT)
    return min(base * 2 ** exponent, cap)
