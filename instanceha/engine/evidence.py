"""What each host's BMC has been seen to report, kept per host and fencing
method (instanceha.policy.proof decides what it means).

Fed by the engine from the reads it is handed (the audit, the power watch,
the read when a heartbeat is lost, the read before a power-off) and from
Nova's heartbeats; read by the fence action (may an Off prove this host
dead?), the re-proof before an evacuation, and status (untrusted entries
are UNPROTECTED). Every change is written to the journal, so a restart or
a takeover keeps it: a host that died while instanceha was down is still
recovered through a BMC seen On before.
"""

import dataclasses
import threading
from typing import (Callable, Dict, Iterable, List, Mapping, Optional,
                    Protocol, Set, Tuple)

import structlog

from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.base import PowerState
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.events import EventKind as E
from instanceha.events import (AgentReport, Event, PowerReading,
                               ServiceReport)
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import RUNNING_STATES
from instanceha.journal import Journal
from instanceha.policy import proof
from instanceha.policy.proof import Evidence

LOG = structlog.get_logger("instanceha.evidence")

#: The journal row (in place of a method key) holding what the host's
#: agent reported about its machine: {"system_uuid": ...}.
AGENT_KEY = "agent"
#: (method label, verdict, text) of one method: see identities
Identity = Tuple[str, str, str]


class _Ports(Protocol):
    """What :func:`note` uses of the context (engine.context.Context)."""
    @property
    def evidence(self) -> "EvidenceStore": ...

    def bmc_for(self, host: str) -> Optional[BMC]: ...


def _label(method: BMC) -> str:
    return "BMC %s (%s)" % (method.address or method.host, method.driver) \
        if method.address else "BMC of driver %s" % method.driver


