"""Several replicas of ``instanceha run`` on one simulated cloud.

Every member is a real process with its own status file, all sharing one
journal database (MariaDB, else PostgreSQL; a fresh database per test) and
one tooz backend: the machine's Redis at 127.0.0.1:6379 (a group of each
test's own), a private redis-server, or a private etcd (Debian package
etcd-server, installed by tools/test-packages.sh) on free loopback ports with a
temporary data directory. A missing service skips, or fails naming it under
INSTANCEHA_REQUIRE_SERVICES=1.

Short leases (4 s) keep the cost down. The simulator counts, at Nova's and
the BMCs' side, every evacuate request per server and every power request.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import json

import pytest
import sqlalchemy as sa

from functional import waiting
from functional.engine_process import EngineProcess
from functional.events_fixtures import missing, port_open
from functional.httpcall import request
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer

LEASE = 4
MARGIN = 1.5
COORDINATION = {"lease": LEASE, "margin": MARGIN, "heartbeat_interval": 0.5}

DATABASES = [
    ("MariaDB at 127.0.0.1:3306", "mysql+pymysql://root@127.0.0.1:3306/%s",
     "mysql+pymysql://root@127.0.0.1:3306/"),
    ("PostgreSQL at 127.0.0.1:5432",
     "postgresql+psycopg2://postgres@127.0.0.1:5432/%s",
     "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def journal_url():
    """A fresh database on MariaDB (else PostgreSQL), dropped afterwards."""
    db = "iha_coord_%s" % uuid.uuid4().hex[:8]
    errors = []
    for name, url_fmt, admin_url in DATABASES:
        try:
            admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as c:
                c.execute(sa.text("CREATE DATABASE %s" % db))
        except Exception as e:   # noqa: BLE001
            errors.append("%s: %s" % (name, str(e).splitlines()[0]))
            continue
        yield url_fmt % db
        with admin.connect() as c:
            c.execute(sa.text("DROP DATABASE %s" % db))
        admin.dispose()
        return
    missing("a shared journal database (MariaDB or PostgreSQL) is needed: "
            + "; ".join(errors))


def shared_redis():
    if not port_open("127.0.0.1", 6379):
        missing("Redis at 127.0.0.1:6379 is needed for this test")
    return "redis://127.0.0.1:6379"


class Daemon:
    """A private server process (redis-server, etcd) on a free port."""

    def __init__(self, name, argv_for, port, workdir):
        self.name, self.argv_for, self.port = name, argv_for, port
        self.workdir = str(workdir)
        self.proc = None

    def start(self, timeout=30):
        log = open(os.path.join(self.workdir, self.name + ".log"), "ab")
        self.proc = subprocess.Popen(self.argv_for(self.port), stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        waiting.wait_for(lambda: port_open("127.0.0.1", self.port), timeout,
                         "%s to listen on port %d" % (self.name, self.port))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def private_redis(tmp_path):
    exe = shutil.which("redis-server")
    if exe is None:
        missing("redis-server is needed for this test (a private one)")
    d = Daemon("redis", lambda port: [
        exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", str(tmp_path)], free_port(), tmp_path)
    d.start()
    yield d
    d.stop()


@pytest.fixture
def etcd(tmp_path):
    exe = shutil.which("etcd")
    if exe is None:
        missing("etcd is needed for this test (Debian package etcd-server; "
                "tools/test-packages.sh installs it)")
    data = tmp_path / "etcd-data"
    peer = free_port()

    def argv(port):
        return [exe, "--name", "iha", "--data-dir", str(data),
                "--listen-client-urls", "http://127.0.0.1:%d" % port,
                "--advertise-client-urls", "http://127.0.0.1:%d" % port,
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-cluster", "iha=http://127.0.0.1:%d" % peer,
                "--log-level", "warn"]
    d = Daemon("etcd", argv, free_port(), tmp_path)
    d.start()
    yield d
    d.stop()


class Group:
    """One simulated cloud, several ``instanceha run`` members on it."""

    def __init__(self, workdir, backend_url, journal_url, overrides=None,
                 **sim_params):
        self.workdir = str(workdir)
        self.backend_url = backend_url
        self.journal_url = journal_url
        self.overrides = overrides or {}
        self.group = "iha-test-%s" % uuid.uuid4().hex[:8]
        sim_params.setdefault("hosts", 4)
        sim_params.setdefault("servers_per_host", 3)
        sim_params.setdefault("evacuation_time", 0.2)
        self.sim = SimCloud(**sim_params)
        self.server = SimServer(self.sim).start()
        self.members = []
        self._mu = threading.Lock()
        self.exited = {}          # member index -> (monotonic time, status)
        # At the simulator's side: (monotonic time, what, target).
        self.writes = []
        self._watch(self.sim, "power", lambda name, on: (
            "power_on" if on else "power_off", name))
        self._watch(self.sim, "evacuate", lambda server_id, *a, **k: (
            "evacuate", server_id))

    def _watch(self, obj, method, describe):
        real = getattr(obj, method)

        def recorded(*args, **kwargs):
            result = real(*args, **kwargs)
            self.writes.append((time.monotonic(),) + describe(*args,
                                                              **kwargs))
            return result
        setattr(obj, method, recorded)

    def add_member(self, env=None):
        with self._mu:
            i = len(self.members)
            self.members.append(None)
        workdir = os.path.join(self.workdir, "member%d" % i)
        groups = {"journal": {"connection": self.journal_url},
                  "coordination": dict(COORDINATION,
                                       backend_url=self.backend_url,
                                       group=self.group)}
        for group, values in self.overrides.items():
            groups.setdefault(group, {}).update(values)
        conf = simrun.write_config(workdir, self.server, groups)
        p = EngineProcess(workdir, conf, os.path.join(workdir, "status.json"),
                          self.journal_url)
        full = dict(os.environ, PYTHONUNBUFFERED="1")
        full.update(env or {})
        self.members[i] = p
        p.start(0, timeout=60, env=full)
        proc = p.proc
        threading.Thread(target=self._reap, args=(i, proc),
                         daemon=True).start()
        return i

    def _reap(self, i, proc):
        status = proc.wait()
        self.exited[i] = (time.monotonic(), status)

    def add_members(self, n, env=None):
        """Start ``n`` members at once (each waits for its status file)."""
        threads = [threading.Thread(target=self.add_member, args=(env,))
                   for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(self.members) >= n

    def restart_member(self, i, env=None):
        """What systemd does for an exited member (Restart=on-failure)."""
        p = self.members[i]
        p.proc = None
        full = dict(os.environ, PYTHONUNBUFFERED="1")
        full.update(env or {})
        self.exited.pop(i, None)
        p.start(0, timeout=60, env=full)
        threading.Thread(target=self._reap, args=(i, p.proc),
                         daemon=True).start()

    def alive(self, i):
        p = self.members[i]
        return p is not None and p.proc is not None and p.proc.poll() is None

    def coordination(self, i):
        if self.members[i] is None:
            return {}
        return self.members[i].status().get("coordination") or {}

    def acting(self):
        """Indices of the live members whose status says they act."""
        return [i for i in range(len(self.members)) if self.alive(i)
                and self.coordination(i).get("role") == "acting"
                and self.members[i].status().get("hosts")]

    def wait_acting(self, timeout=60, exclude=()):
        def one():
            acting = [i for i in self.acting() if i not in exclude]
            return acting[0] + 1 if len(acting) == 1 else None
        return waiting.wait_for(one, timeout, lambda: "one acting member "
                                "(roles: %s)" % self.roles()) - 1

    def roles(self):
        return {i: (self.coordination(i).get("role"), self.alive(i))
                for i in range(len(self.members))}

    def state(self, i, host):
        hosts = self.members[i].status().get("hosts", [])
        return next((h["state"] for h in hosts if h["name"] == host), None)

    def check_no_double_action(self):
        """No server evacuated twice; never two members acting at once."""
        snap = self.sim.snapshot()
        assert snap["double_rebuilds"] == []
        twice = {s: n for s, n in snap["evacuate_calls"].items() if n > 1}
        assert twice == {}, "evacuated more than once: %s" % twice

    def close(self):
        for p in self.members:
            if p is None:
                continue
            if p.proc is not None and p.proc.poll() is None:
                try:
                    p.proc.send_signal(signal.SIGCONT)
                except OSError:
                    pass
            p.stop()
        self.server.stop()


@pytest.fixture
def make_group(tmp_path):
    groups = []

    def make(backend_url, journal_url, overrides=None, **sim_params):
        g = Group(tmp_path / ("group%d" % len(groups)), backend_url,
                  journal_url, overrides, **sim_params)
        groups.append(g)
        return g
    yield make
    for g in groups:
        g.close()


def servers_on(sim, host):
    return [s.id for s in sim.servers.values() if s.host == host]


def watch_single_actor(group, stop, seen):
    """Poll every member's status: more than one acting at once is a
    failure (recorded in ``seen``)."""
    while not stop.is_set():
        acting = group.acting()
        if len(acting) > 1:
            seen.append((time.monotonic(), acting))
        stop.wait(0.2)


@pytest.fixture(params=["redis", "etcd"])
def backend_url(request):
    if request.param == "redis":
        return shared_redis()
    d = request.getfixturevalue("etcd")
    return "etcd3+http://127.0.0.1:%d" % d.port


def test_acting_member_killed_after_fencing_another_finishes(
        make_group, backend_url, journal_url):
    """The acting member SIGKILLs itself right after it fenced a dead host;
    a standby takes over within the lease and finishes the recovery:
    every server rebuilt once, nothing fenced by two members at once."""
    g = make_group(backend_url, journal_url)
    g.add_member(env={"INSTANCEHA_FAILPOINT": "after_action:fence"})
    assert g.wait_acting() == 0
    g.add_members(2)
    waiting.wait_for(lambda: all(g.coordination(i).get("role") == "standby"
                                 for i in (1, 2)), 60, "two standbys")
    waiting.wait_for(lambda: len(g.coordination(0).get("members", [])) == 3,
                     30, "member 0 to list three members")
    victims = servers_on(g.sim, "compute-1")
    stop, seen = threading.Event(), []
    threading.Thread(target=watch_single_actor, args=(g, stop, seen),
                     daemon=True).start()
    g.sim.kill("compute-1")
    waiting.wait_for(lambda: 0 in g.exited, 90,
                     lambda: "member 0 to be killed by its failpoint "
                     "(log %s)" % g.members[0].log_path)
    killed_at, status = g.exited[0]
    assert status == -signal.SIGKILL
    new = g.wait_acting(timeout=60, exclude=(0,))
    waiting.wait_for(lambda: g.state(new, "compute-1") == "evacuated", 90,
                     lambda: "compute-1 evacuated by member %d (states %s, "
                     "log %s)" % (new, g.members[new].states(),
                                  g.members[new].log_path))
    stop.set()
    after = [w for w in g.writes if w[0] > killed_at]
    assert after, "nothing done after the kill"
    takeover = after[0][0] - killed_at
    print("takeover %s: %.2f s (SIGKILL to the next power/evacuate request"
          " by member %d: %s)" % (backend_url.split(":")[0], takeover, new,
                                  after[0][1:]))
    assert takeover < 3 * LEASE + 10
    assert seen == []
    g.check_no_double_action()
    calls = g.sim.snapshot()["evacuate_calls"]
    assert sorted(s for s in calls if s in victims) == sorted(victims)
    # The power-off before the kill (member 0) and any after it (the new
    # member proving the host dead again) are at least the takeover apart.
    offs = [w for w in g.writes if w[1] == "power_off"
            and w[2] == "compute-1"]
    before = [w for w in offs if w[0] <= killed_at]
    assert len(before) == 1
    # instanceha status on the new acting member names it and the others.
    text = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "status",
         "--config-file", g.members[new].conf_path],
        capture_output=True, text=True, timeout=30).stdout
    assert "ACTS for all hosts" in text
    assert g.coordination(new)["member"] in text


def test_member_frozen_longer_than_the_lease_does_not_act_when_woken(
        make_group, journal_url):
    """SIGSTOP the acting member while a host is dying, longer than the
    lease (lease + 2 s): another takes over and recovers the host; SIGCONT: the woken
    member refuses every write and exits (status 3) without acting."""
    g = make_group(shared_redis(), journal_url)
    g.add_member()
    assert g.wait_acting() == 0
    g.add_member()
    waiting.wait_for(lambda: g.coordination(1).get("role") == "standby", 60,
                     "a standby")
    g.sim.kill("compute-2")
    waiting.wait_for(lambda: g.state(0, "compute-2") not in (None, "active"),
                     60, "member 0 to see compute-2 lost")
    frozen = g.members[0]
    frozen.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    assert g.wait_acting(timeout=60, exclude=(0,)) == 1
    waiting.wait_for(lambda: g.state(1, "compute-2") == "evacuated", 90,
                     lambda: "compute-2 evacuated by member 1 (log %s)"
                     % g.members[1].log_path)
    # Frozen longer than the lease, with margin.
    time.sleep(max(0.0, LEASE + 2 - (time.monotonic() - stopped_at)))
    offset = os.path.getsize(frozen.log_path)
    writes_before = len(g.writes)
    woken_at = time.monotonic()
    frozen.proc.send_signal(signal.SIGCONT)
    waiting.wait_for(lambda: 0 in g.exited, 30,
                     "the woken member to exit")
    assert g.exited[0][1] == 3
    with open(frozen.log_path, errors="replace") as f:
        f.seek(offset)
        woken_log = f.read()
    assert "leadership_lost" in woken_log, woken_log
    assert "action_finished" not in woken_log, woken_log
    # Whatever reached the simulator since the wake-up came from member 1
    # (still acting), which holds compute-2 evacuated: no new evacuation.
    assert [w for w in g.writes[writes_before:] if w[1] == "evacuate"] == []
    assert g.exited[0][0] >= woken_at
    g.check_no_double_action()


def test_redis_restarted_mid_run(make_group, private_redis, journal_url):
    """The backend restarts (losing every key): the acting member cannot
    prove its leadership any more and exits; the group elects one member
    again (systemd's restart emulated) and it recovers a dead host."""
    g = make_group("redis://127.0.0.1:%d" % private_redis.port, journal_url)
    g.add_member()
    assert g.wait_acting() == 0
    g.add_member()
    waiting.wait_for(lambda: g.coordination(1).get("role") == "standby", 60,
                     "a standby")
    stop, seen = threading.Event(), []
    threading.Thread(target=watch_single_actor, args=(g, stop, seen),
                     daemon=True).start()
    private_redis.stop()
    time.sleep(1.0)
    private_redis.start()

    def settled():
        for i in range(len(g.members)):
            if i in g.exited:
                assert g.exited[i][1] == 3, g.members[i].log_text()[-2000:]
                g.restart_member(i)
        return len(g.acting()) == 1
    waiting.wait_for(settled, 90, lambda: "one acting member after the "
                     "restart (roles %s)" % g.roles())
    acting = g.acting()[0]
    g.sim.kill("compute-3")
    waiting.wait_for(lambda: g.state(acting, "compute-3") == "evacuated"
                     or any(g.state(i, "compute-3") == "evacuated"
                            for i in g.acting()), 90,
                     lambda: "compute-3 evacuated (roles %s)" % g.roles())
    stop.set()
    assert seen == []
    g.check_no_double_action()


def _get(status, path):
    """(HTTP status, JSON body) of GET ``path`` on the API a member's
    status file names (/healthz and /readyz are open on TCP)."""
    code, _, body = request(status["api"] + path)
    return code, json.loads(body)


def _run_once(tmp_path, groups):
    """``instanceha run`` on a small simulated cloud that must refuse to
    start: (completed process, simulator)."""
    sim = SimCloud(hosts=2, servers_per_host=1)
    server = SimServer(sim).start()
    try:
        conf = simrun.write_config(str(tmp_path), server, groups)
        r = subprocess.run([sys.executable, "-m", "instanceha.cmd.main",
                            "run", "--config-file", conf],
                           capture_output=True, text=True, timeout=60)
    finally:
        server.stop()
    return r, sim


def _one_line(r):
    lines = [ln for ln in r.stderr.splitlines()
             if ln.startswith("instanceha:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_backend_down_at_start_is_waited_for_then_the_member_acts(
        tmp_path, journal_url):
    """Hole 5: after a site power loss Redis starts after instanceha. The
    member waits for it (back-off capped at 2 s here), saying so in its
    status, /healthz (200: a restart would only wait again) and /readyz
    (503, starting); once redis-server listens it joins, is elected and
    recovers a dead host. Before: exit status 2 at once, which systemd
    never restarts (RestartPreventExitStatus=2)."""
    exe = shutil.which("redis-server")
    if exe is None:
        missing("redis-server is needed for this test (a private one)")
    redis = Daemon("redis", lambda port: [
        exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", str(tmp_path)], free_port(), tmp_path)
    g = Group(tmp_path / "group", "redis://127.0.0.1:%d" % redis.port,
              journal_url, {"DEFAULT": {"startup_retry_max_interval": 2}},
              hosts=2, servers_per_host=2)
    try:
        g.add_member()
        member = g.members[0]

        def waiting_for():
            starting = member.status().get("starting") or {}
            return starting.get("waiting_for", "").startswith(
                "the coordination backend redis://127.0.0.1:%d"
                % redis.port) and starting["attempts"] >= 2 and starting
        starting = waiting.wait_for(waiting_for, 30, lambda: "the status to "
                                    "say what the start waits for (log %s)"
                                    % member.log_path)
        assert "ConnectionRefusedError" in starting["error"], starting
        code, health = _get(member.status(), "/healthz")
        assert code == 200, health
        assert health["reason"].startswith(
            "starting: waiting for the coordination backend "
            "redis://127.0.0.1:%d (ConnectionRefusedError" % redis.port)
        code, ready = _get(member.status(), "/readyz")
        assert code == 503 and ready["role"] == "starting", ready
        assert g.alive(0) and g.sim.snapshot()["evacuate_calls"] == {}
        redis.start()
        assert g.wait_acting(timeout=60) == 0
        assert "starting" not in member.status()
        assert "backend_reached" in member.log_text()
        victims = servers_on(g.sim, "compute-1")
        g.sim.kill("compute-1")
        waiting.wait_for(lambda: g.state(0, "compute-1") == "evacuated", 90,
                         lambda: "compute-1 evacuated (log %s)"
                         % member.log_path)
        assert sorted(g.sim.snapshot()["evacuate_calls"]) == sorted(victims)
        g.check_no_double_action()
    finally:
        g.close()
        redis.stop()


def test_leader_that_lost_its_backend_restarted_while_it_is_down_waits(
        make_group, private_redis, journal_url):
    """The issue's sequence: Redis goes away; the acting member cannot
    renew its lease and exits with status 3 (systemd restarts that one:
    RestartPreventExitStatus names only 2); restarted while Redis is still
    down it waits for it, saying so, instead of exiting with status 2;
    Redis returns and the member acts again and recovers a dead host."""
    g = make_group("redis://127.0.0.1:%d" % private_redis.port, journal_url,
                   {"DEFAULT": {"startup_retry_max_interval": 2}})
    g.add_member()
    assert g.wait_acting() == 0
    private_redis.stop()
    waiting.wait_for(lambda: 0 in g.exited, 60, lambda: "the member to exit "
                     "(log %s)" % g.members[0].log_path)
    assert g.exited[0][1] == 3, g.members[0].log_text()[-2000:]
    g.restart_member(0)              # what systemd does for status 3
    member = g.members[0]
    waiting.wait_for(lambda: (member.status().get("starting") or {})
                     .get("attempts", 0) >= 2, 30,
                     lambda: "the restarted member to wait for Redis (log "
                     "%s)" % member.log_path)
    code, health = _get(member.status(), "/healthz")
    assert code == 200 and "waiting for the coordination backend" in \
        health["reason"], health
    assert g.alive(0)
    private_redis.start()
    assert g.wait_acting(timeout=60) == 0
    g.sim.kill("compute-2")
    waiting.wait_for(lambda: g.state(0, "compute-2") == "evacuated", 90,
                     lambda: "compute-2 evacuated (log %s)"
                     % member.log_path)
    g.check_no_double_action()


def test_replicas_with_a_sqlite_journal_are_refused(tmp_path):
    """Hole 7: each replica would keep its own history. Before: a warning
    in the log, and the member started."""
    r, sim = _run_once(tmp_path, {
        "journal": {"connection": "sqlite:///%s" % (tmp_path / "j.sqlite")},
        "coordination": dict(COORDINATION, backend_url="redis://"
                             "127.0.0.1:%d" % free_port())})
    assert r.returncode == 2, r.stderr
    line = _one_line(r)
    assert "[coordination] backend_url" in line
    assert "[journal] connection" in line
    assert sim.snapshot()["evacuate_calls"] == {}


def test_a_standby_is_alive_and_not_ready(make_group, journal_url):
    """Hole 6: with [api] stale_after = 3 s, the standby's /healthz stays
    200 for twice that (before: 503 'the reconciler has never completed a
    pass' after 3 s, and a liveness probe restarted it); /readyz is 503
    saying standby on it, 200 saying acting on the acting member."""
    g = make_group(shared_redis(), journal_url,
                   {"api": {"stale_after": 3.0}})
    g.add_member()
    assert g.wait_acting() == 0
    g.add_member()
    waiting.wait_for(lambda: g.coordination(1).get("role") == "standby", 60,
                     "a standby")
    standby, acting = g.members[1].status(), g.members[0].status()
    seen_from = time.monotonic()
    answers = []

    def watched_long_enough():
        answers.append(_get(standby, "/healthz"))
        return time.monotonic() - seen_from > 2 * 3.0 + 1
    waiting.wait_for(watched_long_enough, 60, "six seconds of answers")
    bad = [a for a in answers if a[0] != 200]
    assert bad == [], bad
    assert answers[-1][1]["reason"].startswith("standby in group iha-test-")
    code, ready = _get(standby, "/readyz")
    assert code == 503 and ready["role"] == "standby", ready
    assert g.coordination(0)["member"] in ready["reason"]
    code, ready = _get(acting, "/readyz")
    assert code == 200 and ready["role"] == "acting", ready
    code, health = _get(acting, "/healthz")
    assert code == 200, health
