"""Resume anywhere, for planned work (issue 34 part 4): the real
``instanceha run`` killed by SIGKILL at each failpoint of a drain's
migrations and of an instance repair's actions, restarted on the same
journal and config, and the world checked at Nova's side.

The host path's matrix (test_crash_matrix.py) gives each (scenario,
point) case its own cloud. Here one cloud runs a *chain*: each phase
starts the engine armed with the next point (for the drain's and the
repair's request points, armed for one server: ``<point>@<server>``,
see :mod:`instanceha.failpoints`), waits for it to die by SIGKILL, proves
from the journal and from Nova's request log that it died exactly there,
and the next phase starts the engine again on the same journal and
config. The last phase runs without a failpoint. Each phase is a kill and
a restart that must pick up where the killed process was; one cloud for
all keeps the cases cheap enough for CI (times in the report of the
change: about 1 minute for the two chains on an idle machine).

At the end:

* drain: every server of the drained host on another host, in the status
  it had, each with exactly one move request at Nova's side (a live
  migration each for the running ones, a cold migration and one confirm
  for the stopped one), and the host in maintenance;
* instance repair: every broken server accounted for: ACTIVE with its
  last journal row a success (or, where the ladder ran out, marked failed
  with a ``failed`` row), no journal row left running, and Nova never
  asked for an action more times than the journal has attempts of it
  (no request sent twice for one attempt).
"""

import collections
import http.client
import signal
import subprocess
import time


from functional import operator_api as op
from functional.engine_process import EngineExited, armed_env
from functional.waiting import wait_for

#: every bound is far above what a phase takes on an idle machine
EXIT_TIMEOUT = 90
STATE_TIMEOUT = 120

# -- drain ------------------------------------------------------------------

DRAINED = "compute-1"

#: the drain's points in the order one drain reaches them, with
#: [drain] concurrency 1: compute-1-vm-0 and vm-1 run (live migrations),
#: vm-2 is stopped (a cold migration, then its confirmation); the plan
#: sends them in name order, one at a time. A request point is armed for
#: the server it is reached for first.
DRAIN_CHAIN = [
    ("after_transition:draining", None),
    ("before_action:drain", None),
    ("before_drain_request:live_migrate", "vm-0"),
    ("after_drain_request:live_migrate", "vm-0"),
    ("before_drain_request:live_migrate", "vm-1"),
    ("after_drain_request:live_migrate", "vm-1"),
    ("before_drain_request:cold_migrate", "vm-2"),
    # (the restarted process sends vm-2's cold migration; the next one
    # finds it journalled, to confirm)
    ("before_drain_request:confirm_resize", "vm-2"),
    ("after_drain_request:confirm_resize", "vm-2"),
    ("after_action:drain", None),
]

#: The point between a stopped server's cold migration and its
#: confirmation, alone (test_drain_killed_after_a_cold_migration): before
#: the cold move was journalled ahead of its request, the restarted drain
#: forgot the server (in VERIFY_RESIZE on its destination, off the host's
#: list): never confirmed, its source kept its allocation.
COLD_SENT = ("after_drain_request:cold_migrate", "vm-2")

#: the drain's points: each is in the chain or killed alone (COLD_SENT)
DRAIN_POINTS = (["after_transition:draining", "before_action:drain",
                 "after_action:drain"]
                + ["%s_drain_request:%s" % (when, what)
                   for what in ("live_migrate", "cold_migrate",
                                "confirm_resize")
                   for when in ("before", "after")])


def _names(c, host):
    return {s["name"]: sid for sid, s in c.sim.snapshot()["servers"].items()
            if s["host"] == host}


def _moves(c):
    """{server: [request kind...]} of every move request Nova got
    (live-migrate, migrate, confirm, abort, force-complete)."""
    out = collections.defaultdict(list)
    with c.sim.lock:
        for req in c.sim.move_requests:
            out[req[2]].append(req[1])
    return out


def _arm(point, server):
    return point if server is None else "%s@%s" % (point, server)


def _start(c, armed):
    """Start the engine with ``armed`` (None: no failpoint) and wait for
    its status to show every host, or for it to die: what the journal
    left running resumes at once, and an armed process may die before its
    first status (EngineProcess.start would wait out its whole budget on
    the previous process's status file). wait_exit then sees the death."""
    eng = c.engine
    started = time.time()
    with open(eng.log_path, "ab") as log:
        eng.proc = subprocess.Popen(eng.command(), stdout=log,
                                    stderr=subprocess.STDOUT,
                                    env=armed_env(armed))

    def ready():
        if eng.proc.poll() is not None:
            return True
        return (eng.status().get("generated_at", 0) >= started
                and len(eng.status().get("hosts", [])) >= len(c.sim.hosts))
    wait_for(ready, STATE_TIMEOUT, "the engine to see every host (log %s)"
             % c.log_path)
    if armed is None and eng.proc.poll() is not None:
        raise EngineExited("the engine exited with %s (log %s)"
                           % (eng.proc.returncode, c.log_path))