class EvidenceStore:

    def __init__(self, journal: Journal, clock: Callable[[], float]) -> None:
        self._journal = journal
        self._clock = clock
        self._lock = threading.Lock()
        #: host name -> {method key: Evidence}
        self._ev: Dict[str, Dict[str, Evidence]] = {}
        #: system UUID -> {host name: methods whose evidence names it}
        self._by_uuid: Dict[str, Dict[str, int]] = {}
        #: hosts a BMC reported Off while Nova said they were up
        self._suspected: Set[str] = set()
        #: host name -> the system UUID its agent reported (kept in the
        #: journal under AGENT_KEY: a dead host's agent says nothing)
        self._host_uuid: Dict[str, str] = {}

    def load(self) -> int:
        """Merge what the journal kept (at start, and when elected)."""
        try:
            kept = self._journal.evidence()
        except Exception as e:   # noqa: BLE001 - evidence only adds safety
            LOG.error("evidence_unreadable", reason=str(e),
                      effect="BMCs count as never seen On until read again")
            return 0
        with self._lock:
            for (host, key), data in kept.items():
                if key == AGENT_KEY:
                    found = (data or {}).get("system_uuid")
                    if found:
                        self._host_uuid[host] = found
                    continue
                self._store(host, key, proof.Evidence.from_dict(data))
        return len(kept)

    def _store(self, host: str, key: str, new: Evidence) -> None:
        """Keep ``new`` for (host, key), and the UUID index with it.
        Called under the lock."""
        old = self._ev.setdefault(host, {}).get(key)
        for uuid in set(old.uuids if old else ()):
            hosts = self._by_uuid.get(uuid, {})
            hosts[host] = hosts.get(host, 0) - 1
            if hosts[host] <= 0:
                del hosts[host]
            if not hosts:
                self._by_uuid.pop(uuid, None)
        for uuid in set(new.uuids if new else ()):
            hosts = self._by_uuid.setdefault(uuid, {})
            hosts[host] = hosts.get(host, 0) + 1
        self._ev[host][key] = new
        if any(e is not None and e.suspicion is not None
               for e in self._ev[host].values()):
            self._suspected.add(host)
        else:
            self._suspected.discard(host)

    def get(self, host: str, method: BMC) -> Optional[Evidence]:
        return self._get(host, inventory.method_key(method))

    def _get(self, host: str, key: str) -> Optional[Evidence]:
        with self._lock:
            return self._ev.get(host, {}).get(key)

    def _put(self, host: str, key: str, old: Optional[Evidence],
             new: Evidence) -> None:
        if new == old:
            return
        with self._lock:
            self._store(host, key, new)
        try:
            self._journal.evidence_saved(host, key, self._clock(),
                                         new.to_dict())
        except Exception as e:   # noqa: BLE001 - kept in memory meanwhile
            LOG.error("evidence_not_journalled", host=host, method=key,
                      reason=str(e))

    def _host_keys(self, host: str) -> List[Tuple[str, Evidence]]:
        with self._lock:
            return list(self._ev.get(host, {}).items())

    def suspected(self) -> Set[str]:
        """Hosts a BMC reported Off while Nova said they were up: the next
        heartbeat Nova records decides whether that BMC is truthful."""
        with self._lock:
            return set(self._suspected)

    # -- observations -----------------------------------------------------------
    def read(self, host: str, method: BMC, power: str, by: str,
             nova_up: bool = False,
             after: Optional[proof.ServiceSeen] = None) -> None:
        """A read of ``power`` ("on"/"off") from ``method`` of ``host``."""
        self.read_key(host, inventory.method_key(method), power, by, nova_up,
                      after)

    def read_key(self, host: str, key: str, power: str, by: str,
                 nova_up: bool = False,
             after: Optional[proof.ServiceSeen] = None
                 ) -> None:
        """As :meth:`read`, for a method named by its key
        (inventory.method_key). ``nova_up`` and ``after``: see
        proof.read."""
        old = self._get(host, key)
        new = proof.read(old, power, self._clock(), by, nova_up, after)
        if new.suspicion is not None and (old is None
                                          or old.suspicion is None):
            LOG.warning("bmc_off_while_up", host=host, method=key, by=by,
                        reason="the BMC reports power Off while Nova "
                               "reports the compute up: untrusted if Nova "
                               "records another heartbeat")
        self._put(host, key, old, new)

    def heartbeat(self, host: str, updated_at: Optional[float],
                  status: Optional[str] = None,
                  disabled_reason: Optional[str] = None,
                  ours: Optional[float] = None) -> None:
        for key, old in self._host_keys(host):
            new = proof.heartbeat(old, updated_at, status, disabled_reason,
                                  ours, label="BMC %s" % key)
            if new.untrusted and not old.untrusted:
                LOG.error("bmc_untrusted", host=host, method=key,
                          reason=new.untrusted,
                          effect="the host is UNPROTECTED: never fenced or "
                                 "evacuated through this entry")
            self._put(host, key, old, new)

    def lost(self, host: str) -> None:
        for key, old in self._host_keys(host):
            self._put(host, key, old, proof.lost(old))

    def identity_key(self, host: str, key: str,
                     found: Optional[Mapping[str, object]]) -> None:
        """What the BMC of method ``key`` reported about its machine."""
        old = self._get(host, key)
        self._put(host, key, old, proof.identity(old, found))

    def agent_uuid(self, host: str, system_uuid: Optional[str]) -> None:
        """The host's agent reported its machine's ``system_uuid``
        (canonical; None says nothing: an older agent, an unreadable
        file; the last one reported stands). Kept in the journal, so
        that the host's methods stay bound (or refused) after a restart
        or a takeover, when its dead agent reports nothing."""
        if not system_uuid:
            return
        with self._lock:
            old = self._host_uuid.get(host)
            if old == system_uuid:
                return
            self._host_uuid[host] = system_uuid
        LOG.info("host_system_uuid", host=host, system_uuid=system_uuid,
                 before=old, reason="reported by the host's agent: its "
                 "fencing methods are bound to BMCs reporting this UUID")
        try:
            self._journal.evidence_saved(host, AGENT_KEY, self._clock(),
                                         {"system_uuid": system_uuid})
        except Exception as e:   # noqa: BLE001 - kept in memory meanwhile
            LOG.error("evidence_not_journalled", host=host,
                      method=AGENT_KEY, reason=str(e))

    def host_uuid(self, host: str) -> Optional[str]:
        """The system UUID the host's agent reported, or None."""
        with self._lock:
            return self._host_uuid.get(host)

    # -- answers ----------------------------------------------------------------
    def same_machine(self, a: Optional[BMC], b: Optional[BMC]) -> bool:
        """Entries ``a`` and ``b`` (of different hosts) reach one machine
        by the system identity their BMCs reported (a UUID in common):
        e.g. one by its Redfish, the other by its IPMI address."""
        if a is None or b is None:
            return False
        mine = [self.get(a.host, m) for m in a.methods]
        theirs = [self.get(b.host, m) for m in b.methods]
        return any(proof.same_machine(x, y) for x in mine for y in theirs)

    def same_machine_hosts(self, bmc: Optional[BMC]) -> Set[str]:
        """Hosts (other than ``bmc``'s) that :meth:`same_machine` may
        find on one machine with ``bmc``: those whose BMCs reported a
        system UUID that ``bmc``'s reported (from an index, not by
        reading every host's evidence)."""
        if bmc is None:
            return set()
        mine = [self.get(bmc.host, m) for m in bmc.methods]
        uuids = {u for ev in mine if ev is not None for u in ev.uuids}
        with self._lock:
            found = {h for u in uuids for h in self._by_uuid.get(u, ())}
        found.discard(bmc.host)
        return found

    def hostnames(self, bmc: Optional[BMC]) -> Set[str]:
        """The host names ``bmc``'s methods reported for their machine."""
        if bmc is None:
            return set()
        out = set()
        for m in bmc.methods:
            ev = self.get(bmc.host, m)
            if ev is not None and ev.hostname:
                out.add(proof.short_name(ev.hostname))
        return out

    def machine(self, host: str, method: BMC) -> Tuple[str, str]:
        """(proof.VERIFIED / NOT_VERIFIED / MISMATCH, text): is the
        machine behind ``method``'s BMC the host (its system UUID the one
        the host's agent reports)? See proof.machine."""
        return proof.machine(self.get(host, method), self.host_uuid(host))

    def identities(self, bmc: Optional[BMC]) -> List[Identity]:
        """[(method label, verdict, text)] for each method of ``bmc`` that
        reaches a BMC (for status and ``instanceha check``)."""
        if bmc is None:
            return []
        return self.identities_of([bmc]).get(bmc.host, [])

    def identities_of(self, bmcs: Iterable[Optional[BMC]]
                      ) -> Dict[str, List[Identity]]:
        """{host: identities(bmc)} for the entries ``bmcs`` (None skipped),
        under one hold of the lock: status asks for every host's at each
        write, thousands of them."""
        out = {}
        machine = proof.machine
        with self._lock:
            for bmc in bmcs:
                if bmc is None:
                    continue
                host_uuid = self._host_uuid.get(bmc.host)
                held = self._ev.get(bmc.host, {})
                out[bmc.host] = [
                    (_label(m),) + machine(
                        held.get(inventory.method_key(m)), host_uuid)
                    for m in bmc.methods if m.driver != "noop"]
        return out

    def untrusted(self, bmc: Optional[BMC]) -> Optional[str]:
        """Why ``bmc`` (an inventory entry) may not prove its host dead, or
        None: a method whose BMC reported Off while the host was up, or
        whose machine is not the host's (its system UUID is not the one
        the host's agent reports)."""
        if bmc is None:
            return None
        with self._lock:
            return self._untrusted(bmc)

    def _untrusted(self, bmc: BMC) -> Optional[str]:
        """:meth:`untrusted`, under the lock."""
        held = self._ev.get(bmc.host, {})
        found = [(method, held.get(inventory.method_key(method)))
                 for method in bmc.methods]
        for method, ev in found:
            if ev is not None and ev.untrusted:
                return "%s: %s" % (_label(method), ev.untrusted)
        host_uuid = self._host_uuid.get(bmc.host)
        if host_uuid:
            for method, ev in found:
                verdict, text = proof.machine(ev, host_uuid)
                if verdict == proof.MISMATCH:
                    return "%s: %s" % (_label(method), text)
        return None

    def untrusted_hosts(
            self, inventory_map: Optional[Mapping[str, Optional[BMC]]]
    ) -> Dict[str, str]:
        """{host: reason} for every entry of ``inventory_map`` that may not
        prove its host dead (for status and metrics: UNPROTECTED)."""
        out = {}
        with self._lock:
            found = {host: self._untrusted(bmc)
                     for host, bmc in (inventory_map or {}).items()
                     if bmc is not None}
        for host, why in found.items():
            if why:
                out[host] = "BMC untrusted: " + why
        return out

    def off_proves(self, host: str, method: BMC, isolated: bool = False
                   ) -> Tuple[bool, str]:
        return proof.off_proves(self.get(host, method), isolated)


