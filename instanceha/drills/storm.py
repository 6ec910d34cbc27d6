"""A storm: more hosts look dead at once than [policy] threshold allows
(here five hosts of a rack hang together, power on: what a partition
looks like from Nova too).
That is a partition or a control-plane fault as often as a real loss, so
the engine holds: the hosts beyond the threshold are neither fenced nor
evacuated until an operator who checked says so with ``instanceha
resume --storm`` (here through the operator API, as the CLI sends it)."""

import time

from instanceha.drills import world

STEP_BUDGET = 60.0
HOSTS = 8
#: 5 of 8 hosts (62 %) against a threshold of 50 %.
DEAD = ["compute-%d" % i for i in range(5)]
THRESHOLD = 50
#: What the operator found before lifting the hold.
RESUME_REASON = "rack checked: hosts hung"
#: How long the drill watches the hold: the grace period (1 s) several
#: times over.
WATCH = 3.0


def _held(d):
    return sorted(n for n, (_, r) in d.states().items() if "storm hold" in r)


def storm(make):
    d = make({"policy": {"threshold": THRESHOLD}}, hosts=HOSTS,
             servers_per_host=2, evacuation_time=0.3)
    servers = set(d.cloud.snapshot()["servers"])
    d.act("a rack's hosts hang at once (kernels hung, power still on, "
          "their BMCs read On): %s (%d of %d hosts; threshold %d%%)"
          % (", ".join(DEAD), len(DEAD), HOSTS, THRESHOLD), mark="killed")
    for name in DEAD:
        d.cloud.kill(name)
    # Every dead host is either held or was taken before the hold began.
    d.wait(lambda: _held(d) and all(
        n in _held(d) or d.state(n)[0] not in ("active", "suspect")
        for n in DEAD), STEP_BUDGET, "the storm hold on the dead hosts")
    held = _held(d)
    d.say("holding %s; watching for %gs" % (", ".join(held), WATCH))
    time.sleep(WATCH)
    off = world.powered_off(d.cloud)
    d.check(set(held) == set(_held(d)), "the hold changed by itself: %s -> "
            "%s" % (held, _held(d)))
    d.check(not set(off) & set(held), "held hosts powered off: %s"
            % sorted(set(off) & set(held)))
    d.check(len(off) <= HOSTS * THRESHOLD // 100,
            "%d hosts powered off, more than the threshold allows: %s"
            % (len(off), off))
    moved = [m for m in d.cloud.snapshot()["migrations"]
             if m["source_compute"] in held]
    d.check(not moved, "servers of held hosts moved: %s" % moved)
    d.act("the operator checked (the rack's consoles show hung kernels, "
          "not a partition): instanceha resume --storm --reason '%s'"
          % RESUME_REASON, mark="resume")
    code, answer = d.operator("POST", "/storm/resume",
                              {"reason": RESUME_REASON})
    d.check(code == 202, "resume --storm refused (%s): %s" % (code, answer))
    d.say("storm hold lifted for %s" % ", ".join(
        "%s (%d hosts lost)" % kv for kv in sorted(answer["lifted"].items())))
    for name in DEAD:
        d.wait_state(name, ("evacuated", "failed"), STEP_BUDGET)
        d.check(d.state(name)[0] == "evacuated", "%s %s: %s"
                % ((name,) + d.state(name)))
    d.check(world.powered_off(d.cloud) == sorted(DEAD),
            "powered off: %s, dead: %s" % (world.powered_off(d.cloud), DEAD))
    d.check_recovered(servers, set(DEAD))
    d.check_safe()
    last = max(d.at(n + ":evacuated") for n in DEAD)
    return ("%d of %d hosts hung at once: %s held %gs with power on and "
            "servers in place (%d fenced before the hold), all %d evacuated "
            "%.1fs after 'resume --storm'"
            % (len(DEAD), HOSTS, ", ".join(held), WATCH, len(off),
               len(DEAD), last - d.at("resume")))
