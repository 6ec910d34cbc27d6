"""Issue 23's safety targets on the simulator: zero healthy hosts powered
off while the agents' network or the agents themselves misbehave. The
real engine hears the real agent code of ten simulated hosts over UDP
(two paths, mgmt and storage), with Nova's heartbeat slow on purpose
(service_down_time 60 s, the engine's delta 30 s) and the agent's
silence short (1.5 s, beats every 0.2 s): a wrongful fencing on the
agent's word alone would have all the time it needs to happen here.

One engine for the module; before each scenario the faults are cleared,
every agent runs and every host is active and beating again. Each
scenario ends on the same checks: every simulated host powered on, none
in fencing, fenced or evacuating (in status, nor ever in the journal
since the scenario began), no fence/isolate/evacuate action, and nothing
powered off or proving at any moment a watcher sampled. The
fixed-duration phases are the scenarios' durations; everything else
waits on conditions, within budgets a loaded 2-core machine meets.
"""

import os
import threading
import time

import pytest

from functional import waiting
from functional.engine_process import EngineProcess
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

HOSTS = 10
INTERVAL = 0.2
PROVING = ("fencing", "fenced", "evacuating")
HARMFUL_ACTIONS = ("fence", "isolate", "evacuate")
#: Hosts whose clocks are 90 s off from the start (ahead, behind).
SKEWED = {"compute-8": 90.0, "compute-9": -90.0}
#: How long a wait on a condition may take (the engine reacts in about
#: a second; the rest is for a loaded machine).
SETTLE = 60


class Watch:
    """Samples the simulated hosts' power and the engine's states every
    0.1 s on a thread: anything powered off or proving, with when."""

    def __init__(self, cloud, engine):
        self.cloud = cloud
        self.engine = engine
        self.seen = []
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self.seen = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.wait(0.1):
            at = round(time.monotonic() - t0, 1)
            for name, h in list(self.cloud.hosts.items()):
                if not h.power_on:
                    self.seen.append((at, name, "powered off"))
            for h in self.engine.status().get("hosts", []):
                if h.get("state") in PROVING:
                    self.seen.append((at, h["name"], h["state"]))

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