def _died(c, point):
    code = c.engine.wait_exit(EXIT_TIMEOUT)
    assert code == -signal.SIGKILL, (
        "the engine armed with %s exited with %s, not by SIGKILL at that "
        "point (log %s)" % (point, code, c.log_path))


def _drain_state_journalled(c):
    with c.engine.reading_journal() as j:
        rows = [t for t in j.transitions() if t["host_name"] == DRAINED]
    return rows[-1]["dst"] if rows else None


def _prove_drain_killed_at(c, point, sid, ids, before):
    """The process died exactly at ``point``: Nova's move requests and
    the journal as that point leaves them."""
    moves = _moves(c)
    svc = c.sim.snapshot()["services"][DRAINED]
    assert _drain_state_journalled(c) == "draining"
    if point in ("after_transition:draining", "before_action:drain"):
        # Journalled, nothing sent: the service not even disabled yet.
        assert svc["status"] == "enabled", svc
        assert not any(moves.values()), dict(moves)
        return
    assert svc["status"] == "disabled", svc
    kind, _, what = point.partition(":")
    if kind == "after_action":
        # Every server moved and confirmed; the drain's result not
        # journalled (the host is still draining in the journal).
        assert not _names(c, DRAINED), _names(c, DRAINED)
        return
    req = {"live_migrate": "live-migrate", "cold_migrate": "migrate",
           "confirm_resize": "confirm"}[what]
    sent = moves[sid].count(req) - before[sid].count(req)
    assert sent == (1 if kind.startswith("after") else 0), (
        point, sid, moves[sid], before[sid])
    # No other server got a request of that kind twice.
    for other in ids:
        assert moves[other].count(req) <= 1, (other, moves[other])


def _drain_cloud(make_cloud):
    c = make_cloud({"drain": {"poll_interval": 1, "concurrency": 1}},
                   hosts=3, servers_per_host=3)
    names = _names(c, DRAINED)
    c.sim.stop_server(names["compute-1-vm-2"])
    return c, names


def _ask_drain(c):
    """The operator's drain request. The engine answers once the DRAINING
    transition is journalled, and the first point kills it right there:
    its answer may be cut off."""
    try:
        status, body = op.api(c, "POST", "/hosts/%s/drain" % DRAINED,
                              {"reason": "crash matrix"})
    except (http.client.HTTPException, OSError):
        return
    assert status == 202, body


def _drain_phase(c, names, ids, point, server, first):
    sid = names["%s-%s" % (DRAINED, server)] if server else None
    before = collections.defaultdict(list, {
        s: list(v) for s, v in _moves(c).items()})
    _start(c, _arm(point, sid))
    if first:
        _ask_drain(c)
    _died(c, point)
    _prove_drain_killed_at(c, point, sid, ids, before)


def _check_drained(c, names, before_status):
    """The host in maintenance; every server elsewhere in the status it
    had, moved by exactly one request (and one confirm for the cold
    move)."""
    state, reason = op.settle(c, DRAINED, "maintenance", STATE_TIMEOUT)
    # Every server, also those moved by the lives before the last restart
    # (the journal's row keeps the servers at the start).
    assert reason.startswith("drained, in maintenance: 3/3 servers moved"), \
        reason
    snap = c.sim.snapshot()
    for sid, status in before_status.items():
        s = snap["servers"][sid]
        assert s["host"] not in (DRAINED, None), s
        assert s["status"] == status and s["task_state"] is None, s
    moves = _moves(c)
    stopped = names["compute-1-vm-2"]
    for sid in before_status:
        want = (["migrate", "confirm"] if sid == stopped
                else ["live-migrate"])
        assert moves[sid] == want, (sid, moves[sid])
    assert snap["double_running"] == [], snap["double_running"]


def test_drain_killed_at_each_failpoint_then_restarted(make_cloud):
    c, names = _drain_cloud(make_cloud)
    ids = sorted(names.values())
    before_status = {sid: c.sim.snapshot()["servers"][sid]["status"]
                     for sid in ids}
    for i, (point, server) in enumerate(DRAIN_CHAIN):
        _drain_phase(c, names, ids, point, server, i == 0)
    _start(c, None)
    _check_drained(c, names, before_status)


