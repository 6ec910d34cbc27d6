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


class FenceTries:
    """The engine's failed fencing tries of the victim, each printed once
    as its status shows it ("retrying": the error and the try's number),
    polled by the drill's waits."""

    def __init__(self, drill):
        self.drill = drill
        self.seen = []

    def poll(self):
        """Print a new failed try; return the victim's state."""
        text = next((h["retrying"] for h in self.drill.status()["hosts"]
                     if h["name"] == VICTIM), None)
        if text and (not self.seen or self.seen[-1] != text):
            self.seen.append(text)
            self.drill.say("%-10s fencing: %s" % (VICTIM, text))
        return self.drill.state(VICTIM)[0]


def bmc_unreachable(make):
    d = make(hosts=4, servers_per_host=3, evacuation_time=0.3)
    servers = world.servers_on(d.cloud, VICTIM)
    d.act("%s's BMC stops answering" % VICTIM)
    d.cloud.set_bmc(VICTIM, reachable=False)
    d.act("killing %s (it hangs with power on; %d servers on it)"
          % (VICTIM, len(servers)), mark="killed")
    d.cloud.kill(VICTIM)
    tries = FenceTries(d)
    d.wait(lambda: tries.poll() == "fencing", STEP_BUDGET,
           "%s fencing" % VICTIM)
    d.say("the BMC stays silent for %gs more" % SILENCE)
    end = time.monotonic() + SILENCE
    while time.monotonic() < end:
        snap = d.cloud.snapshot()
        d.check(tries.poll() == "fencing", "%s went %s without its "
                "BMC: %s" % ((VICTIM,) + d.state(VICTIM)))
        d.check(not snap["migrations"], "servers moved without a proof of "
                "death: %s" % snap["migrations"])
        time.sleep(0.2)
    d.check(world.servers_on(d.cloud, VICTIM) == servers,
            "servers moved off %s" % VICTIM)
    d.check(d.cloud.snapshot()["hosts"][VICTIM]["power"] == "on",
            "%s is off: its BMC was unreachable" % VICTIM)
    failed = len(tries.seen)
    d.check(failed >= 1, "the engine showed no failed fencing try in %gs "
            "without the BMC" % SILENCE)
    held = d.at(VICTIM + ":fencing")
    d.act("%s's BMC answers again" % VICTIM, mark="mended")
    d.cloud.set_bmc(VICTIM, reachable=True)
    d.wait(lambda: tries.poll() in ("evacuated", "failed"), STEP_BUDGET,
           "%s evacuated or failed" % VICTIM)
    state, reason = d.state(VICTIM)
    d.check(state == "evacuated", "%s %s: %s" % (VICTIM, state, reason))
    d.check(world.powered_off(d.cloud) == [VICTIM],
            "powered off: %s" % world.powered_off(d.cloud))
    d.check_recovered(servers, {VICTIM})
    d.check_safe()
    return ("%s held in fencing %.1fs while its BMC was unreachable (%d "
            "power-off tries failed, each retried with back-off; left on, "
            "its %d servers untouched); powered off and evacuated %.1fs "
            "after the BMC answered"
            % (VICTIM, d.at("mended") - held, failed, len(servers),
               d.at(VICTIM + ":evacuated") - d.at("mended")))
