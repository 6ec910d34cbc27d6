"""Planned maintenance: the operator drains a host. Its running and
paused servers are live-migrated away, its stopped one cold-migrated (and
left stopped); the host is then in maintenance, disabled with the
drain's marker and never powered off. ``instanceha resume HOST`` puts it
back in service; the servers stay where the drain put them
([maintenance] fail_back = false, the default)."""

from instanceha.drills import world
from instanceha.util.marker import MARKER

STEP_BUDGET = 90.0
VICTIM = "compute-1"
#: A drain looks at its host every second (the smallest it takes).
OVERRIDES = {"drain": {"poll_interval": 1}}
#: What a drain writes in the disabled_reason (engine.drain.DRAIN_REASON).
DRAIN_MARK = MARKER + " draining"


def drain(make):
    d = make(OVERRIDES, hosts=4, servers_per_host=3)
    names = {s["name"]: sid for sid, s in
             d.cloud.snapshot()["servers"].items() if s["host"] == VICTIM}
    d.cloud.pause_server(names[VICTIM + "-vm-1"])
    d.cloud.stop_server(names[VICTIM + "-vm-2"])
    servers = d.cloud.snapshot()["servers"]
    before = {sid: servers[sid]["status"] for sid in names.values()}
    d.say("%s runs %s" % (VICTIM, ", ".join(
        "%s (%s)" % (n, before[sid]) for n, sid in sorted(names.items()))))
    d.act("instanceha drain %s --reason 'kernel update'" % VICTIM,
          mark="drain")
    code, answer = d.operator("POST", "/hosts/%s/drain" % VICTIM,
                              {"reason": "kernel update",
                               "then": "maintenance"})
    d.check(code == 202, "drain refused (%s): %s" % (code, answer))
    # The command is queued to the engine: wait for its drain to start,
    # then to end.
    d.wait(lambda: d.at(VICTIM + ":draining") is not None
           and d.state(VICTIM)[0] != "draining", STEP_BUDGET,
           "%s drained" % VICTIM)
    state, reason = d.state(VICTIM)
    d.check(state == "maintenance", "%s %s: %s" % (VICTIM, state, reason))
    snap = d.cloud.snapshot()
    for sid, status in before.items():
        s = snap["servers"][sid]
        d.check(s["host"] not in (VICTIM, None) and s["status"] == status
                and s["task_state"] is None,
                "%s is %s on %s (was %s on %s)" % (
                    s["name"], s["status"], s["host"], status, VICTIM))
    svc = world.service(d.cloud, VICTIM)
    d.check(svc["status"] == "disabled"
            and (svc["disabled_reason"] or "").startswith(DRAIN_MARK),
            "%s's service: %s (%s)" % (VICTIM, svc["status"],
                                       svc["disabled_reason"]))
    d.check(snap["hosts"][VICTIM]["power"] == "on",
            "%s was powered off" % VICTIM)
    kinds = sorted({m["migration_type"] for m in snap["migrations"]})
    d.check("evacuation" not in kinds, "evacuations in a drain: %s" % kinds)
    d.say("%s in maintenance: disabled (%s), powered on, %s"
          % (VICTIM, svc["disabled_reason"], "; ".join(
              "%s -> %s" % (snap["servers"][sid]["name"],
                            snap["servers"][sid]["host"])
              for sid in sorted(before, key=lambda s: snap["servers"][s]
                                ["name"]))))
    drained = d.at(VICTIM + ":maintenance") - d.at("drain")
    d.act("maintenance done: instanceha resume %s" % VICTIM, mark="resume")
    code, answer = d.operator("POST", "/hosts/%s/resume" % VICTIM,
                              {"reason": "kernel updated"})
    d.check(code == 202, "resume refused (%s): %s" % (code, answer))
    d.wait(lambda: d.at(VICTIM + ":undraining") is not None
           and d.state(VICTIM)[0] not in ("undraining", "failing_back"),
           STEP_BUDGET, "%s back from maintenance" % VICTIM)
    state, reason = d.state(VICTIM)
    d.check(state == "active", "%s %s: %s" % (VICTIM, state, reason))
    svc = world.service(d.cloud, VICTIM)
    d.check(svc["status"] == "enabled" and not svc["disabled_reason"]
            and not svc["forced_down"],
            "%s's service after the resume: %s" % (VICTIM, svc))
    d.check_safe()
    steps = d.path(VICTIM)
    return ("%s drained in %.1fs (%d servers moved, each in its state: %s), "
            "maintenance with power on, back in service after 'resume' "
            "(%s)" % (VICTIM, drained, len(before), ", ".join(
                sorted(set(before.values()))), " -> ".join(steps[-5:])))
