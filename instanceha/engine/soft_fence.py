"""Soft fencing: a host held by its agent's veto (Nova says nova-compute is
down, the host's authenticated beats say the host lives) gets its
nova-compute restarted by its agent, on a signed request from the acting
engine, as oVirt restarts vdsm. Only with ``[agent] restart_compute``; at
most ``restart_max`` requests per host per ``restart_window`` (the
heartbeat source counts and refuses beyond). One request per veto: when
the host enters it. Each request is journalled as an action row
``restart_compute`` with what was sent, or why not.
"""

import enum

import structlog

from instanceha.fsm import agent
from instanceha.fsm.states import State

LOG = structlog.get_logger("instanceha.engine")


class Kind(str, enum.Enum):
    """The journal's action kind of a request (not a state's action)."""
    RESTART_COMPUTE = "restart_compute"


def vetoed(rec):
    """Nova lost the heartbeat, the agent beats: only nova-compute is
    down."""
    return (rec.state is State.SUSPECT and agent.vetoes(rec)
            and not rec.heartbeat_ok)


def listener(conf, journal, source, clock):
    """An engine listener (old, new, event) that asks the host's agent to
    restart nova-compute when the host enters the veto."""
    def on_change(old, new, event):
        if not conf.agent.restart_compute or source is None:
            return
        if not vetoed(new) or vetoed(old):
            return
        why = "nova-compute down while the host's agent beats: %s" % (
            new.reason)
        text = source.send_request(new.name, why)
        outcome = "sent" if text.startswith("sent") else "not_sent"
        try:
            action_id = journal.action_started(new, Kind.RESTART_COMPUTE,
                                               clock())
            journal.action_finished(action_id, clock(), outcome, text)
        except Exception as e:   # noqa: BLE001 - the request is logged
            LOG.error("journal_write_failed", host=new.name,
                      action=Kind.RESTART_COMPUTE.value, reason=str(e))
        LOG.info("soft_fence", host=new.name, outcome=outcome,
                 reason=text, why=why)
    return on_change
