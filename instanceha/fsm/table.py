"""The transition table: the whole behaviour of instanceha in one place.

``RULES`` lists, per (state, event kind), the candidate transitions in
order; the first whose guard holds is taken. ``IGNORED`` lists the pairs
that are deliberately no-ops. A pair in neither raises, so adding a state
or an event forces a decision for every combination (tests walk it).

A rule is ``(src, kind, guard, dst, reason)``: ``guard`` is a name from
:data:`GUARDS`; ``reason`` is a format string filled from the event and
the record (``{event.reason}``, ``{record.attempts}``...). A rule whose
``dst`` equals its ``src`` only refreshes the reason, except where listed
in ``REENTER`` (then the state's entry action runs again).
"""

from typing import FrozenSet, List, Tuple

from instanceha.events import EventKind as E
from instanceha.fsm.states import RESULT_KINDS, State as S

ALWAYS = "always"

#: (src, kind, guard, dst, reason)
Rule = Tuple[S, E, str, S, str]

RULES: List[Rule] = [
    # -- detection -------------------------------------------------------
    (S.ACTIVE, E.HEARTBEAT_LOST, ALWAYS, S.SUSPECT,
     "heartbeat lost: {event.reason}"),
    (S.ACTIVE, E.FORCED_DOWN, ALWAYS, S.SUSPECT,
     "forced down by another actor: {event.reason}"),
    (S.ACTIVE, E.KDUMP, "kdump_enabled", S.SUSPECT,
     "kdump message received from the host"),
    # The heartbeat agent (fsm.agent): silent on every path, the host is
    # suspect at once; fenced only once corroborated (below).
    (S.ACTIVE, E.AGENT_SILENT, ALWAYS, S.SUSPECT,
     "heartbeat agent silent on every path: fencing once Nova misses a "
     "heartbeat it owes (or the BMC reads Off, or a majority of its peers "
     "do not hear it either) and the grace period is over"),
    (S.SUSPECT, E.HEARTBEAT_OK, "agent_refuted", S.ACTIVE,
     "agent silent, but Nova recorded a heartbeat since: the host lives "
     "(agent silent; never fenced for it)"),
    (S.SUSPECT, E.HEARTBEAT_OK, "agent_silent_suspect", S.SUSPECT,
     "{record.reason}"),
    (S.SUSPECT, E.HEARTBEAT_OK, "within_grace", S.ACTIVE,
     "heartbeat back within the grace period"),
    (S.SUSPECT, E.HEARTBEAT_OK, "agent_beating", S.ACTIVE,
     "heartbeat back: nova-compute reports again (after the grace period; "
     "its agent's beats held the host alive, never fenced)"),
    (S.SUSPECT, E.HEARTBEAT_OK, ALWAYS, S.ACTIVE,
     "heartbeat back after the grace period (the host was held, never "
     "fenced)"),
    (S.SUSPECT, E.AGENT_BEATING, "nova_ok", S.ACTIVE,
     "heartbeat agent beating again within the grace period"),
    (S.SUSPECT, E.AGENT_BEATING, ALWAYS, S.SUSPECT,
     "nova-compute down, host alive (agent): never fenced while its "
     "authenticated beats arrive"),
    # A kdump message is not authenticated: by default it only delays the
    # power-off until the dump is over (fence_after_dump). With action =
    # evacuate it records a proof, decided on the TICK that follows at
    # once, after the threshold check.
    (S.SUSPECT, E.KDUMP, "kdump_waits", S.SUSPECT,
     "kdump in progress: powering off once the dump is over "
     "([kdump] action = fence_after_dump)"),
    (S.SUSPECT, E.KDUMP, "kdump_enabled", S.SUSPECT,
     "kdump message received; waiting for Nova to report the service down"),
    # The veto: the agent's authenticated beats arrive, so the host lives
    # whatever Nova says (only nova-compute is down).
    (S.SUSPECT, E.TICK, "agent_vetoes", S.SUSPECT,
     "nova-compute down, host alive (agent): never fenced while its "
     "authenticated beats arrive"),
    (S.SUSPECT, E.TICK, "decision_due_but_threshold", S.SUSPECT,
     "not fencing: {event.reason}"),
    (S.SUSPECT, E.TICK, "decision_due_but_disabled_by_operator", S.SUSPECT,
     "not recovering: disabled by operator: {record.operator_disabled} "
     "([policy] recover_disabled_hosts = false)"),
    (S.SUSPECT, E.TICK, "decision_due_but_flapping", S.SUSPECT,
     "not fencing: flapping, lost {record.loss_count} times within "
     "[policy] flap_window; 'instanceha resume' the host to recover it"),
    (S.SUSPECT, E.OPERATOR_RESUME, ALWAYS, S.SUSPECT,
     "resumed by operator: flap history cleared, recovering as usual"),
    (S.SUSPECT, E.TICK, "kdump_proves_dead", S.FENCED,
     "kdump message: the dump kernel runs no guests, host counts as fenced "
     "([kdump] action = evacuate)"),
    (S.SUSPECT, E.TICK, "dump_overdue", S.FENCING,
     "kdump still running after [kdump] max_dump_time; powering off"),
    (S.SUSPECT, E.TICK, "dump_over", S.FENCING,
     "kdump messages stopped: the dump is over; powering off"),
    (S.SUSPECT, E.TICK, "power_off_due", S.FENCING,
     "heartbeat lost and the BMC reports power Off: fencing without "
     "waiting for the grace period"),
    (S.SUSPECT, E.TICK, "agent_fence_due_by_peers", S.FENCING,
     "heartbeat agent silent on every path, and {record.peers_unheard} of "
     "the {record.peers_watching} agents watching it as a peer do not hear "
     "it either (none does): fencing without waiting for Nova"),
    (S.SUSPECT, E.TICK, "agent_fence_due", S.FENCING,
     "heartbeat agent silent on every path, corroborated (Nova missed a "
     "heartbeat it owed, the BMC reads Off, or a majority of its peers do "
     "not hear it either); fencing"),
    (S.SUSPECT, E.TICK, "fence_due", S.FENCING,
     "no heartbeat for the grace period; fencing"),
    # -- fencing and isolation -------------------------------------------
    (S.FENCING, E.FENCE_OK, "storage_fenced", S.FENCED,
     "cut off its storage, not powered off: {event.reason}"),
    (S.FENCING, E.FENCE_OK, "fenced_without_power", S.FENCED,
     "proven dead, not by a power-off: {event.reason}"),
    (S.FENCING, E.FENCE_OK, ALWAYS, S.FENCED,
     "power off confirmed: {event.reason}"),
    (S.FENCING, E.FENCE_FAILED, ALWAYS, S.FAILED,
     "fencing failed, nothing evacuated: {event.reason}"),
    (S.FENCED, E.ISOLATE_OK, ALWAYS, S.EVACUATING,
     "compute service forced down and disabled; evacuating"),
    (S.FENCED, E.ISOLATE_FAILED, ALWAYS, S.FAILED,
     "could not force the compute service down: {event.reason}"),
    # -- evacuation -------------------------------------------------------
    (S.EVACUATING, E.EVACUATE_OK, ALWAYS, S.EVACUATED, "{event.reason}"),
    # Stopped at a server boundary for an operator's suspend, which is
    # applied next (it waits in the inbox).
    (S.EVACUATING, E.EVACUATE_FAILED, "stopped_for_operator", S.EVACUATING,
     "{event.reason}"),
    (S.EVACUATING, E.EVACUATE_NO_CAPACITY, "attempts_left", S.PENDING,
     "no capacity, retrying later: {event.reason}"),
    (S.EVACUATING, E.EVACUATE_NO_CAPACITY, ALWAYS, S.FAILED,
     "no capacity after {record.attempts} attempts: {event.reason}"),
    (S.EVACUATING, E.EVACUATE_FAILED, ALWAYS, S.FAILED,
     "evacuation failed: {event.reason}"),
    # A proof of death is never reused: each evacuation pass proves the
    # host dead again before its first request. Not dead now: nothing is
    # sent; the host is watched again (pending: a host that reports back
    # gets the cleanup check only, a silent one is fenced again through
    # the normal path after its boot time and grace period).
    (S.EVACUATING, E.REPROOF_FAILED, "attempts_left", S.PENDING,
     "not evacuating: the host is not proven dead now ({event.reason}); "
     "watching it: if it reports back, cleanup check only, else fenced "
     "again after its boot time and grace period"),
    (S.EVACUATING, E.REPROOF_FAILED, ALWAYS, S.FAILED,
     "not evacuating: the host is not proven dead after {record.attempts} "
     "attempts ({event.reason})"),
    # Before another attempt the host is proven dead again (the BMC confirms
    # Off; power-off is idempotent), unless it has reported back since it
    # was fenced: then it is alive and only Nova's cleanup is awaited.
    (S.PENDING, E.HEARTBEAT_OK, "returned", S.RECOVERING,
     "host reported back while pending; checking cleanup"),
    # Also where a resume or an adoption from Nova's marker (no journal)
    # left an isolated host to report first.
    (S.PENDING, E.TICK, "returned", S.RECOVERING,
     "host reported back while pending; checking cleanup"),
    # Only a host that waits for capacity: never a resumed host given
    # its boot time to report (that wait is a safety margin).
    (S.PENDING, E.CAPACITY, "waits_for_capacity", S.PENDING,
     "capacity may have appeared ({event.reason}): retrying at the next "
     "tick instead of after the back-off"),
    (S.PENDING, E.TICK, "retry_due_but_threshold", S.PENDING,
     "not re-fencing: {event.reason}"),
    (S.PENDING, E.TICK, "retry_due", S.FENCING,
     "re-proving the host dead before evacuation attempt "
     "{record.attempts_next}"),
    (S.PENDING, E.OPERATOR_RESUME, "returned", S.RECOVERING,
     "operator resumed; the host has reported back: checking cleanup"),
    (S.PENDING, E.OPERATOR_RESUME, ALWAYS, S.FENCING,
     "operator asked to retry: re-proving the host dead first"),
    # -- return of the host -------------------------------------------------
    (S.EVACUATED, E.HEARTBEAT_OK, "returned", S.RECOVERING,
     "compute service reporting again; checking Nova's cleanup"),

    (S.RECOVERING, E.CLEANUP_CONFIRMED, ALWAYS, S.ACTIVE, "{event.reason}"),
    (S.RECOVERING, E.CLEANUP_PENDING, ALWAYS, S.RECOVERING,
     "waiting for Nova to clean up: {event.reason}"),
    # A re-check keeps the reason of the last check: no new journal line.
    (S.RECOVERING, E.TICK, "retry_due", S.RECOVERING, "{record.reason}"),
    (S.RECOVERING, E.HEARTBEAT_LOST, ALWAYS, S.EVACUATED,
     "heartbeat lost again before the host was put back"),
    # -- failure that needs an operator --------------------------------------
    # A drained host that failed (its smoke test, its put-back) stays
    # failed while its heartbeats go on: its operator resumes it.
    (S.FAILED, E.HEARTBEAT_OK, "back_not_isolated_undrained", S.ACTIVE,
     "heartbeat back; the host was never forced down"),
    # -- planned drain (a live host emptied by migrations) ------------------
    # The drain pass runs its preflight first: refused (or stopped), the
    # host is put back as it was (UNDRAINING re-enables it only where the
    # drain disabled it).
    (S.ACTIVE, E.OPERATOR_DRAIN, ALWAYS, S.DRAINING,
     "draining by operator: {event.reason}"),
    (S.MAINTENANCE, E.OPERATOR_DRAIN, ALWAYS, S.DRAINING,
     "draining by operator: {event.reason}"),
    (S.DRAINING, E.DRAIN_OK, "then_decommission", S.DECOMMISSIONING,
     "drained ({event.reason}); decommissioning"),
    (S.DECOMMISSIONING, E.DECOMMISSION_OK, ALWAYS, S.DECOMMISSIONED,
     "decommissioned: {event.reason}"),
    (S.DECOMMISSIONING, E.DECOMMISSION_FAILED, ALWAYS, S.MAINTENANCE,
     "not decommissioned, in maintenance: {event.reason}"),
    (S.DRAINING, E.DRAIN_OK, ALWAYS, S.MAINTENANCE,
     "drained, in maintenance: {event.reason}"),
    (S.DRAINING, E.DRAIN_FAILED, ALWAYS, S.UNDRAINING,
     "drain stopped: {event.reason}; putting the host back"),
    (S.DRAINING, E.OPERATOR_RESUME, ALWAYS, S.UNDRAINING,
     "drain cancelled by operator: aborting migrations in flight, "
     "re-enabling the host"),
    (S.UNDRAINING, E.UNDRAIN_OK, "fail_back", S.FAILING_BACK,
     "{event.reason}; moving the drained servers back"),
    (S.UNDRAINING, E.UNDRAIN_OK, ALWAYS, S.ACTIVE, "{event.reason}"),
    # Back in service: a fail-back that fails leaves the host active
    # (its servers stay where the drain put them, said in the reason).
    (S.FAILING_BACK, E.FAIL_BACK_OK, ALWAYS, S.ACTIVE, "{event.reason}"),
    (S.FAILING_BACK, E.FAIL_BACK_FAILED, ALWAYS, S.ACTIVE,
     "fail-back incomplete: {event.reason}"),
    (S.UNDRAINING, E.UNDRAIN_FAILED, ALWAYS, S.FAILED,
     "could not put the drained host back: {event.reason}"),
    (S.MAINTENANCE, E.OPERATOR_RESUME, "drained", S.UNDRAINING,
     "resumed by operator: re-enabling the drained host"),
    # A drained host that could not be put back (its smoke test failed):
    # resumed once repaired, it is tried again.
    (S.FAILED, E.OPERATOR_RESUME, "drained_not_isolated", S.UNDRAINING,
     "resumed by operator: putting the drained host back again"),
    # -- operator ------------------------------------------------------------
    (S.SUSPENDED, E.TICK, "suspension_expired_returned", S.RECOVERING,
     "suspension expired; the host has reported back: checking cleanup"),
    (S.SUSPENDED, E.TICK, "suspension_expired_isolated", S.PENDING,
     "suspension expired: giving the host its boot time and grace period "
     "to report, else re-proving it dead and evacuating what is left"),
    (S.SUSPENDED, E.TICK, "suspension_expired", S.ACTIVE,
     "suspension expired"),
]

