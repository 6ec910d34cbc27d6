"""Which servers of a fenced host are evacuated, and in what order: the
recovery policies (``instanceha.policy.evacuable``, ``repair``, ``order``,
all pure) applied to what Nova says, for the evacuator.

Read from Nova: each server as listed (metadata, tags, flavor with its
extra specs, created) and, once per evacuation of a host, the host
aggregates with their metadata. Not read yet: Glance image properties (the
image scope of evacuable tagging is consulted only when a caller fills it).
"""

import dataclasses
from typing import Dict, List

import structlog

from instanceha.drivers.compute import base
from instanceha.policy import evacuable, order, repair

LOG = structlog.get_logger("instanceha.selection")


@dataclasses.dataclass
class Selection:
    ordered: List[str]                  # server ids, evacuation order
    skipped: Dict[str, str]             # server id -> why not evacuated
    priorities: Dict[str, int]
    #: server id -> order.sort_key (the global order across hosts)
    keys: Dict[str, tuple] = dataclasses.field(default_factory=dict)


def _aggregates(compute, host):
    try:
        found = compute.list_aggregates()
    except (base.ComputeError, NotImplementedError) as e:
        LOG.warning("aggregates_unavailable", host=host,
                    reason=str(e) or type(e).__name__,
                    effect="aggregate-scope recovery policies are not "
                           "consulted for this evacuation")
        return ()
    return tuple(evacuable.AggregateFacts(
        name=a.name, metadata=dict(a.metadata or {}), hosts=tuple(a.hosts))
        for a in found)


def _facts(server, aggregates):
    body = dict(server.raw or {})
    body.setdefault("id", server.id)
    body.setdefault("name", server.name)
    body.setdefault("OS-EXT-SRV-ATTR:host", server.host)
    return evacuable.server_from_nova(body, aggregates=aggregates)


def _log_problems(host, problems):
    for p in problems:
        LOG.warning("recovery_policy_problem", host=host, level=p.level,
                    scope=p.scope, object=p.object_name or p.object_id,
                    key=p.key, reason=p.message)


def select(ctx, host, servers, now) -> Selection:
    """``servers``: the host's servers Nova would evacuate (Server). The
    aggregates are read only when a policy may need them."""
    conf = ctx.conf
    es = evacuable.Settings.from_conf(conf)
    rs = repair.Settings.from_conf(conf)
    os_ = order.Settings.from_conf(conf)
    aggregates = _aggregates(ctx.compute, host) if servers else ()
    global_scope = None
    if rs.global_aggregate:
        global_scope = next((a for a in aggregates
                             if a.name == rs.global_aggregate), None)
    facts = [_facts(s, aggregates) for s in servers]
    skipped, problems = {}, []
    verdicts = evacuable.decide_all(facts, es)
    problems.extend(verdicts.problems)
    skipped.update(verdicts.skipped)
    kept = []
    for f in facts:
        if f.id in skipped:
            continue
        decision = repair.decide(f, now, rs, global_scope)
        problems.extend(decision.problems)
        why = decision.why_not(repair.Level.EVACUATE)
        if why:
            skipped[f.id] = why
        else:
            kept.append(f)
    ranking = order.rank(kept, os_)
    problems.extend(ranking.problems)
    _log_problems(host, evacuable.unique(problems))
    if skipped:
        LOG.warning("servers_left_by_policy", host=host, count=len(skipped),
                    servers=skipped, reason="recovery policy ([recovery], "
                    "server/flavor/aggregate metadata) says not to evacuate "
                    "them")
    return Selection(ranking.ids, skipped,
                     {r.id: r.priority for r in ranking.servers},
                     {r.id: order.sort_key(r.server, r.priority)
                      for r in ranking.servers})


def explain(ctx_conf, compute, server_id, now):
    """``instanceha policy explain SERVER``: every recovery policy's
    decision for one server and where it came from, as text lines. Reads
    Nova (the server, the host aggregates); changes nothing."""
    from instanceha.policy import power
    server = compute.get_server(server_id)
    aggregates = _aggregates(compute, server.host)
    f = _facts(server, aggregates)
    es = evacuable.Settings.from_conf(ctx_conf)
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
    why = (None if plan.evacuate else plan.reason) or \
        (None if ev.evacuable else ev.reason) or \
        rep.decision.why_not(repair.Level.EVACUATE)
    lines.append("decision: %s" % ("evacuated if its host is lost"
                                   if why is None
                                   else "left on its host: %s" % why))
    return lines
