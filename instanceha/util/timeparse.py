"""One parser for the ISO 8601 times instanceha reads: Nova's API and
notification timestamps, Glance's, and the times an operator types.

oslo.utils' ``timeutils.parse_isotime`` (iso8601 underneath) does the
parsing; a time without an offset is UTC, as Nova writes them. Only a full
calendar date is accepted: iso8601 also reads '2026' and '2026-11' as the
first instant of that year or month, which no input of ours means.
"""

import re
from typing import Optional

from oslo_utils import timeutils

# A full calendar date first (extended or basic form); the rest is
# iso8601's to judge.
_FULL_DATE = re.compile(r"^\d{4}(-\d{2}-\d{2}|\d{4})(?![0-9-])")


def epoch(text) -> float:
    """Seconds since the epoch from an ISO 8601 time such as
    '2026-11-22T04:31:45.000000', '...Z' or '...+01:00' (no offset: UTC),
    blanks around it ignored. Raises ValueError for anything else, a
    non-string included."""
    if not isinstance(text, str):
        raise ValueError("time %r is not a string" % (text,))
    text = text.strip()
    if not _FULL_DATE.match(text):
        raise ValueError("not an ISO 8601 time: %r" % (text,))
    return timeutils.parse_isotime(text).timestamp()


def epoch_or_none(value) -> Optional[float]:
    """``epoch(str(value))``, or None for an empty or unreadable value
    (for fields whose absence is no error)."""
    if not value:
        return None
    try:
        return epoch(str(value))
    except ValueError:
        return None
