"""What the sources hand instance repair, read as the policy's news
(issue 25): an instance notification's facts
(:class:`~instanceha.sources.nova_payloads.InstanceFacts`) as a
:class:`~instanceha.policy.instance_repair.ServerNews`, and a sweep's
server with its instance actions, each classified into a Verdict (or
None). Pure."""

from typing import Optional, Sequence

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


def sweep_verdict(server, actions: Sequence) -> Optional[ir.Verdict]:
    """``server``: the driver's Server; ``actions``: its InstanceAction
    list, newest first."""
    records = [ir.ActionRecord(a.action, a.user_id, a.project_id,
                               a.request_id, a.start_time) for a in actions]
    return ir.classify_actions(server.id, server.vm_state, server.task_state,
                               server.power_state, records,
                               host=server.host)
