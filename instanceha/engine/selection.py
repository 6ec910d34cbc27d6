"""Which servers of a fenced host are evacuated, and in what order: the
recovery policies (``instanceha.policy.evacuable``, ``repair``, ``order``,
all pure) applied to what Nova says, for the evacuator.

Read from Nova: each server as listed (metadata, tags, flavor with its
extra specs, created, project) and, once per evacuation of a host, the
host aggregates with their metadata; from Glance, each distinct image of
those servers when evacuable tagging consults the image scope or
``[instance_repair] excluded_tags`` is set. A volume-backed server has no
image here (its volume's image metadata is not read).

Service-owned servers (``[instance_repair] excluded_projects`` and
``excluded_tags``, read whether instance repair is enabled or not) are
left on the host first: their service fails over by itself
(``instanceha.policy.instance_repair_groups.excluded``).

Expired suspension markers are removed where they were found
(``[recovery] remove_expired_markers``), after reading the object again:
a marker an operator renewed in the meantime is left alone.
"""

import dataclasses
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple)

import structlog

from instanceha.drivers.compute import base
from instanceha.engine.context import Context
from instanceha.policy import evacuable, facts_nova, order, power, repair
from instanceha.policy import instance_repair_groups as service
from instanceha.policy.facts import (AggregateFacts, ImageFacts, Problem,
                                     ServerFacts)
from instanceha.policy.instance_repair_settings import Settings as IRSettings

LOG = structlog.get_logger("instanceha.selection")


@dataclasses.dataclass
class Selection:
    ordered: List[str]                  # server ids, evacuation order
    skipped: Dict[str, str]             # server id -> why not evacuated
    #: server id -> order.sort_key (its priority first; the global order
    #: across hosts)
    keys: Dict[str, order.SortKey] = dataclasses.field(default_factory=dict)


def _aggregates(compute: base.ComputeDriver, host: Optional[str],
                effect: str = "aggregate-scope recovery policies are not "
                              "consulted for this evacuation"
                ) -> Tuple[AggregateFacts, ...]:
    """Every host aggregate with its metadata (none when they cannot be
    read: ``effect`` says what that leaves out)."""
    found = base.aggregates_or_none(compute, LOG, effect, host=host) or ()
    return tuple(evacuable.AggregateFacts(
        name=a.name, id=str(a.id or ""), metadata=dict(a.metadata or {}),
        hosts=tuple(a.hosts)) for a in found)


def _image_id(server: base.Server) -> Optional[str]:
    ref = (server.raw or {}).get("image")
    if isinstance(ref, dict) and ref.get("id"):
        return str(ref["id"])
    return None


def _images(compute: base.ComputeDriver, host: Optional[str],
            servers: Iterable[base.Server], settings: evacuable.Settings,
            tags: bool = False) -> Dict[str, ImageFacts]:
    """{image id: ImageFacts} of the servers' images, read from Glance
    only when evacuable tagging consults the image scope, or when
    ``tags`` (image tags exclude service-owned servers). A deleted image
    has no properties; no image endpoint means the image scope is not
    consulted (said once per evacuation); any other failure raises
    ComputeError, so the evacuation is retried rather than decided on a
    scope that could not be read."""
    if not tags and (not settings.enabled
                     or evacuable.IMAGE not in settings.sources):
        return {}
    found: Dict[str, ImageFacts] = {}
    for iid in sorted({i for i in map(_image_id, servers) if i}):
        try:
            found[iid] = evacuable.image_from_glance(compute.get_image(iid))
        except base.NotFound:
            LOG.warning("image_not_found", host=host, image=iid,
                        reason="the image is deleted: its properties and "
                               "tags are not consulted")
            found[iid] = evacuable.ImageFacts(id=iid)
        except (base.NoEndpoint, NotImplementedError) as e:
            LOG.warning("images_unavailable", host=host,
                        reason=str(e) or type(e).__name__,
                        effect="image properties and tags (evacuable "
                               "tagging's image scope, [instance_repair] "
                               "excluded_tags) are not consulted for this "
                               "evacuation")
            return {}
    return found


#: every host aggregate, for reads beyond one evacuation (failover
#: capacity)
aggregates = _aggregates
#: a server's image id (None: booted from a volume)
image_id = _image_id


def images_of(compute: base.ComputeDriver, servers: Sequence[base.Server],
              policies: "Policies") -> Dict[str, ImageFacts]:
    """:func:`_images` of many hosts' servers at once (each image read
    once)."""
    return _images(compute, None, servers, policies.evacuable,
                   tags=bool(policies.service.excluded_tags))


