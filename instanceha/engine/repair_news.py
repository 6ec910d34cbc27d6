"""What the sources hand instance repair, read as the policy's news
(issue 25): an instance notification's facts
(:class:`~instanceha.sources.nova_payloads.InstanceFacts`) as a
:class:`~instanceha.policy.instance_repair.ServerNews`, and a sweep's
server with its instance actions, and an agent's libvirt guest event
(:mod:`instanceha.heartbeat.guest`), each classified into a Verdict (or
None). Pure."""

from typing import Optional, Sequence

from instanceha.drivers.compute.base import InstanceAction, Server
from instanceha.policy import instance_repair as ir
from instanceha.sources import nova_payloads as np


def from_facts(facts: np.InstanceFacts) -> ir.ServerNews:
    event = facts.event
    if event.startswith(np.LEGACY_PREFIX):
        event = event[len(np.LEGACY_PREFIX):]
    user, project = facts.initiator_user, facts.initiator_project
    if not facts.has_initiator:
        user, project = ir.UNKNOWN_INITIATOR, None
    fault = facts.fault.split(":", 1)[0] if facts.fault else None
    return ir.ServerNews(
        event=event, server_id=facts.server_id, state=facts.state,
        task_state=facts.task_state,
        power_state=ir.power_state_name(facts.power_state),
        old_state=facts.old_state, old_task_state=facts.old_task_state,
        initiator_user=user, initiator_project=project, host=facts.host,
        fault=fault)


def notification_verdict(facts: np.InstanceFacts) -> Optional[ir.Verdict]:
    return ir.classify_notification(from_facts(facts))


def sweep_verdict(server: Server, actions: Sequence[InstanceAction]
                  ) -> Optional[ir.Verdict]:
    """``server``: the driver's Server; ``actions``: its InstanceAction
    list, newest first."""
    records = [ir.ActionRecord(a.action, a.user_id, a.project_id,
                               a.request_id, a.start_time) for a in actions]
    return ir.classify_actions(server.id, server.vm_state, server.task_state,
                               server.power_state, records,
                               host=server.host)


#: an agent's guest event (event, detail) -> verdict kind; any other
#: detail of a crash is a crash too
_AGENT = {("stopped", "failed"): ir.CRASHED, ("stopped", "crashed"): ir.CRASHED,
          ("suspended", "watchdog"): ir.HYPERVISOR_PAUSED,
          ("suspended", "ioerror"): ir.HYPERVISOR_PAUSED}


def agent_verdict(host: str, server: str, event: str,
                  detail: str) -> Optional[ir.Verdict]:
    """The verdict of a host agent's libvirt lifecycle event of
    ``server``: a crash or a failed guest is CRASHED, a pause on a
    watchdog or an I/O error HYPERVISOR_PAUSED (reported, as Nova's own
    news of it is); anything else None. Never by a user: a destroy (how
    a user's stop ends) is not sent by agents."""
    kind = ir.CRASHED if event == "crashed" else _AGENT.get((event, detail))
    if kind is None:
        return None
    return ir.Verdict(kind, server, "agent: libvirt %s/%s on %s"
                      % (event, detail, host), by_user=False, host=host)