def note(ctx: _Ports, rec: HostRecord, event: Event) -> Event:
    """Keep what a BMC read or a heartbeat says about the host's BMC
    (the context's EvidenceStore); returns the event to step, a POWER_OFF saying
    whether that Off may count as the second witness of death."""
    ev = ctx.evidence
    payload = event.payload
    if event.kind in (E.POWER_ON, E.POWER_OFF):
        reading = (payload if isinstance(payload, PowerReading)
                   else PowerReading())
        # Off while Nova says up is suspicious only of a host instanceha
        # leaves running untouched: one it is proving dead, fenced or
        # evacuated (or an operator holds) may be Off by that doing.
        nova_up = reading.nova_up and rec.state in RUNNING_STATES
        for key, power in reading.readings:
            ev.read_key(rec.name, key, power, reading.by or event.source,
                        nova_up, reading.after)
        for key, found in reading.identities:
            ev.identity_key(rec.name, key, found)
        if event.kind is E.POWER_OFF:
            bmc = ctx.bmc_for(rec.name)
            keys = [k for k, p in reading.readings
                    if p == PowerState.OFF.value]
            vouched = bool(keys) and bmc is not None \
                and ev.untrusted(bmc) is None and all(
                    ev.off_proves(rec.name, m)[0] for m in bmc.methods
                    if inventory.method_key(m) in keys)
            if vouched != reading.vouched:
                event = dataclasses.replace(event, payload=dataclasses.replace(
                    reading, vouched=vouched))
            if not vouched:
                LOG.info("power_off_not_evidence", host=rec.name,
                         reason="the BMC reporting Off was never seen "
                                "reporting On for this host (or is "
                                "untrusted): no shortcut")
    elif event.kind is E.HEARTBEAT_OK:
        report = (payload if isinstance(payload, ServiceReport)
                  else ServiceReport())
        ev.heartbeat(rec.name, report.updated_at, report.status,
                     report.disabled_reason,
                     ours=rec.written_at if rec.isolated else None)
    elif event.kind in (E.HEARTBEAT_LOST, E.FORCED_DOWN):
        ev.lost(rec.name)
    elif event.kind is E.AGENT_BEATING and isinstance(payload, AgentReport):
        ev.agent_uuid(rec.name, payload.system_uuid)
    return event