def _facts(server: base.Server, aggregates: Iterable[AggregateFacts],
           images: Optional[Mapping[str, ImageFacts]] = None) -> ServerFacts:
    body = dict(server.raw or {})
    body.setdefault("id", server.id)
    body.setdefault("name", server.name)
    body.setdefault("OS-EXT-SRV-ATTR:host", server.host)
    iid = _image_id(server)
    image = (images or {}).get(iid) if iid is not None else None
    return evacuable.server_from_nova(body, image=image,
                                      aggregates=aggregates)


def remove_expired(compute: base.ComputeDriver, host: str,
                   markers: Iterable[repair.Marker]) -> None:
    """Remove each expired suspension marker (repair.Marker) once, after
    reading its object again: only a value still equal to the expired one
    is removed. Failures are logged; nothing depends on the removal (an
    expired marker has no effect)."""
    seen = set()
    for m in markers:
        ident = (m.scope, m.object_id, m.key)
        if ident in seen:
            continue
        seen.add(ident)
        where = "%s %s" % (m.scope, m.object_name or m.object_id)
        try:
            if m.scope == evacuable.SERVER:
                now = (compute.get_server(m.object_id).raw or {}) \
                    .get("metadata") or {}
            else:
                if not m.object_id:
                    continue
                now = compute.get_aggregate(m.object_id).metadata or {}
            if str(now.get(m.key, "")).strip() != m.value:
                LOG.info("suspension_marker_kept", host=host, object=where,
                         key=m.key, reason="changed since it was read "
                         "(now %r): not removed" % now.get(m.key))
                continue
            if m.scope == evacuable.SERVER:
                compute.delete_server_metadata(m.object_id, m.key)
            else:
                compute.unset_aggregate_metadata(m.object_id, m.key)
        except base.NotFound:
            continue                    # gone already
        except (base.ComputeError, NotImplementedError) as e:
            LOG.warning("suspension_marker_not_removed", host=host,
                        object=where, key=m.key, value=m.value,
                        reason=str(e) or type(e).__name__)
            continue
        LOG.info("suspension_marker_removed", host=host, object=where,
                 key=m.key, value=m.value,
                 reason="expired at %s: it no longer suspends anything"
                 % repair.format_time(m.until))


def _log_problems(host: str, problems: Iterable[Problem]) -> None:
    for p in problems:
        LOG.warning("recovery_policy_problem", host=host, level=p.level,
                    scope=p.scope, object=p.object_name or p.object_id,
                    key=p.key, reason=p.message)


@dataclasses.dataclass(frozen=True)
class Policies:
    """The recovery policies' settings, read once for many hosts."""
    evacuable: evacuable.Settings
    repair: repair.Settings
    order: order.Settings
    service: IRSettings

    @classmethod
    def from_conf(cls, conf: Any) -> "Policies":
        return cls(evacuable.Settings.from_conf(conf),
                   repair.Settings.from_conf(conf),
                   order.Settings.from_conf(conf),
                   IRSettings.host_path_from_conf(conf))


@dataclasses.dataclass
class Decided:
    """What the policies decide for one host's servers (:func:`decide`)."""
    selection: Selection
    #: server id -> why its service keeps it (service-owned)
    owned: Dict[str, str]
    #: server id -> why the policies leave it
    left: Dict[str, str]
    problems: List[Problem]
    expired: List[repair.Marker]


def decide(policies: Policies, servers: Sequence[base.Server],
           aggregates: Sequence[AggregateFacts],
           images: Mapping[str, ImageFacts], now: float) -> Decided:
    """Which of ``servers`` (one host's, those Nova would evacuate) the
    recovery policies evacuate, in what order; reads nothing, logs
    nothing. ``aggregates``: every host aggregate (AggregateFacts);
    ``images``: those :func:`_images` read."""
    rs = policies.repair
    global_scope = None
    if rs.global_aggregate:
        global_scope = next((a for a in aggregates
                             if a.name == rs.global_aggregate), None)
    facts = [_facts(s, aggregates, images) for s in servers]
    owned = _owned(servers, facts, policies.service)
    skipped: Dict[str, str] = {}
    problems: List[Problem] = []
    expired: List[repair.Marker] = []
    facts = [f for f in facts if f.id not in owned]
    verdicts = evacuable.decide_all(facts, policies.evacuable)
    problems.extend(verdicts.problems)
    skipped.update(verdicts.skipped)
    kept = []
    for f in facts:
        if f.id in skipped:
            continue
        decision = repair.decide(f, now, rs, global_scope)
        problems.extend(decision.problems)
        expired.extend(decision.expired)
        why = decision.why_not(repair.Level.EVACUATE)
        if why:
            skipped[f.id] = why
        else:
            kept.append(f)
    ranking = order.rank(kept, policies.order)
    problems.extend(ranking.problems)
    left = dict(skipped)
    skipped.update(owned)
    return Decided(Selection(ranking.ids, skipped,
                             {r.id: order.sort_key(r.server, r.priority)
                              for r in ranking.servers}),
                   owned, left, problems, expired)


