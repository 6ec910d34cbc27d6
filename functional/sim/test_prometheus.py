"""The shipped Prometheus rules and Grafana dashboard against a real
Prometheus scraping the real engine on the simulator.

The real ``instanceha run`` (with the simulated hosts' heartbeat agents)
is scraped every second by a private ``prometheus`` (Debian package
prometheus, installed by tools/test-packages.sh; a temporary data directory,
a free loopback port) that evaluates etc/prometheus/instanceha-rules.yml
every second. The rules' ``for:`` durations are meant for operators
(minutes); the copy loaded here divides them by 60, as the simulator
compresses a cloud's timings. Hosts die, a BMC stops answering, an agent
falls silent, a storm is held and lifted, the cloud is filled until no
host can fail with its servers placed elsewhere, the engine stops and
starts again: the alerts these make fire and then resolve, and every query of
etc/grafana/instanceha-dashboard.json returns data over the run.

A missing prometheus skips, or fails naming it under
INSTANCEHA_REQUIRE_SERVICES=1.

Budgets: every wait is for a condition, with 60-90 s; the run takes
~90 s on a 2-core machine, idle or with two CPU-bound processes beside it
(most of it the scaled ``for:`` durations: 10 s, 10 s, 20 s, 5 s...).
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse

import pytest
import yaml

from functional import waiting
from functional.engine_process import EngineProcess
from functional.events_fixtures import missing
from functional.httpcall import request
from functional.peers.procs import free_port
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RULES = os.path.join(REPO, "etc", "prometheus", "instanceha-rules.yml")
DASHBOARD = os.path.join(REPO, "etc", "grafana", "instanceha-dashboard.json")
HOSTS = ["compute-%d" % i for i in range(6)]
#: operators' minutes become seconds here
TIME_SCALE = 60
#: alerts nothing in this run may set off (their conditions cannot occur:
#: every recovery takes seconds, the journal is a local file)
NEVER = {"InstanceHAJournalUnreachable", "InstanceHAFencingSlow",
         "InstanceHAIsolationSlow", "InstanceHAEvacuationSlow"}


def _seconds(text):
    m = re.fullmatch(r"(\d+)([smh])", str(text))
    assert m, "unexpected for: %r" % text
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def scaled_rules(path):
    """The shipped rules with every alert's ``for:`` divided by
    TIME_SCALE (at least 1 s); written to ``path``."""
    with open(RULES) as f:
        data = yaml.safe_load(f)
    for group in data["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "%ds" % max(1, _seconds(rule["for"])
                                          // TIME_SCALE)
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    return path


def dashboard_queries():
    """[(panel title, expr)] of every panel target in the dashboard."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            out.append((panel["title"], t["expr"]))
    return out


