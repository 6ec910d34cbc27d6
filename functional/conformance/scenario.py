"""One recovery walk through the compute API, recorded as plain answers.

:func:`observe` drives a target through what instanceha does to a failed
host and returns ``{step: answer}``; answers hold only what must not differ
between the simulator and real Nova (status codes, fault kinds, key sets,
states), never ids or times.
"""

import re
import time

from functional.conformance.targets import SERVERS

SERVICE_MV = "2.53"
EVACUATE_MV = "2.94"
MIGRATION_MV = "2.59"
SERVER_MV = "2.74"


def fault_kind(doc):
    """'badRequest', 'itemNotFound', ... or the raw shape for odd bodies."""
    if isinstance(doc, dict) and len(doc) == 1:
        key, = doc
        if isinstance(doc[key], dict) and "code" in doc[key]:
            return key
    if isinstance(doc, dict) and "computeFault" in doc:
        return "computeFault"
    return None if doc is None else "other"


def answer(status, doc):
    return {"status": status, "fault": fault_kind(doc) if status >= 400 else None}


def message(doc):
    if isinstance(doc, dict) and len(doc) == 1:
        inner = next(iter(doc.values()))
        if isinstance(inner, dict):
            return inner.get("message", "")
    return ""


def observe(t):
    host = t.hosts[0]
    obs = {}
    ids = t.boot(host, SERVERS)

    # -- services and microversions
    st, doc, resp = t.call("GET", "/os-services", microversion=SERVICE_MV)
    computes = [s for s in doc["services"] if s["binary"] == "nova-compute"]
    obs["services.keys"] = sorted(computes[0])
    obs["services.compute_hosts"] = sorted(s["host"] for s in computes)
    obs["services.all_up_enabled"] = all(
        s["state"] == "up" and s["status"] == "enabled" and not s["forced_down"]
        for s in computes)
    obs["services.id_is_uuid"] = bool(re.fullmatch(r"[0-9a-f-]{36}", str(computes[0]["id"])))
    obs["microversion.echo"] = resp.headers.get("OpenStack-API-Version")
    obs["microversion.vary"] = "OpenStack-API-Version" in resp.headers.get("Vary", "")
    st, doc, _ = t.call("GET", "/os-services", microversion="2.999")
    obs["microversion.too_new"] = answer(st, doc)
    st, doc, _ = t.call("GET", "/os-services", microversion="2.0")
    obs["microversion.too_old"] = answer(st, doc)
    st, doc, _ = t.call("GET", "/os-services", microversion="latest")
    obs["microversion.latest"] = st
    svc = t.service(host)
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"forced_down": True}, microversion="2.52")
    obs["services.put_uuid_before_2.53"] = answer(st, doc)
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"forced_down": "maybe"}, microversion=SERVICE_MV)
    obs["services.put_bad_bool"] = answer(st, doc)
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"disabled_reason": "no status"}, microversion=SERVICE_MV)
    obs["services.reason_without_disable"] = answer(st, doc)
    st, doc, _ = t.call("PUT", "/os-services/00000000-0000-0000-0000-000000000000",
                        {"forced_down": True}, microversion=SERVICE_MV)
    obs["services.put_unknown"] = answer(st, doc)

    # -- evacuate while the host is alive
    st, doc, _ = t.call("POST", "/servers/%s/action" % ids[0], {"evacuate": {}},
                        microversion=EVACUATE_MV)
    obs["evacuate.host_up"] = answer(st, doc)
    obs["evacuate.host_up.in_use"] = "is still in use" in message(doc)
    st, doc, _ = t.call("POST", "/servers/%s/action" % ids[0],
                        {"evacuate": {"onSharedStorage": False}}, microversion=EVACUATE_MV)
    obs["evacuate.removed_field"] = answer(st, doc)

    # -- the host dies: compute killed, power cut
    t.power_off(host)
    t.kill(host)
    st, doc, _ = t.call("POST", "/servers/%s/action" % ids[0], {"evacuate": {}},
                        microversion=EVACUATE_MV)
    obs["evacuate.just_killed"] = answer(st, doc)
    t.wait(lambda: t.service(host)["state"] == "down",
           t.service_down_time * 4 + 10, "down")
    down = t.service(host)
    obs["service.down.forced_down"] = down["forced_down"]
    obs["service.down.status"] = down["status"]

    # -- force down, disable with a reason
    before = t.service(host)["updated_at"]
    time.sleep(1.1)   # Nova keeps updated_at to the second (microseconds 0)
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"forced_down": True}, microversion=SERVICE_MV)
    obs["force_down.bumps_updated_at"] = t.service(host)["updated_at"] != before
    obs["force_down"] = answer(st, doc)
    obs["force_down.body_keys"] = sorted(doc["service"]) if st == 200 else None
    obs["force_down.body_forced"] = doc["service"]["forced_down"] if st == 200 else None
    reason = "instanceha: fencing 2026-01-01T00:00:00Z"
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"status": "disabled", "disabled_reason": reason},
                        microversion=SERVICE_MV)
    obs["disable"] = answer(st, doc)
    got = t.service(host)
    obs["disable.reason_kept"] = got["disabled_reason"] == reason
    obs["disable.status"] = got["status"]

    # -- evacuate after force-down
    codes = []
    for sid in ids:
        st, doc, resp = t.call("POST", "/servers/%s/action" % sid, {"evacuate": {}},
                               microversion=EVACUATE_MV)
        codes.append(st)
        obs["evacuate.body"] = doc
    obs["evacuate.codes"] = sorted(set(codes))

    def migrations():
        _, doc, _ = t.call("GET", "/os-migrations?migration_type=evacuation",
                           microversion=MIGRATION_MV)
        return [m for m in doc["migrations"] if m["source_compute"] == host]

    t.wait(lambda: len(migrations()) == SERVERS and
           all(m["status"] == "done" for m in migrations()), 120, "migrations done")
    migs = migrations()
    obs["migrations.keys"] = sorted(migs[0])
    obs["migrations.type"] = sorted({m["migration_type"] for m in migs})
    obs["migrations.dest_differs"] = all(m["dest_compute"] not in (None, host)
                                         for m in migs)
    st, doc, _ = t.call("GET", "/os-migrations?migration_type=evacuation&status=done",
                        microversion=MIGRATION_MV)
    obs["migrations.status_filter"] = sorted({m["status"] for m in doc["migrations"]})

    def servers():
        return [t.call("GET", "/servers/%s" % sid, microversion=SERVER_MV)[1]["server"]
                for sid in ids]
    t.wait(lambda: all(s["status"] == "ACTIVE" and s["OS-EXT-SRV-ATTR:host"] != host
                       for s in servers()), 60, "servers active elsewhere")
    obs["servers.status"] = sorted({s["status"] for s in servers()})

    st, doc, _ = t.call("POST", "/servers/%s/action" % ids[0], {"evacuate": {}},
                        microversion=EVACUATE_MV)
    obs["evacuate.again_on_new_host"] = answer(st, doc)

    # -- unforce too early, then the host comes back
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"forced_down": False}, microversion=SERVICE_MV)
    obs["unforce.before_cleanup"] = answer(st, doc)
    obs["unforce.before_cleanup.msg"] = "Unable to force up host" in message(doc)

    t.power_on(host)
    t.wait(lambda: all(m["status"] == "completed" for m in migrations()),
           120, "migrations completed")
    obs["migrations.after_return"] = sorted({m["status"] for m in migrations()})
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"forced_down": False}, microversion=SERVICE_MV)
    obs["unforce.after_cleanup"] = answer(st, doc)
    t.wait(lambda: t.service(host)["state"] == "up", 60, "up again")
    st, doc, _ = t.call("PUT", "/os-services/%s" % svc["id"],
                        {"status": "enabled"}, microversion=SERVICE_MV)
    obs["enable"] = answer(st, doc)
    final = t.service(host)
    obs["final.service"] = (final["status"], final["state"], final["forced_down"],
                            final["disabled_reason"])
    return obs