# A host that dies while servers migrate off it (a drain) or back onto
# it (a fail-back) is a failed host: proven dead, then what is left on it
# is evacuated (what moved already is not there).
for _s, _doing in ((S.DRAINING, "draining"),
                   (S.FAILING_BACK, "failing back")):
    RULES += [
        (_s, E.HEARTBEAT_LOST, ALWAYS, S.SUSPECT,
         "heartbeat lost while %s: {event.reason}" % _doing),
        (_s, E.FORCED_DOWN, ALWAYS, S.SUSPECT,
         "forced down by another actor while %s: {event.reason}" % _doing),
        (_s, E.AGENT_SILENT, ALWAYS, S.SUSPECT,
         "heartbeat agent silent on every path while %s" % _doing),
    ]

# Operator resume: a host instanceha isolated is either back (then only
# Nova's cleanup is awaited) or proven dead again before anything more is
# evacuated; any other host is simply watched again.
for _s in (S.FAILED, S.MAINTENANCE, S.SUSPENDED):
    RULES += [
        (_s, E.OPERATOR_RESUME, "returned", S.RECOVERING,
         "resumed by operator; the host has reported back: checking "
         "cleanup"),
        (_s, E.OPERATOR_RESUME, "isolated", S.PENDING,
         "resumed by operator: giving the host its boot time and grace "
         "period to report, else re-proving it dead and evacuating what is "
         "left"),
        (_s, E.OPERATOR_RESUME, ALWAYS, S.ACTIVE,
         "resumed by operator: watching the host again"),
    ]