class Prometheus:
    """A private prometheus process: 1 s scrapes of ``target`` (job
    instanceha) and 1 s rule evaluations."""

    def __init__(self, workdir, target, rules):
        self.dir = os.path.join(workdir, "prometheus")
        os.makedirs(self.dir)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, "prometheus.log")
        self.conf = os.path.join(self.dir, "prometheus.yml")
        with open(self.conf, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                           "evaluation_interval": "1s"},
                "rule_files": [rules],
                "scrape_configs": [{
                    "job_name": "instanceha",
                    "static_configs": [{"targets": [target]}]}]}, f)
        self.proc = None

    def start(self, exe):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [exe, "--config.file=" + self.conf,
                 "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                 "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        waiting.wait_for(self._ready, 60, lambda: "prometheus ready on %s "
                         "(log: %s)" % (self.url, self.log_text()))
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited with status %s:\n%s"
                                 % (self.proc.returncode, self.log_text()))
        try:
            return request(self.url + "/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def api(self, path, **params):
        status, _, body = request(self.url + "/api/v1/" + path + "?"
                                  + urllib.parse.urlencode(params),
                                  timeout=10)
        data = json.loads(body)
        assert status == 200 and data["status"] == "success", (path, params,
                                                               data)
        return data["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def value(self, expr):
        """The single value ``expr`` returns now, or None."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def alerts(self):
        """{(alertname, frozenset of its other labels): state} active now
        (pending or firing)."""
        out = {}
        for a in self.api("alerts")["alerts"]:
            labels = dict(a["labels"])
            name = labels.pop("alertname")
            labels.pop("severity", None)
            out[(name, frozenset(labels.items()))] = a["state"]
        return out

    def firing(self):
        return {k for k, state in self.alerts().items() if state == "firing"}


def _has(alerts, name, **labels):
    return any(n == name and set(labels.items()) <= set(ls)
               for n, ls in alerts)


def _recovered_or_held(engine, name):
    """(state, reason) of ``name`` once evacuated or held by a storm."""
    state, reason = engine.states()[name]
    if state == "evacuated" or "storm hold" in reason:
        return state, reason
    return None


@pytest.fixture
def bed(tmp_path):
    exe = shutil.which("prometheus")
    if exe is None:
        missing("prometheus is not installed (Debian package prometheus; "
                "tools/test-packages.sh installs it)")
    workdir = str(tmp_path)
    cloud = SimCloud(hosts=len(HOSTS), servers_per_host=2, boot_time=1.0,
                     evacuation_time=0.2)
    srv = SimServer(cloud).start()
    setup = simrun.agent_setup(workdir, interval=0.2)
    api_port = free_port()
    conf_path = simrun.write_config(workdir, srv, {
        "DEFAULT": {"action_retries": 2},
        "api": {"port": api_port},
        "audit": {"interval": 1.0},
        "failover_capacity": {"enabled": True, "interval": 10.0},
        "agent": {"silence_timeout": 1.5, "nova_report_interval": 1.0},
        "policy": {"threshold": 50}}, agents=setup)
    agents = SimAgents(cloud, **setup.sim_args()).start()
    engine = EngineProcess(workdir, conf_path,
                           os.path.join(workdir, "status.json"),
                           "sqlite:///" + os.path.join(workdir,
                                                       "journal.sqlite"))
    prom = Prometheus(workdir, "127.0.0.1:%d" % api_port,
                      scaled_rules(os.path.join(workdir, "rules.yml")))
    try:
        engine.start(len(HOSTS), timeout=60)
        prom.start(exe)
        yield cloud, agents, engine, prom
    finally:
        prom.stop()
        engine.stop()
        agents.stop()
        srv.stop()


def test_alerts_fire_and_resolve_and_every_dashboard_query_has_data(bed):
    cloud, agents, engine, prom = bed
    started = time.time()

    def wait(predicate, what, timeout=90):
        return waiting.wait_for(predicate, timeout, lambda: (
            "%s (alerts: %s; states: %s; engine log: %s; prometheus: %s)"
            % (what, prom.alerts(), engine.states(), engine.log_path,
               prom.log_text())), interval=0.25)

    def firing(name, **labels):
        wait(lambda: _has(prom.firing(), name, **labels),
             "%s %s firing" % (name, labels))

    def resolved(name):
        wait(lambda: not any(n == name for n, _ in prom.alerts()),
             "%s resolved" % name)

    # Scraped, recorded, every agent heard, and nothing fires.
    wait(lambda: prom.value('instanceha:hosts:by_state{state="active"}')
         == len(HOSTS) and prom.value(
             'max(instanceha_source_agent_heartbeat_hosts_beating)')
         == len(HOSTS) and not prom.firing(),
         "every host active and beating in Prometheus, no alert firing")

    # Every host gets a server of 40 vCPU (of 64): none can be lost with
    # its servers placed elsewhere, so the cloud's failover capacity falls
    # below 1 and the alert fires; deleted again, it resolves.
    cloud.add_flavor("big", 40, 2048, 20)
    big = [cloud.create_server("big-%s" % h, "big", cloud.default_image,
                               host=h).id for h in HOSTS]
    firing("InstanceHAFailoverCapacityLow", scope="cloud")
    assert prom.value('max(instanceha_failover_capacity_hosts{scope='
                      '"cloud"})') == 0
    for sid in big:
        cloud.delete_server(sid)
    resolved("InstanceHAFailoverCapacityLow")

    # compute-1's BMC stops answering (unprotected). compute-0 dies and
    # is recovered, then compute-1 dies (one at a time: a server of a host
    # dying with another may be sent to it and wait for its fencing): it
    # cannot be fenced and ends failed. compute-4's agent falls silent
    # while the host lives on.
    cloud.set_bmc("compute-1", reachable=False)
    firing("InstanceHAUnprotectedHost", host="compute-1")
    cloud.kill("compute-0")
    engine.wait_state("compute-0", "evacuated", timeout=90)
    cloud.kill("compute-1")
    firing("InstanceHAHostFailed", host="compute-1")
    assert engine.states()["compute-1"][0] == "failed"
    # Silent now: compute-0 and compute-1 (dead: one recovered, one
    # failed) and compute-4, alive (suspect a moment, active again once
    # Nova records its heartbeat). (Stopped only now, so that its silence
    # overlaps no host's detection.)
    agents.stop_agent("compute-4")
    firing("InstanceHAAgentsSilent")

    # The operator fixes the BMC and restarts the agent, and resumes
    # compute-1: every one of these alerts resolves.
    cloud.set_bmc("compute-1", reachable=True)
    agents.start_agent("compute-4")
    status, _, body = engine.api(
        "POST", "/hosts/compute-1/resume",
        json.dumps({"reason": "BMC fixed"}).encode(),
        {"Content-Type": "application/json"})
    assert status == 202, body
    engine.wait_state("compute-1", "evacuated", timeout=90)
    for name in ("InstanceHAUnprotectedHost", "InstanceHAHostFailed",
                 "InstanceHAAgentsSilent"):
        resolved(name)

    # More hosts die within the storm window, one at a time, until one is
    # held: above the 50 % threshold, no new host is fenced (storm hold,
    # fencing held) until the operator lifts the hold. (A host whose
    # agent saw it die first counts as lost only once it is fenced: the
    # fourth of six may still be fenced, the fifth is held.)
    held = None
    for name in ("compute-2", "compute-3", "compute-4"):
        cloud.kill(name)
        state, _ = engine.wait(lambda: _recovered_or_held(engine, name),
                               90, "%s recovered or held" % name)
        if state != "evacuated":
            held = name
            break
    assert held is not None and held != "compute-2", engine.states()
    firing("InstanceHAStormHold", scope="global")
    firing("InstanceHAFencingHeld")
    # Its servers wait: its recovery is stuck (20 min, here 20 s).
    firing("InstanceHARecoveryStuck", host=held)
    assert cloud.hosts[held].power_on, engine.states()
    status, _, body = engine.api(
        "POST", "/storm/resume", json.dumps({"reason": "rack PDU"}).encode(),
        {"Content-Type": "application/json"})
    assert status == 202, body
    engine.wait_state(held, "evacuated", timeout=90)
    for name in ("InstanceHAStormHold", "InstanceHAFencingHeld",
                 "InstanceHARecoveryStuck"):
        resolved(name)

    # Every dashboard query has data over the run, and every metric the
    # rules and the dashboard name is one the engine exports.
    now = time.time()
    empty = []
    for title, expr in dashboard_queries():
        result = prom.api("query_range", query=expr, start=started, end=now,
                          step=1)["result"]
        if not any(not math.isnan(float(v)) for series in result
                   for _, v in series["values"]):
            empty.append((title, expr))
    assert not empty, empty
    exported = set(prom.api("label/__name__/values"))
    with open(RULES) as f:
        named = set(re.findall(r"\binstanceha_[a-z_]+", f.read()))
    named |= {n for _, e in dashboard_queries()
              for n in re.findall(r"\binstanceha_[a-z_]+", e)}
    assert named and named <= exported, sorted(named - exported)
    # The slow-recovery alerts' bucket matchers match the engine's
    # buckets (le as this exporter writes it), one series each.
    with open(RULES) as f:
        exprs = [r["expr"] for g in yaml.safe_load(f)["groups"]
                 for r in g["rules"] if "alert" in r]
    buckets = [b for e in exprs for b in re.findall(
        r"instanceha_[a-z_]+_bucket\{[^}]*le=~[^}]*\}", e)]
    assert len(buckets) == 3, buckets
    for selector in buckets:
        assert len(prom.query(selector)) == 1, selector

    # The engine stops: no replica acts, its target is down; started
    # again, both resolve.
    engine.stop()
    firing("InstanceHANoReplicaActing")
    firing("InstanceHAReplicaDown")
    engine.start(len(HOSTS), timeout=60)
    resolved("InstanceHANoReplicaActing")
    resolved("InstanceHAReplicaDown")

    # Nothing fired that this run cannot cause.
    window = int(time.time() - started) + 5
    fired = {r["metric"]["alertname"] for r in prom.query(
        'max_over_time(ALERTS{alertstate="firing"}[%ds])' % window)}
    assert fired >= {"InstanceHAFailoverCapacityLow",
                     "InstanceHAUnprotectedHost", "InstanceHAHostFailed",
                     "InstanceHAAgentsSilent", "InstanceHAStormHold",
                     "InstanceHAFencingHeld", "InstanceHARecoveryStuck",
                     "InstanceHANoReplicaActing",
                     "InstanceHAReplicaDown"}, fired
    assert not fired & NEVER, fired
