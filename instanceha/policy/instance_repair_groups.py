"""Restart groups and service-owned servers, for instance repair and the
host path; pure.

**Restart groups** (upstream InstanceHA's orchestrated phases): a server's
metadata key (``[instance_repair] restart_group_key``) holds an integer,
0 or more. Within one project, the servers of group N+1 are sent only once
every server of the lower groups is settled (ACTIVE again, or given up):
a database (group 0) before its application servers (group 1). A server
without the key waits for nobody and nobody waits for it. Groups are per
project because server metadata is its owner's: one tenant's groups never
hold another's servers.

**Exclusions**: servers of a service that fails over by itself (Octavia's
amphorae, and the like), by project or by tag (of the server or of its
image), are neither repaired nor evacuated: moving them behind their
service's back breaks it.
"""

import dataclasses
from typing import Dict, Iterable, List, Optional, Tuple

from instanceha.policy.facts import ERROR, SERVER, Problem, ServerFacts, \
    describe
from instanceha.policy.instance_repair_settings import Settings


def restart_group_of(server: ServerFacts, settings: Settings
                     ) -> Tuple[Optional[int], Optional[Problem]]:
    """(group, None); (None, None) when the server has none; (None,
    Problem) when its value is not an integer 0 or more (the server then
    has no group: it waits for nobody)."""
    key = settings.restart_group_key
    metadata = server.metadata or {}
    if key not in metadata:
        return None, None
    raw = metadata[key]
    text = raw.strip() if isinstance(raw, str) else None
    if text is not None and text.isdigit() and text.isascii():
        return int(text), None
    return None, Problem(
        ERROR, SERVER, server.id, server.name, key, str(raw),
        "%s: %s=%r is not a restart group (an integer, 0 or more); the "
        "server is in no group until fixed" % (
            describe(SERVER, server.name, server.id), key, raw))


@dataclasses.dataclass(frozen=True)
class Member:
    """A server to be sent (repaired or evacuated) in one pass."""
    server_id: str
    project_id: Optional[str]
    group: Optional[int]
    #: nothing more to wait for: ACTIVE again, or given up (failed,
    #: skipped, deleted). A server that will never be ACTIVE must be
    #: counted settled, or the groups above it wait for ever.
    settled: bool = False


def release(members: Iterable[Member]
            ) -> Tuple[Tuple[str, ...], Dict[str, str]]:
    """(the unsettled servers that may be sent now, {server: why it
    waits}). In each project only the lowest group with an unsettled
    server goes; servers without a group always go."""
    members = list(members)
    lowest: Dict[Optional[str], int] = {}
    pending: Dict[Tuple[Optional[str], int], List[str]] = {}
    for m in members:
        if m.settled or m.group is None:
            continue
        if m.project_id not in lowest or m.group < lowest[m.project_id]:
            lowest[m.project_id] = m.group
        pending.setdefault((m.project_id, m.group), []).append(m.server_id)
    go: List[str] = []
    waits: Dict[str, str] = {}
    for m in members:
        if m.settled:
            continue
        first = lowest.get(m.project_id)
        if m.group is None or first is None or m.group <= first:
            go.append(m.server_id)
            continue
        ahead = sorted(pending[(m.project_id, first)])
        names = ", ".join(ahead[:5]) + (
            ", ... (%d more)" % (len(ahead) - 5) if len(ahead) > 5 else "")
        waits[m.server_id] = (
            "restart group %d waits for group %d of project %s: %d server(s) "
            "not ACTIVE yet (%s)" % (m.group, first, m.project_id or "?",
                                     len(ahead), names))
    return tuple(go), waits


def excluded(server: ServerFacts, settings: Settings,
             project_id: Optional[str] = None) -> Optional[str]:
    """Why ``server`` is left to its own service, or None. ``project_id``:
    the server's project (Nova's ``tenant_id``); taken from the facts when
    they carry one."""
    s = settings
    project = project_id or getattr(server, "project_id", None)
    if project and project in s.excluded_projects:
        return ("project %s is in [instance_repair] excluded_projects: a "
                "service that fails over by itself owns it" % project)
    for tag in sorted(set(server.tags or ()) & s.excluded_tags):
        return ("server tag %s is in [instance_repair] excluded_tags: a "
                "service that fails over by itself owns it" % tag)
    image = server.image
    if image is not None:
        for tag in sorted(set(image.tags or ()) & s.excluded_tags):
            return ("image %s has the tag %s, in [instance_repair] "
                    "excluded_tags: a service that fails over by itself "
                    "owns the server" % (image.name or image.id, tag))
    return None
