"""Two deaths that look the same from Nova and must not be treated the
same: a host that hangs (fence, evacuate, put back) and a host whose
nova-compute alone died (its heartbeat agent says the host lives: leave
it on, move nothing)."""

import time

from instanceha.drills import world

#: Budgets: each holds on a loaded 2-core machine (a step that takes a
#: second or two idle).
STEP_BUDGET = 60.0


def host_death(make):
    d = make(hosts=4, servers_per_host=3, evacuation_time=0.3)
    victim = "compute-1"
    servers = world.servers_on(d.cloud, victim)
    d.act("killing %s: its kernel hangs, everything on it stops, its BMC "
          "still reads On (%d servers on it)" % (victim, len(servers)),
          mark="killed")
    d.cloud.kill(victim)
    d.wait_state(victim, ("evacuated", "failed"), STEP_BUDGET)
    state, reason = d.state(victim)
    d.check(state == "evacuated", "%s %s: %s" % (victim, state, reason))
    d.check(world.powered_off(d.cloud) == [victim],
            "powered off: %s, expected %s alone"
            % (world.powered_off(d.cloud), victim))
    d.check_recovered(servers, {victim})
    d.act("repairing %s: powering it on through its BMC (Nova cleans up "
          "the evacuated servers when its compute starts)" % victim)
    d.cloud.power(victim, True)
    d.wait_state(victim, "active", STEP_BUDGET)
    svc = world.service(d.cloud, victim)
    d.check(svc["status"] == "enabled" and not svc["forced_down"],
            "%s not back in service: %s, forced_down=%s"
            % (victim, svc["status"], svc["forced_down"]))
    d.check_safe()
    return ("%s fenced %.1fs after it hung (powered off before any "
            "evacuation), %d/%d servers ACTIVE elsewhere, back in service "
            "%.1fs after it died"
            % (victim, d.at(victim + ":fenced") - d.at("killed"),
               len(servers), len(servers),
               d.at(victim + ":active") - d.at("killed")))


#: Nova calls a service down 4 s after its last report (the simulator's
#: default); the engine's own delta is 3 s; the agents beat every 0.2 s
#: and one silent for 1.5 s is silent.
COMPUTE_DEATH = {"agent": {"silence_timeout": 1.5,
                           "nova_report_interval": 1.0}}
#: How long the drill watches the held host: well past the grace period
#: (1 s) and the fencing it would have started.
WATCH = 6.0


def compute_death(make):
    d = make(COMPUTE_DEATH, agents=True, hosts=4, servers_per_host=3,
             boot_time=1.0)
    victim = "compute-2"
    servers = world.servers_on(d.cloud, victim)
    boot_id = d.cloud.snapshot()["hosts"][victim]["boot_id"]
    d.act("stopping nova-compute on %s: the host, its %d servers and its "
          "heartbeat agent run on" % (victim, len(servers)), mark="killed")
    d.cloud.kill_compute(victim)
    d.wait(lambda: "host alive" in d.state(victim)[1], STEP_BUDGET,
           "%s held as alive by its agent" % victim)
    held = time.monotonic()
    d.say("watching %s for %gs: Nova says its service is down, its agent "
          "says the host lives" % (victim, WATCH))
    while time.monotonic() - held < WATCH:
        d.check(world.powered_off(d.cloud) == [],
                "powered off: %s" % world.powered_off(d.cloud))
        d.check(d.state(victim)[0] == "suspect",
                "%s went %s: %s" % ((victim,) + d.state(victim)))
        time.sleep(0.2)
    nova = world.service(d.cloud, victim)["state"]
    d.check(nova == "down", "Nova reports %s's service %s: the drill "
            "never showed the engine a dead compute" % (victim, nova))
    d.act("the operator restarts nova-compute on %s" % victim)
    d.check(d.cloud.restart_compute(victim, delay=0.5),
            "%s refused the restart (off or hung)" % victim)
    _, why = d.wait_state(victim, "active", STEP_BUDGET)
    # Back long after the grace period: the reason must say what held it.
    d.check("agent" in why and "within the grace period" not in why,
            "%s active again saying: %s" % (victim, why))
    snap = d.cloud.snapshot()
    host = snap["hosts"][victim]
    d.check(host["power"] == "on", "%s is %s" % (victim, host["power"]))
    d.check(host["boot_id"] == boot_id, "%s was rebooted" % victim)
    d.check(world.servers_on(d.cloud, victim) == servers,
            "servers moved off %s" % victim)
    fences = [a for a in d.journal.actions() if a["kind"] == "fence"]
    d.check(not fences, "fence actions in the journal: %s" % fences)
    d.check(not snap["migrations"], "migrations: %s" % snap["migrations"])
    d.check_safe()
    return ("%s held %.0fs with Nova reporting its compute down: never "
            "powered off, its %d servers never moved, active again once "
            "nova-compute ran" % (victim, WATCH, len(servers)))
