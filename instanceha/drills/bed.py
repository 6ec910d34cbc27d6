"""A drill's world: a simulated cloud, the real engine on it, a timeline.

As ``instanceha demo`` does, the simulator (Keystone, Nova API, one
Redfish BMC per host) serves on a loopback port and the real engine
(``instanceha.service.Service``, its real drivers: openstacksdk, sushy)
runs in this process against it over HTTP, with the simulator's short
timings (instanceha.simrun.FAST) and the drill's own overrides, printed
at the start. Operator commands go through the engine's operator API,
as the CLI sends them.
"""

import os

from instanceha import conf as conf_pkg
from instanceha import service
from instanceha import simrun
from instanceha.api import client
from instanceha.drills import workdir as workdir_mod
from instanceha.drills import world
from instanceha.sim import SimCloud, SimServer
from instanceha.util import waiting

#: The engine's start (imports done: its first reads of Nova and every
#: BMC) takes ~1 s on an idle machine and much more on a loaded one.
START_BUDGET = 60.0
#: Between two polls of a condition the drill waits for.
STEP = 0.05


class DrillFailed(Exception):
    """The world is not what the drill expects: the verdict's why."""


def settings_text(conf, overrides):
    """The shortened timings the drill runs with, for the reader."""
    d, f = conf.detection, conf.fencing
    lines = ["engine settings (shortened for the drill): os-services "
             "polled every %gs, suspect after %gs without heartbeat, %gs "
             "grace, fencing timeout %gs, %d evacuations at once"
             % (d.poll_interval, d.delta, d.grace_period, f.timeout,
                conf.evacuation.concurrency)]
    for group, values in sorted((overrides or {}).items()):
        lines.append("  [%s] %s" % (group, ", ".join(
            "%s = %s" % kv for kv in sorted(values.items()))))
    return "\n".join(lines)


