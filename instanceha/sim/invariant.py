"""The invariant every functional test checks: no evacuate request is ever
sent for a server whose host is powered on at that moment.

Whatever serves Nova's API to a test (the simulator's Nova front end, the
real-peer bed's recording proxy in front of real nova-api) makes one
:class:`EvacuateRequest` per evacuate request that reaches it, holding the
power state of the server's current host *at that instant* as the host's
BMC knows it, and hands it to :func:`publish`. A test process subscribes
(:func:`subscribe`; functional/conftest.py does, for the whole session) and
fails the test during which an unsafe request arrived.

A request is safe only when that power state is ``Off``. On, a change under
way (PoweringOn, PoweringOff) and a state nobody could read are all unsafe:
a machine that may be running may still write its servers' disks. A host
whose BMC does not answer (it lost power with its host, say) reads Off
only once its watchdog's deadline has passed (issue 37: until then it
could have been alive, cut off, and still feeding its watchdog); before,
it reads Unknown, with a ``note`` saying so.
"""

import datetime
import threading

#: the only power state in which an evacuate request is safe
SAFE_POWER = "Off"
UNKNOWN = "Unknown"


class EvacuateRequest:
    """One evacuate request as it reached Nova's API.

    ``power``: the source host's BMC power state then ("On", "Off",
    "PoweringOn", "PoweringOff", "Unknown"). ``where``: which Nova answered
    (the simulator's URL, "real-nova"). ``answer``: the HTTP status Nova
    gave, once known (None before, or when it was never learnt).
    """

    __slots__ = ("time", "server", "host", "power", "where", "answer",
                 "note")

    def __init__(self, time, server, host, power, where, answer=None,
                 note=None):
        self.time = time
        self.server = server
        self.host = host
        self.power = power
        self.where = where
        self.answer = answer
        #: why the power reads as it does, when not the BMC's answer
        self.note = note

    @property
    def unsafe(self):
        return self.power != SAFE_POWER

    def as_dict(self):
        return {"time": self.time, "at": iso(self.time),
                "server": self.server, "host": self.host,
                "power": self.power, "where": self.where,
                "answer": self.answer, "unsafe": self.unsafe,
                "note": self.note}

    def describe(self):
        answered = ("" if self.answer is None
                    else ", Nova answered %s" % self.answer)
        note = "" if self.note is None else ": %s" % self.note
        return ("evacuate request for server %s at %s while its host %s "
                "was powered %s%s (%s%s)" % (
                    self.server, iso(self.time), self.host, self.power,
                    note, self.where, answered))

    def __repr__(self):
        return "<EvacuateRequest %s>" % self.describe()


def iso(ts):
    """2026-11-26T06:46:46.123Z"""
    return datetime.datetime.fromtimestamp(
        ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def unsafe(records):
    """The records of ``records`` that break the invariant."""
    return [r for r in records if r.unsafe]


def report(records):
    """One line per unsafe request, or "" when there is none."""
    bad = unsafe(records)
    if not bad:
        return ""
    return "%d evacuate request(s) for a server whose host was not " \
           "powered off:\n%s" % (len(bad), "\n".join(
               "  " + r.describe() for r in bad))


# -- the test process's subscription ------------------------------------------

_lock = threading.Lock()
_listeners = []


def subscribe(listener):
    """Call ``listener(record)`` for every evacuate request any simulated
    cloud or real-peer recorder of this process sees from now on."""
    with _lock:
        _listeners.append(listener)


def unsubscribe(listener):
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def publish(record):
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(record)
