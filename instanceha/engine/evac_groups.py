"""Restart groups on the host path: within one project, the servers of
restart group N+1 are sent only once every server of the lower groups is
settled (rebuilt on another host, or given up: failed, skipped, gone).
The rule is the pure policy's (:mod:`instanceha.policy.instance_repair_groups`,
the same as instance repair's); this module applies it to the evacuation
runs (engine.evac_run), for the evacuator.

A run's unsettled grouped servers are its to-do and its attempts in
flight. Each run publishes them (``run.group_members``, an immutable
tuple, replaced at the end of every pass) so that a project's groups hold
across every host this engine is evacuating: a database on one lost host
comes back before its application servers on another. A server waiting
for its group stays in the run's to-do; the pass comes back.

Nothing here sends or powers off anything: a group only holds back a
request the evacuator would otherwise send (after the host's proof of
death, as always).
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, Collection, Dict, Iterable, List,
                    Optional, Sequence, Tuple)

import structlog

from instanceha.drivers.compute.base import Server
from instanceha.policy import facts_nova
from instanceha.policy import instance_repair_groups as groups
from instanceha.policy.instance_repair_settings import Settings

if TYPE_CHECKING:
    from instanceha.engine.context import Context
    from instanceha.engine.evac_run import Run
    from instanceha.engine.evac_state import Attempt

    #: a to-do entry of a run: (server id, not before, the failed
    #: attempt to check or None)
    Todo = Tuple[str, float, Optional[Attempt]]

LOG = structlog.get_logger("instanceha.evacuator")

#: server id -> (its project, its restart group)
Groups = Dict[str, Tuple[Optional[str], int]]


def read(ctx: Context, host: str, servers: Iterable[Server]) -> Groups:
    """The restart group of each of the host's servers that has one
    (``[instance_repair] restart_group_key`` in its metadata, read whether
    instance repair is enabled or not). A malformed value is said once
    per run; that server has no group (it waits for nobody)."""
    settings = Settings.host_path_from_conf(ctx.conf)
    out: Groups = {}
    for s in servers:
        group, problem = groups.restart_group_of(
            facts_nova.server_from_record(s), settings)
        if problem is not None:
            LOG.warning("restart_group_invalid", host=host, server=s.id,
                        key=problem.key, value=problem.value,
                        reason=problem.message,
                        effect="evacuated without a restart group")
        if group is not None:
            out[s.id] = (facts_nova.project_of(s), group)
    return out


def members(run: Run) -> Tuple[groups.Member, ...]:
    """The run's grouped servers not settled yet: to send, or in flight."""
    known = run.groups
    if not known:
        return ()
    ids = [t[0] for t in run.todo] + list(run.inflight)
    return tuple(groups.Member(sid, known[sid][0], known[sid][1])
                 for sid in ids if sid in known)


def publish(run: Run) -> None:
    """What the other hosts' runs see of this one (at the end of a pass)."""
    run.group_members = members(run)


def _others(ctx: Context, run: Run) -> List[groups.Member]:
    return [m for other in list(ctx.runs.values()) if other is not run
            for m in getattr(other, "group_members", ())]


def hold(ctx: Context, run: Run, ready: List[Todo]) -> List[Todo]:
    """The ready to-do entries that may be sent now: those of a server
    whose project has no unsettled server in a lower restart group, on
    this host or on another host being evacuated. The others stay in the
    to-do (``run.group_waits``: {server id: why}). Each decision is said
    once: when a server starts waiting for a group (again when the group
    it waits for changes, not when that group's count does), and when it
    is let go."""
    waiting: Dict[str, str] = {}
    lowest: Dict[Optional[str], int] = {}
    go = ready
    if run.groups and any(t[0] in run.groups for t in ready):
        everyone = list(members(run)) + _others(ctx, run)
        for m in everyone:
            if m.group is not None:
                lowest[m.project_id] = min(m.group, lowest.get(
                    m.project_id, m.group))
        _, waits = groups.release(everyone)
        waiting = {t[0]: waits[t[0]] for t in ready if t[0] in waits}
        go = [t for t in ready if t[0] not in waiting]
    said: Dict[str, int] = {}
    for sid, why in waiting.items():
        said[sid] = lowest[run.groups[sid][0]]
        if run.group_said.get(sid) != said[sid]:
            LOG.info("evacuation_waits_for_restart_group", host=run.host,
                     server=sid, reason=why)
    for sid, _, _ in go:
        if sid in run.group_waits:
            project, group = run.groups[sid]
            LOG.info("evacuation_restart_group_released", host=run.host,
                     server=sid, group=group, project=project,
                     reason="every server of the lower restart groups of "
                            "its project is settled")
    run.group_waits = waiting
    run.group_said = said
    return go


def behind_capacity(known: Groups, send: Sequence[str],
                    held: Collection[str]
                    ) -> Tuple[List[str], Dict[str, str]]:
    """After the capacity preflight: a server of a higher restart group
    than one the preflight holds (no room) waits with it, or it would be
    rebuilt before the server it depends on. Returns (the servers still to
    send, in order; {server id: why it waits for capacity too})."""
    lowest: Dict[Optional[str], int] = {}
    for sid in held:
        if sid in known:
            project, group = known[sid]
            lowest[project] = min(group, lowest.get(project, group))
    behind: Dict[str, str] = {}
    for sid in send:
        if sid not in known:
            continue
        project, group = known[sid]
        if project in lowest and group > lowest[project]:
            behind[sid] = (
                "restart group %d waits for group %d of project %s, which "
                "waits for capacity" % (group, lowest[project],
                                        project or "?"))
    if behind:
        LOG.warning("evacuations_wait_for_restart_group_capacity",
                    count=len(behind), servers=behind)
    return [sid for sid in send if sid not in behind], behind
