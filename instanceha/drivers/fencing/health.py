"""What a BMC says about its machine's hardware health: a small typed
record, and the pure readers of Redfish resources and ipmitool output.

A fencing driver's :meth:`health` returns a :class:`Health` (the worst
severity and the degraded components, each with why) or None when it
cannot tell. Nothing here does I/O: the drivers read, these functions
judge what was read. The record itself is in
:mod:`instanceha.util.hardware`.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from instanceha.util.hardware import Component, Health, Severity  # noqa: F401


# -- Redfish -----------------------------------------------------------------

def status_of(name: str, resource: Mapping[str, Any],
              rollup: bool = False) -> Optional[Component]:
    """The Component of one Redfish resource's ``Status`` (its ``Health``,
    and with ``rollup`` its ``HealthRollup`` too: the worse of the two),
    or None when it reports neither, is absent or disabled."""
    status = resource.get("Status") if isinstance(resource, Mapping) \
        else None
    if not isinstance(status, Mapping):
        return None
    if status.get("State") in ("Absent", "Disabled", "UnavailableOffline"):
        return None
    # (keys matched in any case: some BMCs, and sushy-tools, spell it
    # HealthRollUp)
    keys = {str(k).lower(): k for k in status}
    found = [(k, Severity.parse(status.get(keys.get(k.lower(), k))))
             for k in (("Health", "HealthRollup") if rollup else ("Health",))]
    found = [(k, s) for k, s in found if s is not None]
    if not found:
        return None
    key, worst = max(found, key=lambda ks: ks[1].rank)
    return Component(name, worst, "Redfish Status.%s %s" % (key, worst.value))


def _label(kind: str, member: Mapping[str, Any], index: int) -> str:
    ident = member.get("Name") or member.get("MemberId") \
        or member.get("Id") or str(index)
    return "%s %s" % (kind, ident)


def redfish_health(system: Mapping[str, Any],
                   parts: Sequence[Tuple[str, Sequence[Mapping[str, Any]]]]
                   ) -> Optional[Health]:
    """The Health of a Redfish ComputerSystem (its JSON) and its parts:
    ``parts`` is [(kind, [member JSON])] read from the links the BMC
    offers (``power supply`` from Chassis Power or PowerSubsystem, ``fan``
    from Thermal or ThermalSubsystem, ``memory``). None when nothing read
    reports a health."""
    seen: List[Component] = []
    top = status_of("system", system, rollup=True)
    if top is not None:
        seen.append(top)
    for kind, members in parts:
        for i, member in enumerate(members):
            c = status_of(_label(kind, member, i), member)
            if c is not None:
                seen.append(c)
    if not seen:
        return None
    return Health.of(seen)


# -- IPMI ----------------------------------------------------------------------

#: ipmitool's sensor status words: non-critical, critical, non-recoverable
_SDR_WARNING = {"nc", "lnc", "unc"}
_SDR_CRITICAL = {"cr", "lcr", "ucr", "nr", "lnr", "unr"}
#: SEL event words that say a part failed (a SEL keeps history: only the
#: entries not deasserted since count, and only as Warning)
_SEL_FAULTS = ("fail", "lost", "uncorrectable", "critical", "fault",
               "predictive", "non-recoverable")


def _blocks(stdout: str) -> List[Dict[str, str]]:
    """ipmitool's verbose output (``-v``): blocks of ``Key : value``
    lines, a blank line between two; keys lower-cased."""
    out: List[Dict[str, str]] = []
    block: Dict[str, str] = {}
    for line in stdout.splitlines() + [""]:
        key, sep, value = line.partition(":")
        if sep and "|" not in line and key.strip():
            block.setdefault(key.strip().lower(), value.strip())
        elif not line.strip() and block:
            out.append(block)
            block = {}
    return out


def _threshold(status: str) -> Optional[Severity]:
    """A sensor status in either form (``unc``, ``Upper Non-Critical``)."""
    low = status.strip().lower()
    if low in _SDR_CRITICAL or ("critical" in low and "non-critical"
                                not in low) or "non-recoverable" in low:
        return Severity.CRITICAL
    if low in _SDR_WARNING or "non-critical" in low:
        return Severity.WARNING
    return None


def ipmi_sdr_health(stdout: str) -> List[Component]:
    """Components from ``ipmitool sdr elist`` (or ``sdr list``): each line
    ``name | ... | status | ...``; a status of nc/lnc/unc is Warning,
    cr/lcr/ucr/nr/lnr/unr Critical; ok and ns (no reading) are not
    degraded. The verbose form (``-v``: a block per sensor, ``Sensor ID``
    and ``Status``) is read too."""
    out = []
    for block in _blocks(stdout):
        name = block.get("sensor id", "").split(" (")[0]
        sev = _threshold(block.get("status", ""))
        if name and sev is not None:
            out.append(Component("sensor %s" % name, sev,
                                 "IPMI sensor status %s, reading %s" % (
                                     block["status"],
                                     block.get("sensor reading", "?"))))
    for line in stdout.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 3 or not cols[0]:
            continue
        words = [c.lower() for c in cols[1:]]
        status = next((w for w in words
                       if w in _SDR_WARNING | _SDR_CRITICAL), None)
        if status is None:
            continue
        sev = Severity.CRITICAL if status in _SDR_CRITICAL \
            else Severity.WARNING
        reading = cols[-1] if len(cols) >= 5 else cols[1]
        out.append(Component("sensor %s" % cols[0], sev,
                             "IPMI sensor status %s, reading %s"
                             % (status, reading)))
    return out


def ipmi_sel_health(stdout: str) -> List[Component]:
    """Components from ``ipmitool sel elist``: each line ``id | date |
    time | sensor | event | Asserted/Deasserted``; a fault asserted and
    not deasserted later for the same sensor and event is Warning (a SEL
    holds history, so it never says Critical alone). The verbose form
    (``-v``: a block per record, ``Sensor Type``, ``Sensor Number``,
    ``Event Direction``, ``Description``) is read too."""
    open_faults = {}
    for block in _blocks(stdout):
        if "description" not in block or "sensor type" not in block:
            continue
        sensor = "%s #0x%s" % (block["sensor type"],
                               block.get("sensor number", "?"))
        event = block["description"]
        key = (sensor, event)
        if block.get("event direction", "").lower().startswith("deassert"):
            open_faults.pop(key, None)
        elif any(w in event.lower() for w in _SEL_FAULTS):
            open_faults[key] = "SEL record %s: %s" % (
                block.get("sel record id", "?"), event)
    for line in stdout.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 5:
            continue
        sensor, event = cols[3], cols[4]
        direction = cols[5].lower() if len(cols) > 5 else "asserted"
        key = (sensor, event)
        if direction.startswith("deasserted"):
            open_faults.pop(key, None)
        elif any(w in event.lower() for w in _SEL_FAULTS):
            open_faults[key] = "SEL %s %s: %s" % (cols[1], cols[2], event)
    return [Component("SEL %s" % sensor, Severity.WARNING, why)
            for (sensor, _), why in sorted(open_faults.items())]


def ipmi_health(sdr: Optional[str], sel: Optional[str]) -> Optional[Health]:
    """The Health of what ``sdr elist`` and ``sel elist`` printed (None
    for one not read). None when neither lists a sensor or an event:
    nothing could be told."""
    rows = [line for text in (sdr, sel) if text
            for line in text.splitlines() if line.count("|") >= 2]
    blocks = [b for text in (sdr, sel) if text for b in _blocks(text)
              if "sensor id" in b or "description" in b]
    if not rows and not blocks:
        return None
    return Health.of(ipmi_sdr_health(sdr or "") + ipmi_sel_health(sel or ""))
