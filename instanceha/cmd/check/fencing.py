"""Checks 2 and 7: the BMC inventory (fields, secrets, shared BMCs, the
noop driver said loudly), every compute host having a way to be fenced,
and one power-state read per fencing method of every host (no action),
judged as the service's readiness audit judges it."""

import concurrent.futures
import os

from instanceha.cmd.check.report import FAIL, OK, WARN
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute import base as compute_base
from instanceha.drivers.fencing import base as fencing_base
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.drivers.fencing.inventory_entry import NO_BMC
from instanceha.policy import proof
from instanceha.sources import audit
from instanceha.util.pool import bounded_map, window_for


def fencer(name, conf):
    """The fencing driver ``name`` as ``instanceha run`` would load it."""
    return fencing_pkg.load_driver(name, conf)


def check_inventory(conf, read, report):
    """Report the inventory ``read`` by the start-up checks ((inventory,
    warnings), or None when they refused it): its size, secret files
    others may read, shared BMCs, noop entries. Returns the inventory."""
    if read is None:
        return None
    inv, warnings = read
    path = conf.fencing.inventory
    report.add(OK, "inventory", "%s: %d host(s)" % (path, len(inv)))
    for w in warnings:
        report.add(WARN, "inventory", "%s (chmod 600 it)" % w)
    # One BMC entered by IP address and by DNS name is one BMC.
    for address, hosts in inventory_mod.shared(inv, inventory_mod.resolve):
        report.add(WARN, "inventory", "hosts %s share the BMC %s: powering "
                   "it off for one kills the others"
                   % (", ".join(hosts), address))
    noop = sorted(h for h, bmc in inv.items()
                  if any(m.driver == "noop" for m in bmc.methods))
    if noop:
        report.add(WARN, "inventory", "driver noop for %s: these hosts are "
                   "NOT powered off before their servers are evacuated; a "
                   "host that is only unreachable may corrupt their disks. "
                   "Test clouds only ([fencing] allow_unfenced = true)"
                   % ", ".join(noop))
    return inv


def check_coverage(conf, inventory, services, report):
    """Every compute host can be fenced: an inventory entry or
    [fencing] default_driver."""
    if inventory is None or services is None:
        return
    hosts = {s.host for s in services}
    missing = sorted(hosts - set(inventory))
    if missing and not conf.fencing.default_driver:
        report.add(FAIL, "inventory", "no entry for compute host(s) %s and "
                   "[fencing] default_driver is unset: they cannot be "
                   "fenced, so never evacuated" % ", ".join(missing))
    elif missing:
        report.add(WARN, "inventory", "compute host(s) %s fenced with "
                   "[fencing] default_driver %s"
                   % (", ".join(missing), conf.fencing.default_driver))
    stale = sorted(set(inventory) - hosts)
    if stale:
        report.add(WARN, "inventory", "entries for host(s) Nova does not "
                   "list as compute services: %s (renamed or removed?)"
                   % ", ".join(stale))


def check_fencing(conf, inventory, services, report, fencer_factory):
    """One power-state read per fencing method of every host (no action),
    judged as the service's readiness audit judges it."""
    if inventory is None:
        return
    by_host = {s.host: s for s in services or ()}
    hosts = sorted(set(inventory) | set(by_host))
    fencers = fencing_pkg.Fencers(lambda name: fencer_factory(name, conf))

    def one(host):
        bmc = inventory_mod.entry_for(inventory, host,
                                      conf.fencing.default_driver)
        found = [audit.read_identity(fencers.get, m) for m in
                 (bmc.methods if bmc is not None else ())
                 if m.driver != "noop"]
        return host, bmc, audit.readings(bmc, fencers.get), found

    with concurrent.futures.ThreadPoolExecutor(
            conf.audit.concurrency,
            thread_name_prefix="instanceha-check") as pool:
        results = list(bounded_map(pool, one, hosts,
                                   window_for(conf.audit.concurrency)))
    for problem in machines_shared(results, set(by_host)):
        report.add(FAIL, "inventory", problem)
    uuids = agent_uuids(conf)
    required = conf.fencing.require_verified_identity
    for host, bmc, readings, found in results:
        what = "fencing %s" % host
        if bmc is None:
            continue        # reported by check_coverage
        storage = [m for m in bmc.all_methods if m.driver in NO_BMC]
        if storage:
            check_storage(fencers, what, storage, report)
        if not bmc.methods:
            report.add(WARN, what, "no power fencing, only %s: servers "
                       "with a local disk are never evacuated" % ", ".join(
                           sorted({m.driver for m in storage})))
            continue
        if all(m.driver == "noop" for m in bmc.methods):
            report.add(WARN, what, "noop: NOT powered off before "
                       "evacuation (test clouds only)")
            continue
        service = by_host.get(host) or compute_base.ComputeService(
            id="", host=host, state="down", status="enabled",
            forced_down=False, disabled_reason=None, updated_at=None)
        reason, degraded = audit.judge(service, bmc, readings)
        shown = ", ".join("%s: power %s" % (name, r.value)
                          for name, r in readings
                          if isinstance(r, fencing_base.PowerState))
        mismatch, unverified, identity = machine_identity(
            bmc, found, uuids.get(host))
        if mismatch:
            reason = "; ".join(filter(None, [reason] + mismatch))
        elif required and unverified:
            reason = "; ".join(filter(None, [reason] + [
                "%s ([fencing] require_verified_identity refuses it)" % u
                for u in unverified]))
        if reason is not None:
            report.add(FAIL, what, reason)
        elif degraded:
            report.add(WARN, what, "%s; %s; but %s" % (
                shown, identity, "; ".join(degraded)))
        else:
            report.add(OK, what, "%s; %s" % (shown, identity))
    fencers.close()


