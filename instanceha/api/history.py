"""A host's history from the journal, for GET /hosts/<host>/history and
``instanceha history``: every transition, action and evacuation (server
move) with its time and reason, in time order, a page at a time.

A page is ``limit`` entries from ``since`` (inclusive) to ``until``
(exclusive), after ``marker`` (the ``marker`` of the last entry of the
previous page, given back as ``next_marker`` while more entries follow).
"""

import re
import time

from instanceha.journal.store import HISTORY_KINDS
from instanceha.util import timeparse

DEFAULT_LIMIT = 100
_PREFIX = {"transition": "t", "action": "a", "evacuation": "e"}
_KIND = {v: k for k, v in _PREFIX.items()}
_MARKER = re.compile(r"^([tae])([0-9]{1,18})$")
_RELATIVE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
assert set(_PREFIX) == set(HISTORY_KINDS)


class BadRequest(ValueError):
    """A parameter that says what is wrong with it."""


def parse_time(text, now, name="time"):
    """Epoch seconds from ``text``: a number (epoch seconds), an ISO 8601
    UTC time (2026-11-25T07:00:00Z; the Z, seconds and the T may be
    left out) or a duration ago (90s, 30m, 2h, 7d)."""
    text = str(text).strip()
    m = _RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None:
        if value != value or value in (float("inf"), float("-inf")):
            raise BadRequest("%s must be finite" % name)
        return value
    parsed = timeparse.epoch_or_none(text)
    if parsed is not None:
        return parsed
    raise BadRequest("%s %r: give epoch seconds, an ISO 8601 UTC time "
                     "(2026-11-25T07:00:00Z) or a duration ago (30m, 2h, "
                     "7d)" % (name, text[:40]))


def iso(at):
    if at is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + \
        (".%03dZ" % int(round((at % 1) * 1000) % 1000))


def parse_limit(text, maximum):
    if text is None or text == "":
        return min(DEFAULT_LIMIT, maximum)
    text = str(text).strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) \
            <= maximum:
        raise BadRequest("limit must be a whole number from 1 to %d "
                         "([api] history_max_limit), not %r"
                         % (maximum, text[:20]))
    return int(text)


def parse_marker(text):
    if text is None or text == "":
        return None
    m = _MARKER.match(str(text).strip())
    if m is None:
        raise BadRequest("marker %r is not an entry's marker (t12, a3, "
                         "e40)" % str(text)[:40])
    return _KIND[m.group(1)], int(m.group(2))


def find_host(journal, engine, host):
    """(host id, name) for a host name or id the engine or the journal
    knows, else None."""
    rec = engine.find(host) if engine is not None else None
    if rec is not None:
        return rec.id, rec.name
    for host_id, record in journal.latest().items():
        if host in (host_id, record.get("name")):
            return host_id, record.get("name") or host
    return None


def entry(row):
    """A journal row as a history entry (JSON-ready)."""
    kind, at = row["entry"], row["at"]
    out = {"marker": "%s%d" % (_PREFIX[kind], row["id"]), "kind": kind,
           "at": at, "time": iso(at)}
    if kind == "transition":
        out.update({"from": row["src"], "to": row["dst"],
                    "event": row["event"], "source": row["source"],
                    "reason": row["reason"]})
    elif kind == "action":
        out.update({"action": row["kind"],
                    "finished_at": row["finished_at"],
                    "outcome": row["outcome"], "detail": row["detail"]})
    else:
        out.update({"server_id": row["server_id"], "status": row["status"],
                    "dest_host": row["dest_host"],
                    "finished_at": row["finished_at"],
                    "detail": row["detail"]})
    return out


def page(journal, host_id, since=None, until=None, marker=None,
         limit=DEFAULT_LIMIT):
    """(entries, next_marker or None). Raises BadRequest for a marker
    that is no entry of this host."""
    try:
        rows = journal.history(host_id, since=since, until=until,
                               after=marker, limit=limit + 1)
    except KeyError:
        raise BadRequest("marker %s%d is no entry of this host"
                         % (_PREFIX[marker[0]], marker[1])) from None
    entries = [entry(r) for r in rows[:limit]]
    more = len(rows) > limit
    return entries, (entries[-1]["marker"] if more and entries else None)


def format_entry(e):
    """One line for the CLI."""
    head = "%s  %-10s " % (e["time"], e["kind"])
    if e["kind"] == "transition":
        return head + "%s -> %s (%s from %s): %s" % (
            e["from"], e["to"], e["event"], e["source"] or "-", e["reason"])
    if e["kind"] == "action":
        text = head + "%s " % e["action"]
        if e["finished_at"] is None:
            return text + "started, not finished"
        text += "%s after %.1f s" % (e["outcome"], e["finished_at"] - e["at"])
        return text + (": %s" % e["detail"] if e["detail"] else "")
    text = head + "server %s: %s" % (e["server_id"], e["status"])
    if e["dest_host"]:
        text += " -> %s" % e["dest_host"]
    if e["finished_at"] is not None:
        text += " after %.1f s" % (e["finished_at"] - e["at"])
    return text + (": %s" % e["detail"] if e["detail"] else "")
