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
known capacity. A server pinned to a zone counts only destinations of
that zone.

Order of the steps (exact): ``confirm``, ``wait``, then ``live`` and
``cold`` together, then ``leave``, then ``defer`` (ERROR, last); within
each, by priority (:func:`~instanceha.policy.order.priority_of`, higher
first), then name, then id.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping, NamedTuple,
                    Optional, Tuple, Union)

from instanceha.policy.drain_room import Admission, ZoneRoom, admission, room
from instanceha.policy.drain_servers import (NOT_LIVE, OPT_OUT, STATE,
                                             ServerVerdict, classify)
from instanceha.policy.drain_settings import (
    COLD, CONFIRM, DEFER, LEAVE, LIVE, MOVES, WAIT, Settings)
from instanceha.policy.facts import HostFacts, Problem, ServerFacts, unique
# Re-exported: the engine and the CLI use them as drain.<name>.
from instanceha.policy.drain_settings import (  # noqa: F401
    ABORT, BLOCKERS, FORCE_COMPLETE, HOWS, MIGRATE)
from instanceha.policy.drain_servers import (  # noqa: F401
    blockers, state_of)

#: refusal kinds besides those of a server (OPT_OUT, NOT_LIVE, STATE)
SERVICE = "service"
DESTINATION = "destination"
CAPACITY = "capacity"
ADMISSION = "admission"
KINDS = (SERVICE, DESTINATION, OPT_OUT, NOT_LIVE, STATE, CAPACITY,
         ADMISSION)

CONDUCTOR = "nova-conductor"
SCHEDULER = "nova-scheduler"
COMPUTE = "nova-compute"

_RANK = {CONFIRM: 0, WAIT: 1, LIVE: 2, COLD: 2, LEAVE: 3, DEFER: 4}

DrainSettings = Settings


class Step(NamedTuple):
    server_id: str
    name: str
    how: str


@dataclasses.dataclass(frozen=True)
class Refusal:
    kind: str               # one of KINDS
    #: the server id, host, service binary or zone it is about
    subject: str
    text: str
    #: force cannot override it: no migration could run
    hard: bool = False

    def __str__(self):
        return self.text


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


def _as_hosts(capacities) -> Dict[str, HostFacts]:
    items = capacities.values() if isinstance(capacities, Mapping) \
        else capacities
    out: Dict[str, HostFacts] = {}
    for h in items or ():
        if not isinstance(h, HostFacts):
            raise TypeError("capacities must hold HostFacts (see "
                            "facts_nova.host_facts), not %s"
                            % type(h).__name__)
        if h.host in out:
            raise ValueError("host %r is given twice" % h.host)
        out[h.host] = h
    return out


def _service_why(svc) -> Optional[str]:
    if getattr(svc, "forced_down", False):
        return "forced down"
    if svc.state != "up":
        return "down (state %s)" % svc.state
    return None


def _host_why(h: HostFacts, services) -> Optional[str]:
    if not h.enabled:
        return "disabled"
    if h.forced_down:
        return "forced down"
    if not h.up:
        return "not up"
    for svc in services:
        if svc.host == h.host and getattr(svc, "binary", COMPUTE) == COMPUTE:
            if svc.status != "enabled":
                return "disabled"
            why = _service_why(svc)
            if why is not None:
                return why
    if h.capacity is None:
        return "no capacity known"
    return None


def _services(host: str, services, moving: bool) -> List[Refusal]:
    out = []
    for binary in (CONDUCTOR, SCHEDULER):
        recs = [s for s in services if getattr(s, "binary", None) == binary]
        up = [s for s in recs if _service_why(s) is None]
        if not recs:
            out.append(Refusal(SERVICE, binary, "%s: no service known; "
                               "Nova cannot migrate without one" % binary,
                               hard=True))
        elif not up:
            out.append(Refusal(SERVICE, binary, "%s: 0 of %d service(s) up "
                               "(%s); Nova cannot migrate without one" % (
                                   binary, len(recs), ", ".join(
                                       "%s %s" % (s.host, _service_why(s))
                                       for s in sorted(
                                           recs, key=lambda s: s.host))),
                               hard=True))
    if moving:
        mine = [s for s in services if s.host == host
                and getattr(s, "binary", COMPUTE) == COMPUTE]
        bad = [_service_why(s) for s in mine if _service_why(s)]
        if not mine:
            out.append(Refusal(SERVICE, host, "%s on %s: no service known; "
                               "Nova migrates only from a running compute "
                               "service" % (COMPUTE, host), hard=True))
        elif bad:
            out.append(Refusal(SERVICE, host, "%s on %s is %s; Nova "
                               "migrates only from a running compute "
                               "service" % (COMPUTE, host, bad[0]),
                               hard=True))
    return out