def select(ctx: Context, host: str, servers: Sequence[base.Server],
           now: float) -> Selection:
    """``servers``: the host's servers Nova would evacuate (Server). The
    aggregates are read only when a policy may need them."""
    conf = ctx.conf
    policies = Policies.from_conf(conf)
    aggregates = _aggregates(ctx.compute, host) if servers else ()
    images = _images(ctx.compute, host, servers, policies.evacuable,
                     tags=bool(policies.service.excluded_tags))
    d = decide(policies, servers, aggregates, images, now)
    if d.owned:
        LOG.warning("servers_left_to_their_service", host=host,
                    count=len(d.owned), servers=d.owned,
                    reason="service-owned ([instance_repair] "
                           "excluded_projects, excluded_tags): their "
                           "service fails over by itself; moving them "
                           "behind its back breaks it, so they are not "
                           "evacuated")
    if d.expired and conf.recovery.remove_expired_markers:
        remove_expired(ctx.compute, host, d.expired)
    _log_problems(host, evacuable.unique(d.problems))
    if d.left:
        LOG.warning("servers_left_by_policy", host=host, count=len(d.left),
                    servers=d.left, reason="recovery policy ([recovery], "
                    "server/flavor/aggregate metadata) says not to evacuate "
                    "them")
    return d.selection


def _owned(servers: Sequence[base.Server], facts: Sequence[ServerFacts],
           settings: IRSettings) -> Dict[str, str]:
    """{server id: why} of the servers a service owns (excluded by
    project or tag): left on the host, whatever the other policies say."""
    owned: Dict[str, str] = {}
    for server, f in zip(servers, facts):
        why = service.excluded(f, settings, facts_nova.project_of(server))
        if why is not None:
            owned[f.id] = why
    return owned


def explain(ctx_conf: Any, compute: base.ComputeDriver, server_id: str,
            now: float) -> List[str]:
    """``instanceha policy explain SERVER``: every recovery policy's
    decision for one server and where it came from, as text lines. Reads
    Nova (the server, the host aggregates); changes nothing."""
    server = compute.get_server(server_id)
    aggregates = _aggregates(compute, server.host)
    es = evacuable.Settings.from_conf(ctx_conf)
    svc = IRSettings.host_path_from_conf(ctx_conf)
    f = _facts(server, aggregates, _images(compute, server.host, [server],
                                           es, tags=bool(svc.excluded_tags)))
    rs = repair.Settings.from_conf(ctx_conf)
    global_scope = next((a for a in aggregates
                         if a.name == rs.global_aggregate), None) \
        if rs.global_aggregate else None
    lines = ["server %s (%s) on host %s, vm_state %s"
             % (server.name, server.id, server.host, server.vm_state)]
    plan = power.plan(server.vm_state, server.power_state,
                      power.parse_microversion(
                          ctx_conf.evacuation.microversion), server.status)
    lines.append("nova: evacuable" if plan.evacuate
                 else "nova: not evacuable: %s" % plan.reason)
    owned = service.excluded(f, svc, facts_nova.project_of(server))
    lines.append("service-owned: %s" % (owned or "no"))
    group, bad = service.restart_group_of(f, svc)
    lines.append("restart group: %s" % (
        group if group is not None else "none" if bad is None
        else "none: " + bad.message))
    ev = evacuable.decide(f, es)
    lines.append("evacuable tagging: %s: %s" % (
        "yes" if ev.evacuable else "no", ev.reason))
    lines.extend("  %s: %s" % (scope, said) for scope, said in ev.trail)
    rep = repair.explain(f, now, rs, global_scope)
    lines.append("repair: %s" % rep.decision.reason)
    lines.extend("  " + line for line in rep.text().splitlines()[1:])
    pr = order.priority_of(f, order.Settings.from_conf(ctx_conf))
    lines.append("priority: %d (%s)" % (pr.value, pr.source))
    for p in evacuable.unique(list(ev.problems) + list(pr.problems)):
        lines.append("problem: %s" % p.message)
    why = (None if plan.evacuate else plan.reason) or owned or \
        (None if ev.evacuable else ev.reason) or \
        rep.decision.why_not(repair.Level.EVACUATE)
    lines.append("decision: %s" % ("evacuated if its host is lost"
                                   if why is None
                                   else "left on its host: %s" % why))
    return lines