# Operator suspend is allowed everywhere; maintenance only where no
# recovery is under way.
for _s in S:
    # Suspended again: the new length (or forever) replaces the old one.
    RULES.append((_s, E.OPERATOR_SUSPEND, ALWAYS, S.SUSPENDED,
                  "suspended by operator: {event.reason}"))
for _s in (S.ACTIVE, S.SUSPECT, S.FAILED, S.SUSPENDED):
    RULES.append((_s, E.OPERATOR_MAINTENANCE, ALWAYS, S.MAINTENANCE,
                  "maintenance by operator: {event.reason}"))

#: Self-transitions that run the state's entry action again.
REENTER = {(S.RECOVERING, E.TICK)}



def _ignored() -> FrozenSet[Tuple[S, E]]:
    declared = {(r[0], r[1]) for r in RULES}
    ignored = set()
    for s in S:
        for k in E:
            if (s, k) in declared:
                continue
            # Results of actions belong to the state that started them; in
            # any other state they are stale (e.g. after an operator stepped
            # in) and are dropped.
            if k in RESULT_KINDS:
                ignored.add((s, k))
            # Observations that change nothing for the state.
            elif k in (E.HEARTBEAT_OK, E.HEARTBEAT_LOST, E.FORCED_DOWN,
                       E.KDUMP, E.TICK, E.POWER_OFF, E.POWER_ON,
                       E.CAPACITY, E.AGENT_BEATING, E.AGENT_SILENT,
                       E.AGENT_PEERS):
                ignored.add((s, k))
            # Operator commands that do not apply to the state.
            elif k in (E.OPERATOR_RESUME, E.OPERATOR_MAINTENANCE,
                       E.OPERATOR_SUSPEND, E.OPERATOR_DRAIN):
                ignored.add((s, k))
    return frozenset(ignored)


#: Pairs that are deliberately no-ops, derived by category above so that the
#: reason for ignoring is stated once; :func:`explain_ignored` says which.
IGNORED = _ignored()


def explain_ignored(state: S, kind: E) -> str:
    if kind in RESULT_KINDS:
        return "stale action result for state %s" % state.value
    if kind in (E.OPERATOR_RESUME, E.OPERATOR_MAINTENANCE,
                E.OPERATOR_SUSPEND, E.OPERATOR_DRAIN):
        return "operator command does not apply in state %s" % state.value
    return "observation changes nothing in state %s" % state.value
