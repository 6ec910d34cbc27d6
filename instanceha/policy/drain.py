"""Draining a host for planned maintenance: the preflight and the plan;
pure.

:func:`plan` says, before anything moves, how each server of the host
leaves it (:mod:`~instanceha.policy.drain_servers`), whether the other
hosts have room for them and whether, after the drain, the cloud can
still absorb the loss of its largest hosts
(:mod:`~instanceha.policy.drain_room`), and whether the Nova services a
migration needs are up. A failed preflight gives every reason at once;
with ``force`` the plan may proceed anyway with what can be drained,
unless a *hard* reason stops every migration (no conductor or scheduler
up, the host's own compute service down, no destination at all).
The rules are in doc/drain.md. The engine runs the steps; nothing here
does I/O or reads a clock.

Destinations (exact): the hosts of ``capacities`` other than the drained
one whose compute service is enabled, up and not forced down (and so in
each record of ``services`` for that host, when it gives any), with a
known capacity (when any capacity is known at all). A server pinned to a zone counts only destinations of
that zone.

Order of the steps (exact): ``confirm``, ``wait``, then ``live`` and
``cold`` together, then ``leave``, then ``defer`` (ERROR, last); within
each, by priority (:func:`~instanceha.policy.order.priority_of`, higher
first), then name, then id.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Union)

from instanceha.policy.capacity_need import Need
from instanceha.policy.drain_hosts import (
    DESTINATION, SERVICE, Refusal, as_hosts, destinations, no_destination,
    service_refusals, source_zone_of)
from instanceha.policy.drain_room import Admission, ZoneRoom, admission, room
from instanceha.policy.drain_servers import (NOT_LIVE, OPT_OUT, STATE,
                                             ServerVerdict, classify)
from instanceha.policy.drain_settings import (
    COLD, CONFIRM, DEFER, LEAVE, LIVE, MOVES, WAIT, Settings)
from instanceha.policy.facts import (CapacityRecord, HostFacts, Problem,
                                     ServerFacts, ServiceRecord, unique)
from instanceha.policy.facts_nova import server_from_record
# Re-exported: the engine and the CLI use them as drain.<name>.
from instanceha.policy.drain_settings import (  # noqa: F401
    ABORT, BLOCKERS, FORCE_COMPLETE, HOWS, MIGRATE)
from instanceha.policy.drain_servers import (  # noqa: F401
    blockers, state_of)
from instanceha.policy.drain_hosts import (  # noqa: F401
    CONDUCTOR, SCHEDULER)

#: refusal kinds besides those of hosts and services (SERVICE,
#: DESTINATION) and of a server (OPT_OUT, NOT_LIVE, STATE)
CAPACITY = "capacity"
ADMISSION = "admission"
KINDS = (SERVICE, DESTINATION, OPT_OUT, NOT_LIVE, STATE, CAPACITY,
         ADMISSION)

UNCOUNTED = ("capacity unknown (Placement could not be read): room and HA "
             "admission are not checked")

_RANK = {CONFIRM: 0, WAIT: 1, LIVE: 2, COLD: 2, LEAVE: 3, DEFER: 4}

DrainSettings = Settings


class Step(NamedTuple):
    server_id: str
    name: str
    how: str


@dataclasses.dataclass(frozen=True)
class DrainPlan:
    host: str
    #: the preflight passed: nothing refuses
    ok: bool
    #: every reason the preflight refuses, human-readable, in KINDS order
    refusals: Tuple[str, ...]
    #: every server of the host, in the order the drain takes them
    steps: Tuple[Step, ...]
    #: room per group of servers (zone, or None for unpinned)
    capacity: Tuple[ZoneRoom, ...]
    #: the HA admission verdict with its numbers
    admission: Admission
    #: the plan was asked with force
    force: bool = False
    #: the drain may go: ok, or forced with no hard refusal
    proceed: bool = False
    #: the refusals as records (kind, subject, hard)
    reasons: Tuple[Refusal, ...] = ()
    #: server id -> how and why, its priority, zone and size
    servers: Mapping[str, ServerVerdict] = dataclasses.field(
        default_factory=dict)
    #: the hosts the servers may go to, and the others with why not
    destinations: Tuple[str, ...] = ()
    skipped_hosts: Mapping[str, str] = dataclasses.field(
        default_factory=dict)
    #: malformed values (priority, opt-out) and unknown sizes, each once
    problems: Tuple[Problem, ...] = ()
    #: what the plan could not check ('server x: size unknown, not
    #: counted')
    notes: Tuple[str, ...] = ()
    text: str = ""
    #: the drained host's availability zone, None when unknown
    zone: Optional[str] = None

    def of(self, *hows: str) -> Tuple[Step, ...]:
        """The steps whose ``how`` is one of ``hows``, in order."""
        return tuple(s for s in self.steps if s.how in hows)

    @property
    def drainable(self) -> Tuple[Step, ...]:
        """What the drain moves or waits for (live, cold, confirm, wait):
        with force, what is drained anyway."""
        return self.of(*(MOVES + (WAIT,)))

    @property
    def left(self) -> Tuple[Step, ...]:
        """What stays on the host (leave, defer), reported."""
        return self.of(LEAVE, DEFER)

    @property
    def hard(self) -> Tuple[Refusal, ...]:
        return tuple(r for r in self.reasons if r.hard)

    @property
    def why(self) -> Dict[str, str]:
        """server id -> why its step is what it is."""
        return {sid: v.reason for sid, v in self.servers.items()}

    @property
    def summary(self) -> Tuple[str, ...]:
        """The capacity and admission lines, and the notes, for an
        operator."""
        return (tuple("room in %s" % r.text for r in self.capacity)
                + ("HA admission: %s" % self.admission.text,)
                + self.notes)

    def as_dict(self) -> Dict[str, Any]:
        """The plan as JSON-able values, for the API and the CLI."""
        why = self.why
        return {
            "host": self.host, "zone": self.zone, "ok": self.ok,
            "force": self.force, "proceed": self.proceed,
            "refusals": list(self.refusals),
            "reasons": [{"kind": r.kind, "subject": r.subject,
                         "text": r.text, "hard": r.hard}
                        for r in self.reasons],
            "steps": [{"id": s.server_id, "name": s.name, "how": s.how,
                       "why": why.get(s.server_id, "")}
                      for s in self.steps],
            "capacity": [{"zone": r.zone, "hosts": list(r.hosts),
                          "servers": list(r.servers),
                          "needed": _need(r.needed), "free": _need(r.free),
                          "disk_checked": r.disk_checked,
                          "shortfall": _need(r.shortfall),
                          "pending": dict(r.pending), "text": r.text}
                         for r in self.capacity],
            "admission": {
                "ok": self.admission.ok,
                "reserve_hosts": self.admission.reserve_hosts,
                "text": self.admission.text,
                "checks": [{"zone": c.zone, "hosts": list(c.hosts),
                            "largest": {k: list(v)
                                        for k, v in c.largest.items()},
                            "capacity": _need(c.capacity),
                            "reserve": _need(c.reserve),
                            "load": _need(c.load), "ok": c.ok,
                            "disk_checked": c.disk_checked,
                            "text": c.text}
                           for c in self.admission.checks]},
            "destinations": list(self.destinations),
            "skipped_hosts": dict(self.skipped_hosts),
            "problems": [p.message for p in self.problems],
            "notes": list(self.notes), "summary": list(self.summary),
            "text": self.text}


def _need(n: Need) -> Dict[str, int]:
    return {"vcpus": n.vcpus, "ram_mb": n.ram_mb, "disk_gb": n.disk_gb}


def server_facts(servers: Optional[Iterable[object]]) -> List[ServerFacts]:
    """The policy's records of a driver's Servers (or ServerFacts, kept):
    :func:`~instanceha.policy.facts_nova.server_from_record`."""
    return [server_from_record(s) for s in servers or ()]


def plan(host: str, servers: Iterable[ServerFacts],
         capacities: Union[None, Mapping[str, HostFacts],
                           Mapping[str, CapacityRecord],
                           Iterable[HostFacts]],
         services: Optional[Iterable[ServiceRecord]],
         settings: Settings = Settings(),
         force: bool = False) -> DrainPlan:
    """The preflight and plan for draining ``host``.

    ``servers``: the host's servers (:class:`ServerFacts`, from
    :func:`~instanceha.policy.facts_nova.server_from_nova` or
    :func:`server_facts`; a server listed twice counts once, one on
    another host is ignored with a note); ``capacities``: {host:
    HostFacts} or [HostFacts] of the compute hosts
    (:func:`~instanceha.policy.facts_nova.host_facts`), or {host:
    HostCapacity} (made HostFacts with ``services``, no aggregates), or
    None when Placement could not be read (room and HA admission then
    refuse, softly, as not checked); the drained host included or not;
    ``services``: the service records (ComputeService: host, binary,
    state, status, forced_down, zone) of nova-conductor, nova-scheduler
    and the computes; ``force``: proceed with what can be drained when
    only soft reasons refuse."""
    services = list(services or ())
    hosts, known = as_hosts(capacities, services)
    notes: List[str] = []
    verdicts = _verdicts(host, servers, settings, notes)
    ordered = sorted(verdicts.values(), key=lambda v: (
        _RANK[v.how], -v.priority, v.name, v.server_id))
    steps = tuple(Step(v.server_id, v.name, v.how) for v in ordered)
    problems: List[Problem] = []
    for v in ordered:
        problems.extend(v.problems)
        if v.how in MOVES and v.need is None:
            notes.append("server %s: size unknown, not counted in capacity "
                         "or admission" % (v.name or v.server_id))

    dests, skipped = destinations(host, hosts, services, known)
    counted = [(v.server_id, v.zone, v.need) for v in ordered
               if v.how in MOVES and v.need is not None]
    source_zone = source_zone_of(host, hosts, services)

    reasons = service_refusals(host, services, any(
        v.how in MOVES + (WAIT,) for v in ordered))
    if any(v.how in MOVES for v in ordered) and not dests:
        reasons.append(no_destination(host, skipped))
    for kind in (OPT_OUT, NOT_LIVE, STATE):
        reasons.extend(Refusal(kind, v.server_id, v.refusal)
                       for v in ordered if v.kind == kind and v.refusal)
    if known:
        rooms = room(counted, dests, source_zone)
        verdict = admission(counted, dests, source_zone,
                            settings.ha_reserve_hosts)
    else:
        rooms = ()
        verdict = Admission(settings.ha_reserve_hosts, (),
                            settings.ha_reserve_hosts <= 0, UNCOUNTED)
        reasons.append(Refusal(CAPACITY, host, UNCOUNTED))
    for r in rooms:
        for sid, why in r.pending.items():
            v = verdicts[sid]
            reasons.append(Refusal(CAPACITY, sid, "server %s: %s" % (
                v.name or sid, why)))
        if r.shortfall:
            reasons.append(Refusal(CAPACITY, r.zone or "", r.text))
    for check in verdict.checks:
        reasons.extend(Refusal(ADMISSION, check.zone or "", f)
                       for f in check.failures)
    ok = not reasons
    proceed = ok or (force and not any(r.hard for r in reasons))
    text = _summary(host, steps, ok, len(reasons), proceed)
    return DrainPlan(host, ok, tuple(r.text for r in reasons), steps,
                     rooms, verdict, force, proceed, tuple(reasons),
                     verdicts, tuple(h.host for h in dests), skipped,
                     tuple(unique(problems)), tuple(notes), text,
                     source_zone)


def _verdicts(host: str, servers: Iterable[ServerFacts], settings: Settings,
              notes: List[str]) -> Dict[str, ServerVerdict]:
    """{server id: ServerVerdict} of ``host``'s servers, each once; a
    server on another host is left out with a note."""
    verdicts: Dict[str, ServerVerdict] = {}
    for server in servers:
        if server.id in verdicts:
            continue
        if server.host is not None and server.host != host:
            notes.append("server %s is on %s, not %s: ignored" % (
                server.name or server.id, server.host, host))
            continue
        verdicts[server.id] = classify(server, settings)
    return verdicts


def _summary(host: str, steps: Sequence[Step], ok: bool, refusals: int,
             proceed: bool) -> str:
    """The plan in one line: the servers by how each goes, the verdict."""
    counts: Dict[str, int] = {}
    for step in steps:
        counts[step.how] = counts.get(step.how, 0) + 1
    return "drain %s: %d server(s)%s; %s" % (
        host, len(steps), "" if not steps else " (%s)" % ", ".join(
            "%d %s" % (counts[h], h) for h in (
                CONFIRM, WAIT, LIVE, COLD, LEAVE, DEFER) if h in counts),
        "preflight passed" if ok else "preflight refused (%d reason(s))%s"
        % (refusals, ", forced" if proceed else ""))