def test_drain_killed_after_a_cold_migration_then_restarted(make_cloud):
    """One drain killed right after a stopped server's cold migration
    was asked, restarted: the server is confirmed, once, the host drained
    and the summary counts every server, also those moved before the
    kill. (Was test_drain_known_defects, a strict xfail.)"""
    point, server = COLD_SENT
    c, names = _drain_cloud(make_cloud)
    ids = sorted(names.values())
    before_status = {sid: c.sim.snapshot()["servers"][sid]["status"]
                     for sid in ids}
    _drain_phase(c, names, ids, point, server, True)
    _start(c, None)
    _check_drained(c, names, before_status)


def test_drain_matrix_covers_every_point():
    reached = {p for p, _ in DRAIN_CHAIN} | {COLD_SENT[0]}
    assert reached == set(DRAIN_POINTS), set(DRAIN_POINTS) ^ reached


# -- instance repair ----------------------------------------------------------

#: [instance_repair] for the chains: every rung, quick timeouts, no
#: cloud-wide hold (many servers break in a small cloud on purpose)
REPAIR = {"enabled": True, "sweep_interval": 60, "min_uptime": 1,
          "action_timeout": 10, "max_repairs": 4, "hold_count": 0,
          "hold_percent": 0, "allow_rebuild": True,
          "actions": "start,hard_reboot,cold_migrate,rebuild"}

#: Nova's request name for each repair action (the simulator's logs)
REQUEST = {"start": "start", "hard_reboot": "reboot", "rebuild": "rebuild",
           "cold_migrate": "migrate"}

#: (point, server, the actions Nova fails for it): each server is broken
#: (its guest crashed: SHUTOFF) and an operator asks for its repair; the
#: ladder reaches the point's action through the failures (a failed
#: action leaves it in ERROR: start no longer applies, nor a cold
#: migration, so hard_reboot then rebuild)
REPAIR_CHAIN = [
    ("after_repair_request:start", "compute-0-vm-0", []),
    ("before_repair_request:start", "compute-0-vm-1", []),
    ("after_repair_request:hard_reboot", "compute-1-vm-0", ["start"]),
    ("before_repair_request:hard_reboot", "compute-1-vm-1", ["start"]),
    ("after_repair_request:rebuild", "compute-2-vm-0", ["start", "reboot"]),
    ("before_repair_request:rebuild", "compute-2-vm-1", ["start", "reboot"]),
]
#: a cold migration is a rung only for a stopped server: its own chain,
#: with [instance_repair] actions = cold_migrate
COLD_CHAIN = [
    ("after_repair_request:cold_migrate", "compute-0-vm-0", []),
    ("before_repair_request:cold_migrate", "compute-0-vm-1", []),
]

#: A process killed after an attempt is journalled as running and
#: before its request leaves: the restarted engine asks Nova whether the
#: request went out (repair_pass.went_out: the server still on its host,
#: no task, no such instance action since the row), closes the row
#: ``not_sent`` (no attempt) and sends the same action at once. Every
#: server ends ACTIVE, each before-point's action sent exactly once, after
#: the restart (before commit abcab28 the unsent attempt used up its rung:
#: on the last rung the server was marked failed, unrepaired).
NOT_SENT = "not_sent"

REPAIR_POINTS = ["%s_repair_request:%s" % (when, a)
                 for a in ("start", "hard_reboot", "cold_migrate", "rebuild")
                 for when in ("before", "after")]


def _requests(c, sid):
    """Nova's repair and move requests for ``sid``, by request name."""
    with c.sim.lock:
        names = [r[2] for r in c.sim.repair_requests if r[1] == sid]
        names += [r[1] for r in c.sim.move_requests if r[2] == sid]
    return collections.Counter(names)


def _repair_rows(c, sid):
    with c.engine.reading_journal() as j:
        return j.repairs(sid)


def _server_id(c, name):
    with c.sim.lock:
        return next(s.id for s in c.sim.servers.values() if s.name == name)


def _ask_repair(c, sid):
    """The operator's one-off repair (at once; the sweep would take its
    first 5 s). The point may kill the engine before it answers."""
    try:
        status, body = op.api(c, "POST", "/servers/%s/repair" % sid,
                              {"reason": "crash matrix"})
    except (http.client.HTTPException, OSError):
        return
    assert status in (200, 202), body


