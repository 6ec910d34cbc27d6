"""Small helpers every layer may use: they import nothing of instanceha.

One of each: the disabled_reason marker (marker), the ISO 8601 time parser
(timeparse), the exponential back-off (backoff), the periodic loop
(periodic).
"""