def check_storage(fencers, what, methods, report):
    """Read what each storage fencing method would change (a Ceph
    cluster's blocklist: a read, no action): the monitors answer this
    user, and the host is not blocklisted already."""
    for m in methods:
        try:
            reader = getattr(fencers.get(m.driver), "blocklist", None)
            if reader is None:
                continue
            listed = reader(m)
            addresses = fencers.get(m.driver).addresses(m)
        except Exception as e:   # noqa: BLE001 - reported
            report.add(FAIL, what, "%s: %s" % (m.driver, e))
            continue
        already = [a for a in addresses if a in listed]
        if already:
            report.add(WARN, what, "%s: %s blocklisted already: the host "
                       "cannot write to that Ceph" % (m.driver,
                                                       ", ".join(already)))
        else:
            report.add(OK, what, "%s: the monitors answer; %s not "
                       "blocklisted" % (m.driver, ", ".join(addresses)))


def agent_uuids(conf):
    """{host: the system UUID its agent reported}, as the service kept it
    in the journal; {} when the journal holds none or cannot be read (a
    SQLite file not yet created is not created)."""
    import sqlalchemy as sa             # local: costs ~0.1 s at import

    from instanceha.engine.evidence import AGENT_KEY
    from instanceha.journal import store
    url = conf.journal.connection
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:") \
            and not os.path.exists(url[len("sqlite:///"):]):
        return {}
    table = store.BMC_EVIDENCE
    try:
        engine = sa.create_engine(url)
        try:
            with engine.connect() as c:
                rows = c.execute(sa.select(table.c.host_name,
                                           table.c.evidence).where(
                    table.c.method == AGENT_KEY)).all()
        finally:
            engine.dispose()
    except Exception:   # noqa: BLE001 - then nothing is verified
        return {}
    return {host: (data or {}).get("system_uuid") for host, data in rows
            if (data or {}).get("system_uuid")}


def machine_identity(bmc, found, host_uuid):
    """([mismatch reason], [not verified reason], summary): each method's
    BMC's machine against the system UUID the host's agent reported
    (``found``: system_identity per method, as check_fencing read them,
    noop methods left out)."""
    methods = [m for m in (bmc.methods if bmc is not None else ())
               if m.driver != "noop"]
    mismatch, unverified, texts = [], [], []
    for method, ident in zip(methods, found):
        verdict, text = proof.machine(proof.identity(None, ident),
                                      host_uuid)
        name = audit.label(method)
        texts.append(text if len(methods) == 1 else "%s: %s" % (name, text))
        if verdict == proof.MISMATCH:
            mismatch.append("%s: %s" % (name, text))
        elif verdict == proof.NOT_VERIFIED:
            unverified.append("%s: %s" % (name, text))
    summary = "; ".join(texts)
    return mismatch, unverified, summary


def machines_shared(results, computes):
    """What the BMCs say about their machines, against each other and
    Nova: [problem] for entries of different hosts whose BMCs report one
    system UUID (one machine by its Redfish and its IPMI address, say),
    and for an entry whose BMC reports another compute host's name (that
    host's machine, whether or not it has an entry of its own): fencing
    one would power the other off. ``results``: [(host, entry, readings,
    [system identity per method])]."""
    owners = {}
    problems = []
    shorts = {proof.short_name(h): h for h in computes}
    for host, bmc, _, found in results:
        if bmc is None:
            continue
        for ident in found:
            for u in (ident or {}).get("uuids") or ():
                owners.setdefault(u, set()).add(host)
            name = proof.short_name((ident or {}).get("hostname"))
            other = shorts.get(name)
            if name and other and other != host:
                problems.append(
                    "the BMC of %s's entry reports the machine %s, i.e. "
                    "compute host %s: fencing %s would power %s off"
                    % (host, name, other, host, other))
    for u, hosts in sorted(owners.items()):
        if len(hosts) > 1:
            problems.append("hosts %s reach one machine (system UUID %s "
                            "reported by their BMCs): fencing one powers the "
                            "others off" % (", ".join(sorted(hosts)), u))
    return sorted(set(problems))
