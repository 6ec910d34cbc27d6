"""Proof of death, pure: when does a BMC reading prove a host dead? No I/O,
no clock: times are arguments.

Two rules (doc/safety.md, issue 21):

* **A proof is never reused** (:func:`reproof`). Before an evacuation pass
  sends its first request, the source host is proven dead again: a fresh
  BMC read says Off, and Nova has recorded no heartbeat from it since
  instanceha's own last write (``floor``: the updated_at Nova gave our
  force-down, so our write is not taken for a heartbeat).
* **Off proves nothing from a BMC never seen On** (:class:`Evidence`).
  An inventory entry may point at another machine, one that is already
  off (a retired host): its BMC says Off whatever happens to the host.
  So, per host and fencing method, instanceha keeps what it has seen:
  the BMC reporting On (at an audit or power-watch read while the host
  heartbeated, the read when its heartbeat was lost, or the read before a
  power-off), and the BMC reporting Off while Nova still had the host up.
  The second is only a *suspicion* until Nova records a heartbeat newer
  than the one it showed right after that read (a host that lost its
  power just before the read sends none); then the method is
  *untrusted*: the host is unprotected and never fenced through its
  entry. A heartbeat loss clears a suspicion.
"""

import dataclasses
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, TypeVar

from instanceha.util import system_uuid as uuid_text

ON, OFF = "on", "off"


