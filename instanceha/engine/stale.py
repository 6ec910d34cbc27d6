"""Old rebuilds a returning host runs: find them, repair what they broke.

When an evacuation's destination dies before taking the rebuild, the
rebuild waits in that host's message queue. instanceha sends the server
again elsewhere (evacuator; the host is recorded in the journal's
``stale_rebuilds``). When the dead host's compute starts again it runs the
old rebuild; Nova fails it on the server's changed task state and sets the
server to error, though it runs where instanceha rebuilt it. This module
runs from the returning host's cleanup check, before the host is put back
in service. The decisions are ``failures.stale_rebuild`` (pure).
"""

from typing import Dict, List, Set

import structlog

from instanceha.drivers.compute import base
from instanceha.engine import failures
from instanceha.engine.context import Context
from instanceha.fsm.record import HostRecord

LOG = structlog.get_logger("instanceha.stale")


class Summary:
    def __init__(self) -> None:
        self.waiting: List[str] = []
        self.repaired: List[str] = []
        self.conflicts: List[str] = []

    def text(self) -> str:
        parts = []
        if self.repaired:
            parts.append("%d server(s) an old rebuild set to error reset to "
                         "active" % len(self.repaired))
        if self.conflicts:
            parts.append("%d server(s) rebuilt by this host's old rebuilds "
                         "while running elsewhere (check by hand): %s"
                         % (len(self.conflicts), ", ".join(self.conflicts)))
        return "; ".join(parts)


def settle(ctx: Context, record: HostRecord) -> Summary:
    """Check the old rebuilds that may wait in ``record``'s host's queue.
    Returns a Summary; ``waiting`` lists the servers whose old rebuild has
    not run yet (the caller checks again later)."""
    summary = Summary()
    rows = ctx.journal.stale_rebuilds(suspect_host=record.name)
    if not rows:
        return summary
    waited = ctx.clock() - record.since
    limit = ctx.conf.evacuation.stale_rebuild_wait
    # Every host each server's old rebuild may have been cast to.
    suspects: Dict[str, Set[str]] = {}
    for r in ctx.journal.stale_rebuilds(unresolved=False):
        suspects.setdefault(r["server_id"], set()).add(r["suspect_host"])
    migrations, done = {}, {}
    for row in rows:
        sid, source = row["server_id"], row["source_host"]
        try:
            server = ctx.compute.get_server(sid)
        except base.NotFound:
            server = None
        if source not in migrations:
            migrations[source] = ctx.compute.list_evacuations(source)
        if row["source_id"] not in done:
            done[row["source_id"]] = {
                e["server_id"]: e["dest_host"]
                for e in ctx.journal.evacuations(row["source_id"])
                if e["status"] == "done"}
        others = suspects.get(sid, set()) - {record.name}
        decision, reason = failures.stale_rebuild(
            server, [m for m in migrations[source] if m.server_id == sid],
            record.name, done[row["source_id"]].get(sid), waited, limit,
            others)
        if decision == failures.STALE_WAIT:
            summary.waiting.append(sid)
            continue
        if decision == failures.STALE_REPAIR:
            ctx.compute.reset_state(sid, "active")
            summary.repaired.append(sid)
            LOG.warning("stale_rebuild_repaired", host=record.name,
                        server=sid, reason=reason + ": reset to active")
            resolution = "repaired: %s; reset to active" % reason
        elif decision == failures.STALE_CONFLICT:
            summary.conflicts.append(sid)
            LOG.error("stale_rebuild_conflict", host=record.name, server=sid,
                      reason=reason)
            resolution = "conflict: %s" % reason
        else:
            LOG.info("stale_rebuild_cleared", host=record.name, server=sid,
                     reason=reason)
            resolution = "clear: %s" % reason
        ctx.journal.stale_rebuild_resolved(row["id"], ctx.clock(), resolution)
    return summary