def _prove_repair_killed_at(c, point, sid, sent_before):
    """The attempt's row is journalled running, and Nova got its request
    (after_) or not (before_)."""
    when, _, action = point.partition("_repair_request:")
    rows = _repair_rows(c, sid)
    assert rows and rows[-1]["action"] == action \
        and rows[-1]["outcome"] == "running", rows[-1:]
    sent = _requests(c, sid)[REQUEST[action]] - sent_before
    assert sent == (1 if when == "after" else 0), (point, sent)


def _repair_settled(c, sid):
    rows = _repair_rows(c, sid)
    if not rows or any(r["outcome"] == "running" for r in rows):
        return False
    c.sim.now()
    with c.sim.lock:
        s = c.sim.servers[sid]
        status, failed = s.status, any(k.endswith(".failed")
                                       for k in s.metadata)
    return (status == "ACTIVE" and rows[-1]["outcome"] == "success") or (
        failed and rows[-1]["action"] == "failed")


def _check_repaired(c, chain, ids):
    """Every server accounted for; no attempt sent twice."""
    wait_for(lambda: all(_repair_settled(c, ids[n]) for _, n, _ in chain),
             STATE_TIMEOUT, "every repair to end (see the engine's log)")
    for point, name, _ in chain:
        sid = ids[name]
        rows = _repair_rows(c, sid)
        attempts = collections.Counter(r["action"] for r in rows
                                       if r["action"] in REQUEST)
        got = _requests(c, sid)
        # A cold migration's attempt also sends its confirm and the start
        # at its destination (a stopped server).
        allowed = {REQUEST[a]: n for a, n in attempts.items()}
        allowed["start"] = allowed.get("start", 0) + attempts["cold_migrate"]
        allowed["confirm"] = attempts["cold_migrate"]
        extra = {k: n for k, n in got.items() if n > allowed.get(k, 0)}
        assert not extra, ("a request sent more often than attempted",
                           name, dict(got), rows)
        when, _, action = point.partition("_repair_request:")
        with c.sim.lock:
            status = c.sim.servers[sid].status
        if when == "after":
            # Sent once, followed after the restart to its success.
            assert status == "ACTIVE", (name, status, rows)
            ours = [r for r in rows if r["action"] == action]
            assert [r["outcome"] for r in ours] == ["success"], rows
            assert got[REQUEST[action]] == 1, (name, dict(got))
        else:
            # Never sent before the kill: found so in Nova after the
            # restart, its row closed not_sent, and sent once, at once.
            assert status == "ACTIVE", (name, status, rows)
            assert rows[-1]["outcome"] == "success", rows
            ours = [r for r in rows if r["action"] == action]
            # Closed not_sent once, or more than once: the engine
            # started for the next point of the chain resumes this case
            # too, and may be killed there (at another server's
            # failpoint) between journalling the resumed request and
            # sending it. Sent once all the same (below).
            outcomes = [r["outcome"] for r in ours]
            assert len(outcomes) >= 2 and outcomes[-1] == "success" \
                and set(outcomes[:-1]) == {NOT_SENT}, rows
            assert got[REQUEST[action]] == 1, (name, dict(got))


def _repair_chain(c, chain):
    ids = {name: _server_id(c, name) for _, name, _ in chain}
    for point, name, faults in chain:
        sid = ids[name]
        # Its own repair level: rebuild (the default, evacuate, stops at
        # migrate).
        c.sim.update_server_metadata(sid, {"instanceha:repair": "rebuild"})
        if faults:
            c.sim.fail_repairs(sid, faults)
        c.sim.crash_server(sid, notify=False)
        sent_before = _requests(c, sid)[REQUEST[point.partition(":")[2]]]
        _start(c, _arm(point, sid))
        _ask_repair(c, sid)
        _died(c, point)
        _prove_repair_killed_at(c, point, sid, sent_before)
    _start(c, None)
    _check_repaired(c, chain, ids)


def test_instance_repair_killed_at_each_failpoint_then_restarted(
        make_cloud):
    c = make_cloud({"instance_repair": REPAIR},
                   hosts=3, servers_per_host=2, server_boot_time=0.5)
    _repair_chain(c, REPAIR_CHAIN)


def test_instance_repair_cold_migration_killed_then_restarted(make_cloud):
    c = make_cloud({"instance_repair": dict(REPAIR, actions="cold_migrate")},
                   hosts=3, servers_per_host=2, server_boot_time=0.5)
    _repair_chain(c, COLD_CHAIN)


def test_repair_matrix_covers_every_point():
    points = [p for p, _, _ in REPAIR_CHAIN + COLD_CHAIN]
    assert sorted(points) == sorted(REPAIR_POINTS)
