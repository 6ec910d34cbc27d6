"""A host dies while its BMC does not answer. Nothing proves it dead, so
nothing of it moves: the host stays in 'fencing', the power-off retried
with a growing back-off, its servers where they were. Once the BMC
answers again the next try powers it off and its servers are rebuilt
elsewhere."""

import time

from instanceha.drills import world

STEP_BUDGET = 60.0
VICTIM = "compute-1"
#: How long the BMC stays silent once fencing has begun: the engine's
#: tries come 1, 2 and 4 s apart, so the next one is at most ~8 s away.
SILENCE = 5.0


def bmc_unreachable(make):
    d = make(hosts=4, servers_per_host=3, evacuation_time=0.3)
    servers = world.servers_on(d.cloud, VICTIM)
    d.act("%s's BMC stops answering" % VICTIM)
    d.cloud.set_bmc(VICTIM, reachable=False)
    d.act("killing %s (it hangs with power on; %d servers on it)"
          % (VICTIM, len(servers)), mark="killed")
    d.cloud.kill(VICTIM)
    d.wait_state(VICTIM, "fencing", STEP_BUDGET)
    d.say("the BMC stays silent for %gs more" % SILENCE)
    end = time.monotonic() + SILENCE
    while time.monotonic() < end:
        snap = d.cloud.snapshot()
        d.check(d.state(VICTIM)[0] == "fencing", "%s went %s without its "
                "BMC: %s" % ((VICTIM,) + d.state(VICTIM)))
        d.check(not snap["migrations"], "servers moved without a proof of "
                "death: %s" % snap["migrations"])
        time.sleep(0.2)
    d.check(world.servers_on(d.cloud, VICTIM) == servers,
            "servers moved off %s" % VICTIM)
    d.check(d.cloud.snapshot()["hosts"][VICTIM]["power"] == "on",
            "%s is off: its BMC was unreachable" % VICTIM)
    held = d.at(VICTIM + ":fencing")
    d.act("%s's BMC answers again" % VICTIM, mark="mended")
    d.cloud.set_bmc(VICTIM, reachable=True)
    d.wait_state(VICTIM, ("evacuated", "failed"), STEP_BUDGET)
    state, reason = d.state(VICTIM)
    d.check(state == "evacuated", "%s %s: %s" % (VICTIM, state, reason))
    d.check(world.powered_off(d.cloud) == [VICTIM],
            "powered off: %s" % world.powered_off(d.cloud))
    d.check_recovered(servers, {VICTIM})
    d.check_safe()
    return ("%s held in fencing %.1fs while its BMC was unreachable (left "
            "on, its %d servers untouched); powered off and evacuated %.1fs "
            "after the BMC answered"
            % (VICTIM, d.at("mended") - held, len(servers),
               d.at(VICTIM + ":evacuated") - d.at("mended")))
