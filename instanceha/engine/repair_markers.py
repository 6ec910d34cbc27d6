"""The result markers instance repair writes in a server's metadata (after
Ganeti's result tags), so that ``openstack server show`` tells the
server's user what happened: pending (and why), running (which action,
since when), the last result (action, outcome, time) and failed (until an
operator clears it). Keys carry instanceha's marker prefix; values are
short text. Pure: the texts and the changes; the engine writes them
through the compute driver.
"""

import datetime
from typing import Dict, Mapping, Optional

from instanceha.util.marker import MARKER

PREFIX = MARKER + "instance_repair."
PENDING = PREFIX + "pending"
RUNNING = PREFIX + "running"
RESULT = PREFIX + "result"
FAILED = PREFIX + "failed"
KEYS = (PENDING, RUNNING, RESULT, FAILED)
#: what a result marker says besides the ladder's outcomes
NOT_PERMITTED = "not permitted"


def stamp(at: float) -> str:
    return datetime.datetime.fromtimestamp(
        at, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def pending(at: float, why: str) -> Dict[str, Optional[str]]:
    return {PENDING: _short("since %s: %s" % (stamp(at), why))}


def running(action: str, at: float) -> Dict[str, Optional[str]]:
    return {PENDING: None, RUNNING: "%s since %s" % (action, stamp(at))}


def result(action: str, outcome: str, at: float, why: str = ""
           ) -> Dict[str, Optional[str]]:
    text = "%s %s at %s" % (action, outcome, stamp(at))
    if why:
        text += ": " + why
    return {PENDING: None, RUNNING: None, RESULT: _short(text)}


def failed(at: float, why: str) -> Dict[str, Optional[str]]:
    return {PENDING: None, RUNNING: None,
            FAILED: _short("%s: %s; 'instanceha repair --clear SERVER' "
                           "clears it" % (stamp(at), why))}


def cleared() -> Dict[str, Optional[str]]:
    return {PENDING: None, RUNNING: None, FAILED: None}


def changes(current: Mapping[str, str], wanted: Mapping[str, Optional[str]]
            ) -> Dict[str, Optional[str]]:
    """The keys of ``wanted`` that differ from the server's metadata
    ``current`` (a None removes a key; removing an absent key is no
    change)."""
    out: Dict[str, Optional[str]] = {}
    for key, value in wanted.items():
        if value is None:
            if key in current:
                out[key] = None
        elif current.get(key) != value:
            out[key] = value
    return out


def view(metadata: Mapping[str, str]) -> Dict[str, str]:
    """The repair markers of a server's metadata, by short name."""
    return {key[len(PREFIX):]: metadata[key] for key in KEYS
            if key in metadata}