class Bed:
    def __init__(self, cloud, agents, engine):
        self.cloud, self.agents, self.engine = cloud, agents, engine
        self.watch = Watch(cloud, engine)
        #: Hosts a scenario left unable to beat for the rest of the run.
        self.spoilt = set()
        self._marks = (0, 0, 0)

    # -- what the engine says -------------------------------------------
    def hosts(self):
        return [n for n in self.cloud.hosts if n not in self.spoilt]

    def host(self, name):
        return next((h for h in self.engine.status().get("hosts", [])
                     if h["name"] == name), {})

    def health(self):
        return self.engine.status().get("sources", {}).get(
            "agent_heartbeat", {})

    def settled(self):
        """Every host active; every agent not spoilt heard beating."""
        hosts = {h["name"]: h for h in self.engine.status().get("hosts", [])}
        return len(hosts) == HOSTS and all(
            h["state"] == "active" and (h["name"] in self.spoilt
                                        or h.get("agent") == "agent beating")
            for h in hosts.values())

    # -- since the scenario began ------------------------------------------
    def mark(self):
        with self.engine.reading_journal() as j:
            self._marks = (max([t["id"] for t in j.transitions()] or [0]),
                           max([a["id"] for a in j.actions()] or [0]),
                           len(self.engine.log_text()))

    def transitions(self):
        with self.engine.reading_journal() as j:
            return [t for t in j.transitions() if t["id"] > self._marks[0]]

    def actions(self):
        with self.engine.reading_journal() as j:
            return [a for a in j.actions() if a["id"] > self._marks[1]]

    def log(self):
        return self.engine.log_text()[self._marks[2]:]

    def wait(self, predicate, what):
        """Wait for ``predicate``; fail at once on harm (a host powered
        off or proving), not at the timeout."""
        def check():
            assert not self.watch.seen, "harm: %s (log %s)" % (
                self.watch.seen[:10], self.engine.log_path)
            return predicate()
        return self.engine.wait(check, SETTLE, what)

    def hold(self, seconds):
        """The scenario's fixed duration; stops at once on harm."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.watch.seen:
            time.sleep(0.2)
        assert not self.watch.seen, "harm: %s (log %s)" % (
            self.watch.seen[:10], self.engine.log_path)

    def assert_safe(self):
        """Nothing powered off or proving, now or ever in the scenario."""
        off = [n for n, h in self.cloud.hosts.items() if not h.power_on]
        assert not off, "powered off: %s (log %s)" % (off,
                                                     self.engine.log_path)
        assert not self.watch.seen, self.watch.seen[:10]
        proving = {n: s for n, s in self.engine.states().items()
                   if s[0] in PROVING}
        assert not proving, proving
        rows = [(t["host_name"], t["src"], t["dst"], t["reason"])
                for t in self.transitions() if t["dst"] in PROVING]
        assert not rows, rows
        acts = [(a["host_name"], a["kind"], a["outcome"])
                for a in self.actions() if a["kind"] in HARMFUL_ACTIONS]
        assert not acts, acts


@pytest.fixture(scope="module")
def module_bed(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("agent_safety"))
    cloud = SimCloud(hosts=HOSTS, servers_per_host=1, boot_time=1.0,
                     service_down_time=60.0)
    srv = SimServer(cloud).start()
    setup = simrun.agent_setup(tmp, two_paths=True, interval=INTERVAL)
    conf_path = simrun.write_config(tmp, srv, {
        "detection": {"delta": 30.0},
        "agent": {"silence_timeout": 1.5, "nova_report_interval": 1.0}},
        agents=setup)
    agents = SimAgents(cloud, **setup.sim_args())
    for name, offset in SKEWED.items():
        agents.set_clock_offset(offset, host=name)
    agents.start()
    engine = EngineProcess(tmp, conf_path, os.path.join(tmp, "status.json"),
                           "sqlite:///" + os.path.join(tmp, "journal.sqlite"))
    bed = Bed(cloud, agents, engine)
    try:
        engine.start(HOSTS, timeout=60)
        yield bed
    finally:
        bed.watch.stop()
        engine.stop()
        agents.stop()
        srv.stop()


@pytest.fixture
def bed(module_bed):
    b = module_bed
    b.agents.clear_faults()
    for name in b.hosts():
        b.agents.start_agent(name)
    b.engine.wait(b.settled, SETTLE, "every host active, its agent beating")
    b.mark()
    b.watch.start()
    try:
        yield b
    finally:
        b.watch.stop()


def _lines(log, host, text):
    return [ln for ln in log.splitlines()
            if "host='%s'" % host in ln and text in ln]


def test_30_percent_loss_on_one_path(bed):
    """30 % of every host's beats lost on the storage path for 60 s: at
    0.2 s beats, 300 beats per host on each path, standing for the
    target's 10 minutes at 1 s. The mgmt path carries on; no host leaves
    'active' for a moment."""
    bed.agents.set_fault(path="storage", loss=0.3)
    bed.hold(60)
    counts = bed.agents.network.counts
    lost, sent = counts[("storage", "lost")], counts[("storage", "sent")]
    assert 0.2 < lost / float(lost + sent) < 0.4, (lost, sent)
    moved = [(t["host_name"], t["src"], t["dst"], t["reason"])
             for t in bed.transitions()]
    assert not moved, moved
    assert bed.settled(), bed.engine.status()["hosts"]
    bed.assert_safe()


def test_one_path_down(bed):
    """The storage network down for every host for 30 s (the agents'
    sends fail): the engine sees the path lost on every host, no host
    leaves 'active', every host still counts as beating; the path comes
    back."""
    bed.agents.set_fault(path="storage", down=True)
    bed.hold(30)
    log = bed.log()
    unseen = [n for n in bed.hosts()
              if not _lines(log, n, "path storage silent")]
    assert not unseen, "path loss not reported for %s" % unseen
    health = bed.health()
    assert health["hosts_beating"] == len(bed.hosts()), health
    assert bed.agents.network.counts[("storage", "down")] > 0
    moved = [(t["host_name"], t["src"], t["dst"]) for t in bed.transitions()]
    assert not moved, moved
    assert bed.settled(), bed.engine.status()["hosts"]
    bed.agents.clear_faults()
    bed.wait(lambda: all(_lines(bed.log(), n, "heard on path storage")
                         for n in bed.hosts()),
             "the storage path heard again on every host")
    bed.assert_safe()


def test_engine_cut_off_from_60_percent_of_the_hosts(bed):
    """Every beat of six hosts of ten lost on every path for 30 s (the
    engine cut off from them; Nova still hears them): they turn suspect
    on their agents' silence, Nova's heartbeats refute it (and the cliff
    holds fencing on silence meanwhile); never fenced; all back to
    active, beating, once the network heals."""
    cut = [n for n in bed.hosts() if n not in SKEWED][:6]
    t0 = time.monotonic()
    for name in cut:
        bed.agents.set_fault(host=name, loss=1.0)

    def refuted():
        suspected = {t["host_name"] for t in bed.transitions()
                     if t["dst"] == "suspect"}
        return suspected >= set(cut) and all(
            bed.host(n).get("state") == "active"
            and bed.host(n).get("agent") == "agent silent" for n in cut)
    bed.wait(refuted, "the cut-off hosts suspect, then active again with "
             "their agents silent")
    bed.hold(max(0.0, 30 - (time.monotonic() - t0)))
    others = [n for n in bed.hosts() if n not in cut]
    assert all(bed.host(n).get("agent") == "agent beating" for n in others)
    assert all(bed.host(n).get("agent") == "agent silent" for n in cut)
    bed.agents.clear_faults()
    bed.wait(bed.settled, "every host beating again")
    bed.assert_safe()


def test_an_agent_restart(bed):
    """compute-6's agent restarted five times (as systemd does: same
    boot, sequence numbers going on), then once slowly (stopped past the
    silence timeout): its beats are accepted each time, nothing is
    powered off, the host ends active and beating."""
    host = "compute-6"
    dropped = dict(bed.health().get("dropped", {}))
    for _ in range(5):
        bed.agents.restart_agent(host)
        bed.hold(1.0)
    bed.agents.stop_agent(host)
    bed.wait(lambda: bed.host(host).get("agent") == "agent silent",
             "%s's agent silent" % host)
    bed.agents.start_agent(host)
    bed.wait(bed.settled, "%s beating again" % host)
    assert bed.health().get("dropped", {}) == dropped
    assert not [t for t in bed.transitions() if t["host_name"] != host]
    bed.assert_safe()


def test_an_agent_stopped_for_long_with_nova_compute_fine(bed):
    """compute-7's agent stopped for 60 s (standing for an hour) while
    its nova-compute reports to Nova as ever: suspect at the silence,
    active again on Nova's next heartbeat, said 'agent silent' to the end,
    never fenced."""
    host = "compute-7"
    t0 = time.monotonic()
    bed.agents.stop_agent(host)
    bed.wait(lambda: bed.host(host).get("state") == "active"
             and bed.host(host).get("agent") == "agent silent",
             "%s active with its agent silent" % host)
    bed.hold(max(0.0, 60 - (time.monotonic() - t0)))
    status = bed.host(host)
    assert (status["state"], status["agent"]) == ("active", "agent silent")
    assert bed.cloud.hosts[host].alive
    path = [(t["src"], t["dst"]) for t in bed.transitions()]
    assert path in ([], [("active", "suspect"), ("suspect", "active")]), path
    bed.assert_safe()


def test_host_clocks_90_seconds_off(bed):
    """compute-8's clock runs 90 s ahead and compute-9's 90 s behind,
    from before the engine first heard them: the replay guard learns
    each offset, their beats are accepted all along (none dropped as
    stale or replayed), they stay active and beating."""
    assert {n: bed.agents.agent(n).clock_offset for n in SKEWED} == SKEWED
    before = bed.health()
    bed.hold(15)
    health = bed.health()
    # Every host beating on two paths at 5 beats/s, nearly all accepted.
    beating = len(bed.hosts())
    assert health["accepted"] - before["accepted"] \
        > 0.8 * 15 * beating * 2 * 5, (before, health)
    assert health["dropped"] == before["dropped"], (before, health)
    # Not once since the engine started.
    assert not {"stale", "replayed"} & set(health["dropped"]), health
    with bed.engine.reading_journal() as j:
        ever = [(t["host_name"], t["dst"]) for t in j.transitions()
                if t["host_name"] in SKEWED and t["dst"] != "active"]
    assert not ever, ever
    for name in SKEWED:
        status = bed.host(name)
        assert (status["state"], status["agent"]) == ("active",
                                                      "agent beating")
    bed.assert_safe()


def test_a_host_clock_stepping_90_seconds_while_running(bed):
    """compute-5's clock steps 90 s ahead while its agent runs, and the
    agent restarts to read it (same boot). The first beats with the new
    offset are refused as stale (one such beat is what a held-back
    recording looks like); a run of them in sequence is a sender running
    on, and the guard learns the new offset: the host is heard again,
    active and beating, never fenced."""
    host = "compute-5"
    stale = bed.health()["dropped"].get("stale", 0)
    bed.agents.set_clock_offset(90.0, host=host)
    bed.wait(lambda: bed.health()["dropped"].get("stale", 0) > stale,
             "%s's stepped beats refused at first" % host)
    bed.wait(lambda: bed.host(host).get("state") == "active"
             and bed.host(host).get("agent") == "agent beating",
             "%s heard again with its new offset" % host)
    bed.hold(5)
    status = bed.host(host)
    assert (status["state"], status["agent"]) == ("active", "agent beating")
    bed.assert_safe()