@dataclasses.dataclass(frozen=True)
class Suspicion:
    """The BMC read Off while Nova reported the host up. ``updated_at``,
    ``status`` and ``disabled_reason``: the service as Nova showed it
    *after* that read (a heartbeat newer than this was sent while the BMC
    said Off)."""

    at: float
    updated_at: Optional[float]
    status: Optional[str] = None
    disabled_reason: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What one fencing method of one host has been seen to report."""

    #: last read of On (local time), and by whom
    seen_on_at: Optional[float] = None
    seen_on_by: str = ""
    #: an Off read while the host was up, waiting for Nova's next word
    suspicion: Optional[Suspicion] = None
    #: why the method may not prove this host dead (None: not untrusted)
    untrusted: Optional[str] = None
    #: what the BMC last said about the machine behind it: its system
    #: UUID(s) and host name (drivers' system_identity)
    uuids: Tuple[str, ...] = ()
    hostname: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        return d

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Evidence":
        d = dict(d or {})
        s = d.pop("suspicion", None)
        d["uuids"] = tuple(d.get("uuids") or ())
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(suspicion=Suspicion(**s) if s else None,
                   **{k: v for k, v in d.items() if k in known})


#: an Evidence, or None (no evidence yet): what is given comes back
MaybeEvidence = TypeVar("MaybeEvidence", Evidence, None)

#: the service as Nova showed it: (updated_at, status, disabled_reason)
ServiceSeen = Tuple[Optional[float], Optional[str], Optional[str]]


def read(ev: Optional[Evidence], power: str, at: float, by: str,
         nova_up: bool = False, after: Optional[ServiceSeen] = None
         ) -> Evidence:
    """``ev`` after a read of ``power`` ("on"/"off") at ``at`` by ``by``
    (audit, power watch, heartbeat loss, fence). ``nova_up``: Nova
    reported the host up and heartbeating around the read; ``after``: the
    service as Nova showed it *after* the read ((updated_at, status,
    disabled_reason), needed to start a suspicion)."""
    ev = ev or Evidence()
    if power == ON:
        if ev.seen_on_at is not None:
            return ev            # the first sighting stands (no rewrite)
        return dataclasses.replace(ev, seen_on_at=at, seen_on_by=by)
    if power == OFF and nova_up and after is not None \
            and ev.untrusted is None and ev.suspicion is None:
        updated_at, status, reason = after
        return dataclasses.replace(ev, suspicion=Suspicion(
            at, updated_at, status, reason))
    return ev


def heartbeat(ev: MaybeEvidence, updated_at: Optional[float],
              status: Optional[str] = None,
              disabled_reason: Optional[str] = None,
              ours: Optional[float] = None, label: str = "its BMC"
              ) -> MaybeEvidence:
    """``ev`` after Nova showed the host's service with ``updated_at``
    (a HEARTBEAT_OK observation). ``ours``: the updated_at of instanceha's
    own last write to the service (not a heartbeat). A heartbeat newer
    than the one Nova showed after an Off read makes the method untrusted.
    A change of the service's status or reason (an operator's write also
    bumps updated_at) restarts the suspicion from this observation."""
    if ev is None or ev.suspicion is None or updated_at is None:
        return ev
    s = ev.suspicion
    if ours is not None and updated_at <= ours:
        return ev
    if (status, disabled_reason) != (s.status, s.disabled_reason):
        return dataclasses.replace(ev, suspicion=dataclasses.replace(
            s, updated_at=updated_at, status=status,
            disabled_reason=disabled_reason))
    if s.updated_at is not None and updated_at <= s.updated_at:
        return ev
    return dataclasses.replace(ev, suspicion=None, untrusted=(
        "%s reported power Off while the host was up (Nova recorded a "
        "heartbeat after that read): the inventory entry may point at "
        "another machine; fix it (then SIGHUP)" % label))


def identity(ev: Optional[Evidence], found: Optional[Mapping[str, Any]]
             ) -> Evidence:
    """``ev`` with what the BMC reported about its machine (``found``:
    {"uuids": [...], "hostname": ...} or None: a fencing driver's
    system_identity, as the BMC answered); UUIDs in canonical form
    (placeholders such as all zeros dropped)."""
    ev = ev or Evidence()
    found = found or {}
    return dataclasses.replace(
        ev, uuids=tuple(sorted({c for c in map(uuid_text.canonical,
                                               found.get("uuids") or ())
                                if c})),
        hostname=(str(found["hostname"]).lower()
                  if found.get("hostname") else None))


#: How a method's machine stands against the host's (:func:`machine`).
VERIFIED = "verified"
NOT_VERIFIED = "not verified"
MISMATCH = "mismatch"


def machine(ev: Optional[Evidence], host_uuid: Optional[str]
            ) -> Tuple[str, str]:
    """(VERIFIED, NOT_VERIFIED or MISMATCH, text): is the machine behind
    this method's BMC the host? ``ev``: the method's Evidence (the system
    UUIDs its BMC reported: Redfish's System UUID, every byte-order
    reading of IPMI's system GUID); ``host_uuid``: the system UUID the
    host's agent reports (DMI product_uuid), canonical, or None. Only a
    UUID in common binds the method to the host; a BMC reporting others
    reaches another machine, and may never power it off."""
    if not host_uuid:
        return NOT_VERIFIED, ("identity not verified: no agent reported "
                              "the host's system UUID")
    reported = ev.uuids if ev is not None else ()
    if not reported:
        return NOT_VERIFIED, ("identity not verified: the BMC has reported "
                              "no system UUID (yet)")
    if host_uuid in reported:
        return VERIFIED, "identity verified: system UUID %s" % host_uuid
    return MISMATCH, (
        "the BMC's machine is not the host: it reports system UUID %s, the "
        "host's agent reports %s: the inventory entry points at another "
        "machine (a typo, a recabled BMC); fix it (then SIGHUP)"
        % (reported[0] if len(reported) == 1
           else "(one of) " + ", ".join(reported), host_uuid))


def short_name(name: Optional[str]) -> str:
    """A host name without its domain, lower case (Redfish's HostName
    carries none; Nova's host may be a FQDN)."""
    return str(name or "").split(".")[0].strip().lower()


def same_machine(mine: Optional[Evidence], theirs: Optional[Evidence]
                 ) -> bool:
    """Two methods' evidence name one machine: a system UUID in common."""
    return bool(set(mine.uuids if mine else ())
                & set(theirs.uuids if theirs else ()))


def lost(ev: MaybeEvidence) -> MaybeEvidence:
    """The heartbeat is lost: an Off read is what it looked like (the host
    lost its power); the suspicion ends, nothing else changes."""
    if ev is None or ev.suspicion is None:
        return ev
    return dataclasses.replace(ev, suspicion=None)


def untrusted(evidences: Iterable[Optional[Evidence]]) -> Optional[str]:
    """The first reason among a host's methods' evidence, or None."""
    return next((e.untrusted for e in evidences if e and e.untrusted), None)


def off_proves(ev: Optional[Evidence], isolated: bool = False
               ) -> Tuple[bool, str]:
    """(ok, why not): may an Off from this method prove the host dead?
    Yes when it was seen reporting On for the host, or when instanceha
    has already isolated the host in this recovery (the Off is its own
    power-off); never from an untrusted method."""
    if ev is not None and ev.untrusted:
        return False, ev.untrusted
    if isolated or (ev is not None and ev.seen_on_at is not None):
        return True, ""
    return False, ("the BMC reports power Off but was never seen reporting "
                   "On for this host: not a proof of death (an inventory "
                   "entry pointing at a machine that is off looks the "
                   "same); check the machine, then evacuate by hand or "
                   "power it on so that its BMC is seen On")


def reproof(power: Optional[str], updated_at: Optional[float],
            floor: Optional[float], why_not_trusted: Optional[str] = None
            ) -> Tuple[bool, str]:
    """(ok, reason): is the host proven dead *now*, right before an
    evacuation request? ``power``: a fresh BMC read ("on", "off", or the
    error text when no method answered); ``updated_at``: the service's
    updated_at in Nova now (None: none); ``floor``: the updated_at of
    instanceha's own last write (a heartbeat must be newer to count);
    ``why_not_trusted``: the entry may not prove (untrusted)."""
    if why_not_trusted:
        return False, why_not_trusted
    if updated_at is not None and floor is not None and updated_at > floor:
        return False, ("Nova recorded a heartbeat from the host after it "
                       "was fenced (updated_at %.0f after our write at %.0f)"
                       % (updated_at, floor))
    if power == ON:
        return False, "the BMC reports power On: the host was powered on " \
                      "after it was fenced"
    if power != OFF:
        return False, "no fresh BMC read of power Off (%s)" % (
            power or "unknown")
    return True, ("BMC reports power Off and Nova has no heartbeat since "
                  "the fence")
