"""A cascade: a host dies, and two of the hosts its servers are being
rebuilt on die during the rebuild (one as the rebuild is sent to it, one
once it has claimed the server). Those servers are sent again; the dead
destinations get their own recovery; no server is ever rebuilt on two
hosts at once."""

from instanceha.drills import world

STEP_BUDGET = 90.0
VICTIM = "compute-3"
#: A rebuild that no compute takes is given up after 5 s, not Nova's
#: minutes.
OVERRIDES = {"evacuation": {"stall_timeout": 5.0, "server_retry_delay": 0.5,
                            "server_timeout": 60.0}}


def cascade(make):
    d = make(OVERRIDES, hosts=8, servers_per_host=3, evacuation_time=0.5)
    servers = set(d.cloud.snapshot()["servers"])
    victims = world.servers_on(d.cloud, VICTIM)
    d.act("the next two destinations the scheduler picks will die: one as "
          "the rebuild is cast to it, one once it has claimed the server")
    d.cloud.kill_next_destinations(1, stage="cast")
    d.cloud.kill_next_destinations(1, stage="claim")
    d.act("killing %s (%d servers on it)" % (VICTIM, len(victims)),
          mark="killed")
    d.cloud.kill(VICTIM)
    d.wait_state(VICTIM, ("evacuated", "failed"), STEP_BUDGET)
    state, reason = d.state(VICTIM)
    d.check(state == "evacuated", "%s %s: %s" % (VICTIM, state, reason))
    dead = d.wait(lambda: world.computes_down(d.cloud, besides={VICTIM}),
                  STEP_BUDGET, "the destinations that died")
    d.check(len(dead) == 2, "destinations dead: %s, expected two" % dead)
    d.say("destinations that died mid-rebuild: %s" % ", ".join(dead))
    for host in dead:
        d.wait_state(host, ("evacuated", "failed"), STEP_BUDGET)
        d.check(d.state(host)[0] == "evacuated", "%s %s: %s"
                % ((host,) + d.state(host)))
    gone = {VICTIM, *dead}
    d.check_recovered(servers, gone)
    d.check("failed" not in d.path(VICTIM), "%s went %s" % (
        VICTIM, " -> ".join(d.path(VICTIM))))
    retried = {e["server_id"] for e in d.journal.evacuations()
               if e["host_name"] == VICTIM and e["status"] == "retry"}
    d.check(len(retried) == 2, "servers sent again: %d, expected 2"
            % len(retried))
    d.check_safe()
    last = max(d.at(h + ":evacuated") for h in gone)
    return ("%s evacuated with 2 servers sent again after their "
            "destinations (%s) died; those were recovered too: all %d "
            "servers ACTIVE on live hosts %.1fs after the first death, none "
            "rebuilt twice at once"
            % (VICTIM, ", ".join(dead), len(servers),
               last - d.at("killed")))