class Drill:
    """The simulated cloud (``cloud``), the engine (``service``) and
    what the drill prints (``timeline``)."""

    def __init__(self, timeline, workdir, overrides=None, agents=False,
                 temporary=False, **sim_params):
        self.timeline = timeline
        self.workdir = workdir
        self.temporary = temporary
        self.overrides = overrides or {}
        self.cloud = SimCloud(**sim_params)
        self.server = None
        self.agents = None
        self.service = None
        self._agent_setup = (simrun.agent_setup(workdir, interval=0.2)
                             if agents else None)
        self._last_reason = {}

    # -- start and stop ------------------------------------------------------
    def start(self):
        out = self.timeline.out
        self.server = SimServer(self.cloud).start()
        path = simrun.write_config(self.workdir, self.server, self.overrides,
                                   agents=self._agent_setup)
        self.conf = conf_pkg.load(["--config-file", path])
        out.write("simulated cloud: %d hosts x %d servers; Nova, Keystone "
                  "and Redfish BMCs at %s\n"
                  % (len(self.cloud.hosts),
                     len(self.cloud.servers) // max(1, len(self.cloud.hosts)),
                     self.server.url))
        out.write(settings_text(self.conf, self.overrides) + "\n")
        if self._agent_setup is not None:
            # Local: only the drills that run agents load their code.
            from instanceha.sim.agents import SimAgents
            self.agents = SimAgents(self.cloud,
                                    **self._agent_setup.sim_args()).start()
            out.write("heartbeat agents on every host, beating every "
                      "%gs\n" % self._agent_setup.interval)
        out.write(workdir_mod.log_line(
            os.path.join(self.workdir, "instanceha.log"), self.temporary)
            + "\n")
        out.flush()
        self.service = service.Service(self.conf,
                                       on_progress=self._on_progress)
        self.service.engine.add_listener(self._on_change)
        self.service.start()
        names = set(self.cloud.hosts)
        self.wait(lambda: set(self.states()) == names
                  and set(s for s, _ in self.states().values())
                  == {"active"}, START_BUDGET, "every host active")
        if self.agents is not None:
            self.wait(lambda: all(h.get("agent") for h in
                                  self.status()["hosts"]),
                      START_BUDGET, "every host's agent heard")
        self.say("engine started: all %d compute hosts active" % len(names))
        return self

    def close(self):
        if self.service is not None:
            self.service.stop()
        if self.agents is not None:
            self.agents.stop()
        if self.server is not None:
            self.server.stop()

    # -- what the timeline shows ---------------------------------------------
    def _on_change(self, old, new, event):
        if new.state is not old.state:
            self._last_reason[new.name] = new.reason
            self.timeline.say("%-10s %s -> %s  %s" % (
                new.name, old.state.value, new.state.value, new.reason),
                mark="%s:%s" % (new.name, new.state.value))
        elif new.reason and new.reason != self._last_reason.get(new.name):
            self._last_reason[new.name] = new.reason
            self.timeline.say("%-10s %s: %s" % (new.name, new.state.value,
                                                new.reason))

    def _on_progress(self, record, done, total):
        self.timeline.say("%-10s evacuated %d/%d" % (record.name, done,
                                                     total))

    def say(self, text, mark=None):
        self.timeline.say(text, mark=mark)

    def act(self, text, mark=None):
        """What the drill does to the world (or the operator types)."""
        self.timeline.say(">> " + text, mark=mark)

    def at(self, mark):
        """Seconds since the start at which ``mark`` happened, or None
        (marks: "HOST:STATE" for each host's first entry into a state,
        and those the drill set)."""
        return self.timeline.marks.get(mark)

    # -- reading the engine --------------------------------------------------
    def states(self):
        """{host name: (state, reason)} from the engine's records."""
        return {r.name: (r.state.value, r.reason or "")
                for r in self.service.engine.records().values() if r.name}

    def state(self, host):
        return self.states().get(host, ("", ""))

    def status(self):
        """What ``instanceha status`` shows (the engine's snapshot)."""
        return self.service.engine.snapshot()

    @property
    def journal(self):
        return self.service.journal

    def path(self, host):
        """The host's states in the journal, in order, repeats dropped."""
        steps = []
        for t in self.journal.transitions():
            if t["host_name"] != host:
                continue
            if not steps:
                steps.append(t["src"])
            if steps[-1] != t["dst"]:
                steps.append(t["dst"])
        return steps

    # -- waiting and judging -------------------------------------------------
    def wait(self, pred, budget, what):
        """``pred()``'s first true answer within ``budget`` seconds, else
        DrillFailed naming ``what``."""
        value = waiting.wait_until(pred, budget, STEP)
        if not value:
            raise DrillFailed("%s: not within %gs (engine: %s)" % (
                what, budget, _brief(self.states())))
        return value

    def wait_state(self, host, wanted, budget):
        """Wait until ``host`` is in one of the states ``wanted`` (a name
        or a tuple of names); returns (state, reason)."""
        wanted = (wanted,) if isinstance(wanted, str) else tuple(wanted)
        self.wait(lambda: self.state(host)[0] in wanted, budget,
                  "%s %s" % (host, " or ".join(wanted)))
        return self.state(host)

    @staticmethod
    def check(condition, why):
        """DrillFailed(``why``) unless ``condition``."""
        if not condition:
            raise DrillFailed(why)

    def check_recovered(self, servers, gone):
        """DrillFailed unless every one of ``servers`` is ACTIVE on a host
        not in ``gone``."""
        wrong = world.misplaced(self.cloud, servers, set(gone))
        self.check(not wrong, "servers of %s not recovered: %s"
                   % (", ".join(sorted(gone)), "; ".join(wrong)))

    def check_safe(self):
        """DrillFailed naming every breach of the safety rules the
        simulator saw (a server rebuilt while its host was on, ...)."""
        breaches = world.safety_breaches(self.cloud)
        self.check(not breaches, "; ".join(breaches))

    # -- the operator ----------------------------------------------------------
    def operator(self, method, path, body=None):
        """(status, answer) of the engine's operator API, as the CLI
        sends it."""
        api = client.APIClient.from_conf(self.conf, timeout=30.0)
        return api.request(method, path, body)


def _brief(states):
    return ", ".join("%s %s" % (h, s) for h, (s, _) in sorted(states.items())
                     if s != "active") or "every host active"
