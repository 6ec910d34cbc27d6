"""What status shows of the engine: hosts, the cloud's fencing gate, the
sources' health, unprotected hosts, degraded parts, and the progress of
the work running for a host. Read-only; built from the engine's records
under its lock and from its collaborators."""

from typing import (Callable, Dict, Hashable, Mapping, Optional, Protocol,
                    Sequence, Tuple)

from instanceha.drivers.fencing import inventory
from instanceha.engine.context import Context
from instanceha.engine.fencing_gate import FencingGate
from instanceha.engine.journal_health import JournalHealth
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import ENTRY_ACTION, State


class EngineView(Protocol):
    """What status reads of the engine (engine.Engine)."""
    @property
    def ctx(self) -> Context: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def started_at(self) -> float: ...

    @property
    def health(self) -> Mapping[str, Callable[[], object]]: ...

    @property
    def fencing(self) -> FencingGate: ...

    @property
    def journal_health(self) -> JournalHealth: ...

    @property
    def unprotected(self) -> Callable[[], Mapping[str, str]]: ...

    @property
    def status_extra(self) -> Callable[[], Mapping[str, object]]: ...

    def cluster_status(self) -> Tuple[bool, str]: ...


def snapshot(engine: EngineView, hosts: Sequence[HostRecord],
             errors: Mapping[Hashable, Optional[str]]) -> Dict[str, object]:
    """``hosts``: the records sorted by name; ``errors``: key (a host's
    id, or the key of other work) -> the retrying action's last error."""
    ok, why = engine.cluster_status()
    gate = engine.fencing.summary({r.id: r.name for r in hosts})
    identities, counts = fencing_identity(engine, hosts)
    return {
        "generated_at": engine.clock(),
        "started_at": engine.started_at,
        "cluster": {"ok": ok, "reason": why},
        "storm": gate["storm"],
        "rate_limit": gate["rate_limit"],
        "hosts": [{"id": r.id, "name": r.name, "state": r.state.value,
                   "since": r.since, "reason": r.reason,
                   "heartbeat_ok": r.heartbeat_ok, "busy": r.busy,
                   "retrying": errors.get(r.id),
                   "operator_disabled": r.operator_disabled,
                   "agent": agent_text(r),
                   "identity": identities.get(r.name),
                   **_fenced_by(r),
                   **_work(engine, r)}
                  for r in hosts],
        "sources": {name: fn() for name, fn in engine.health.items()},
        "unprotected": unprotected(engine),
        "fencing_identity": counts,
        "degraded": engine.journal_health.degraded(),
        **_repair(engine),
        **_failover(engine),
        **engine.status_extra(),
    }


def _fenced_by(rec: HostRecord) -> Dict[str, object]:
    """Which fencing level fenced the host and what that proved, while its
    recovery lasts (nothing for an active host)."""
    if rec.fenced_level is None or rec.state is State.ACTIVE:
        return {}
    out: Dict[str, object] = {"level": rec.fenced_level,
                              "proof": rec.proven_by,
                              "protects": list(rec.storage_protects)}
    if rec.fenced_how:
        out["how"] = rec.fenced_how
    return {"fenced_by": out}


def _repair(engine: EngineView) -> Dict[str, object]:
    """Instance repair's cases and hold, while it is on."""
    repair = getattr(engine, "repair", None)
    if repair is None or not repair.enabled:
        return {}
    return {"instance_repair": repair.snapshot()}


def _failover(engine: EngineView) -> Dict[str, object]:
    """The last failover capacity measure (engine.failover), once one
    was made."""
    failover = getattr(engine, "failover", None)
    view = failover.snapshot() if failover is not None else None
    return {} if view is None else {"failover_capacity": view}


def _work(engine: EngineView, rec: HostRecord) -> Dict[str, object]:
    """A drain's or fail-back's progress, server by server, while one
    runs (nothing otherwise)."""
    run = getattr(engine.ctx, "runs", {}).get(rec.id) if rec.busy else None
    view = getattr(run, "servers_view", None)
    if view is None:
        return {}
    return {"work": running_work(engine.ctx, rec), "servers": view()}


def agent_text(rec: HostRecord) -> Optional[str]:
    """What the host's heartbeat agent says, in a few words (None: no
    agent heard since start)."""
    if not rec.agent:
        return None
    if rec.agent == "silent":
        return ("agent silent" if rec.heartbeat_ok else
                "agent silent, Nova reports the service down")
    if not rec.heartbeat_ok:
        return "nova-compute down, host alive (agent)"
    if rec.agent_compute is False:
        return "agent beating; it says nova-compute is not running"
    return "agent beating"


def fencing_identity(engine: EngineView, hosts: Sequence[HostRecord]
                     ) -> Tuple[Dict[str, str], Dict[str, int]]:
    """({host name: text}, {verdict: methods}): is the machine behind each
    fencing method the host (its BMC's system UUID the one the host's
    agent reports)? The text is the verdict ("verified", "not verified",
    "mismatch") when every method of the host's entry has the same, else
    "<method>: <verdict>; ...". Hosts without an entry are left out."""
    ctx = engine.ctx
    counts = {"verified": 0, "not_verified": 0, "mismatch": 0}
    out = {}
    default = ctx.conf.fencing.default_driver     # read once, not per host
    every = ctx.evidence.identities_of(
        inventory.entry_for(ctx.inventory, rec.name, default)
        for rec in hosts)
    for rec in hosts:
        found = every.get(rec.name)
        if not found:
            continue
        for _, verdict, _ in found:
            key = verdict.replace(" ", "_")
            counts[key] = counts.get(key, 0) + 1
        verdicts = {v for _, v, _ in found}
        out[rec.name] = verdicts.pop() if len(verdicts) == 1 else "; ".join(
            "%s: %s" % (label, v) for label, v, _ in found)
    return out, counts


def unprotected(engine: EngineView) -> Dict[str, str]:
    """{host: why it could not be fenced now}: the readiness audit's
    verdicts, and every entry whose BMC reported Off while its host was
    up (never fenced through it until the inventory is fixed)."""
    ctx = engine.ctx
    out = dict(engine.unprotected())
    for host, why in ctx.evidence.untrusted_hosts(ctx.inventory).items():
        out[host] = why if host not in out else "%s; %s" % (why, out[host])
    return out


def running_work(ctx: Context, rec: Optional[HostRecord]) -> Optional[str]:
    """What is still running for ``rec``'s host, in a few words, or None."""
    if rec is None or not rec.busy:
        return None
    action = ENTRY_ACTION.get(rec.state)
    text = action.value if action else rec.state.value
    run = ctx.runs.get(rec.id)
    if run is not None:
        text += ": " + run.status_text()
    return text