def _source_zone(host, hosts: Mapping[str, HostFacts], services):
    if host in hosts:
        return hosts[host].zone
    zones = {getattr(s, "zone", None) for s in services
             if s.host == host and getattr(s, "binary", COMPUTE) == COMPUTE}
    return (next(iter(zones)) or None) if len(zones) == 1 else None


def plan(host: str, servers: Iterable[ServerFacts],
         capacities: Union[Mapping[str, HostFacts], Iterable[HostFacts]],
         services: Iterable[Any], settings: Settings = Settings(),
         force: bool = False) -> DrainPlan:
    """The preflight and plan for draining ``host``.

    ``servers``: the host's servers (:class:`ServerFacts`, from
    :func:`~instanceha.policy.facts_nova.server_from_nova`; a server listed
    twice counts once, one on another host is ignored with a note);
    ``capacities``: {host: HostFacts} or [HostFacts] of the compute hosts
    (:func:`~instanceha.policy.facts_nova.host_facts`), the drained one
    included or not; ``services``: the service records (ComputeService:
    host, binary, state, status, forced_down, zone) of nova-conductor,
    nova-scheduler and the computes; ``force``: proceed with what can be
    drained when only soft reasons refuse."""
    services = list(services or ())
    hosts = _as_hosts(capacities)
    notes: List[str] = []
    verdicts: Dict[str, ServerVerdict] = {}
    for server in servers:
        if server.id in verdicts:
            continue
        if server.host is not None and server.host != host:
            notes.append("server %s is on %s, not %s: ignored" % (
                server.name or server.id, server.host, host))
            continue
        verdicts[server.id] = classify(server, settings)
    ordered = sorted(verdicts.values(), key=lambda v: (
        _RANK[v.how], -v.priority, v.name, v.server_id))
    steps = tuple(Step(v.server_id, v.name, v.how) for v in ordered)
    problems: List[Problem] = []
    for v in ordered:
        problems.extend(v.problems)
        if v.how in MOVES and v.need is None:
            notes.append("server %s: size unknown, not counted in capacity "
                         "or admission" % (v.name or v.server_id))

    dests: List[HostFacts] = []
    skipped: Dict[str, str] = {}
    for name in sorted(hosts):
        if name == host:
            continue
        why = _host_why(hosts[name], services)
        if why is None:
            dests.append(hosts[name])
        else:
            skipped[name] = why
    counted = [(v.server_id, v.zone, v.need) for v in ordered
               if v.how in MOVES and v.need is not None]

    reasons = _services(host, services, any(
        v.how in MOVES + (WAIT,) for v in ordered))
    if any(v.how in MOVES for v in ordered) and not dests:
        reasons.append(Refusal(DESTINATION, host, "no destination host: "
                               "0 of %d other compute host(s) are enabled, "
                               "up and of known capacity%s" % (
                                   len(skipped), "" if not skipped else
                                   " (%s)" % ", ".join(
                                       "%s %s" % kv
                                       for kv in sorted(skipped.items()))),
                               hard=True))
    for kind in (OPT_OUT, NOT_LIVE, STATE):
        reasons.extend(Refusal(kind, v.server_id, v.refusal)
                       for v in ordered if v.kind == kind and v.refusal)
    rooms = room(counted, dests)
    for r in rooms:
        for sid, why in r.pending.items():
            v = verdicts[sid]
            reasons.append(Refusal(CAPACITY, sid, "server %s: %s" % (
                v.name or sid, why)))
        if r.shortfall:
            reasons.append(Refusal(CAPACITY, r.zone or "", r.text))
    verdict = admission(counted, dests, _source_zone(host, hosts, services),
                        settings.ha_reserve_hosts)
    for check in verdict.checks:
        reasons.extend(Refusal(ADMISSION, check.zone or "", f)
                       for f in check.failures)
    ok = not reasons
    proceed = ok or (force and not any(r.hard for r in reasons))
    counts: Dict[str, int] = {}
    for s in steps:
        counts[s.how] = counts.get(s.how, 0) + 1
    text = "drain %s: %d server(s)%s; %s" % (
        host, len(steps), "" if not steps else " (%s)" % ", ".join(
            "%d %s" % (counts[h], h) for h in (
                CONFIRM, WAIT, LIVE, COLD, LEAVE, DEFER) if h in counts),
        "preflight passed" if ok else "preflight refused (%d reason(s))%s"
        % (len(reasons), ", forced" if proceed else ""))
    return DrainPlan(host, ok, tuple(r.text for r in reasons), steps,
                     rooms, verdict, force, proceed, tuple(reasons),
                     verdicts, tuple(h.host for h in dests), skipped,
                     tuple(unique(problems)), tuple(notes), text)

