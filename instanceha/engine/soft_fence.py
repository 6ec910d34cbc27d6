"""Soft fencing: a host held by its agent's veto (Nova says nova-compute is
down, the host's authenticated beats say the host lives) gets its
nova-compute restarted by its agent, on a signed request from the acting
engine, as oVirt restarts vdsm. Only with ``[agent] restart_compute``; at
most ``restart_max`` requests per host per ``restart_window`` (the
heartbeat source counts and refuses beyond).

An action like the others (``Action.RESTART_COMPUTE`` in fsm/states.py
``ACTIONS``): the state machine starts it on the host's transition into
the veto, once per entry; the engine journals its attempt before it runs,
runs it only while this member may act and the host is still vetoed,
and backs off if it raises. Its row ``restart_compute`` says what was
sent, or why not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from instanceha.engine.passes import Done
from instanceha.fsm.record import HostRecord

if TYPE_CHECKING:
    from instanceha.engine.context import Context

LOG = structlog.get_logger("instanceha.engine")


def restart_compute(ctx: Context, rec: HostRecord) -> Done:
    """Ask the vetoed host's agent to restart nova-compute
    (``ctx.agent_request``): Done("sent" or "not_sent", what was sent or
    why not)."""
    why = "nova-compute down while the host's agent beats: %s" % (
        rec.reason)
    text = ctx.agent_request(rec.name, why)
    outcome = "sent" if text.startswith("sent") else "not_sent"
    LOG.info("soft_fence", host=rec.name, outcome=outcome, reason=text,
             why=why)
    return Done(outcome, text)
