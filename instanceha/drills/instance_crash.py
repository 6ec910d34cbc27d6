"""Instance repair: one server's guest crashes on a healthy host and
Nova's power-state sync stops it (Nova's own context, no user); the
engine's sweep finds it and starts it again where it is. Next to it, a
server its owner stopped through Nova's API stays stopped. The host is
never touched: powered on and ``active`` throughout."""

import openstack


#: The sweep is the drill's only source (no notification broker here):
#: every 5 s (the smallest it takes), the first 5 s after the start. A
#: start counts as a success after 1 s ACTIVE.
OVERRIDES = {"instance_repair": {"enabled": True, "sweep_interval": 5,
                                 "min_uptime": 1, "action_timeout": 10}}
STEP_BUDGET = 60.0
HOST = "compute-1"
CRASHED = HOST + "-vm-0"
STOPPED = HOST + "-vm-1"
PREFIX = "instanceha:instance_repair."


def _server(cloud, sid):
    """(status, task_state, host, {marker: value}) of a server as Nova
    holds it (markers: its instanceha:instance_repair.* metadata)."""
    with cloud.lock:
        cloud.now()
        s = cloud.servers[sid]
        markers = {k[len(PREFIX):]: v for k, v in s.metadata.items()
                   if k.startswith(PREFIX)}
        return s.status, s.task_state, s.host, markers


def _user_stop(d, sid):
    """``openstack server stop``: the server's owner, through Keystone
    and Nova's API."""
    auth = d.server.clouds_config()["clouds"]["sim"]
    conn = openstack.connect(**auth)
    try:
        conn.compute.stop_server(sid)
    finally:
        conn.close()


class _Watch:
    """Prints what changes: the servers in Nova (status, task, markers),
    the engine's case for the crashed one; and notes whether the host
    was ever off or left ``active``."""

    def __init__(self, d, servers):
        self.d = d
        self.servers = servers          # {name: id}
        self.seen = {}
        self.markers = {}               # {name: {marker: value shown}}
        self.host_off = False
        self.host_states = set()

    def poll(self):
        d = self.d
        for name, sid in sorted(self.servers.items()):
            status, task, host, markers = _server(d.cloud, sid)
            now = (status, task, host)
            if self.seen.get(name) != now:
                self.seen[name] = now
                d.say("%-15s %s%s on %s" % (
                    name, status, " (task %s)" % task if task else "", host),
                    mark="%s:%s" % (name, status)
                    if d.at("crash") is not None else None)
            shown = self.markers.setdefault(name, {})
            for key in sorted(set(markers) | set(shown)):
                value = markers.get(key)
                if shown.get(key) != value:
                    shown[key] = value
                    d.say("%-15s marker %s %s" % (
                        name, key, "= %s" % value if value is not None
                        else "removed"))
        case = d.service.engine.repair.describe(
            self.servers[CRASHED])["case"]
        view = (case["state"], case["action"], case["why"]) if case \
            else None
        if self.seen.get("case") != view:
            self.seen["case"] = view
            if case and d.at("case:opened") is None:
                d.say("engine: case of %s opened: %s" % (
                    CRASHED, case["reason"]),
                    mark="case:opened")
            if case:
                d.say("engine: case of %s %s%s" % (
                    CRASHED, case["state"],
                    " (%s)" % case["why"] if case["why"] else ""),
                    mark="case:%s" % case["state"])
            else:
                d.say("engine: case of %s closed" % CRASHED)
        if d.cloud.snapshot()["hosts"][HOST]["power"] != "on":
            self.host_off = True
        self.host_states.add(d.state(HOST)[0])

    def until(self, pred, budget, what):
        def step():
            self.poll()
            return pred()
        return self.d.wait(step, budget, what)


def instance_crash(make):
    d = make(OVERRIDES, hosts=4, servers_per_host=3, server_boot_time=0.5)
    names = {s["name"]: sid for sid, s in
             d.cloud.snapshot()["servers"].items() if s["host"] == HOST}
    crashed, stopped = names[CRASHED], names[STOPPED]
    boot_id = d.cloud.snapshot()["hosts"][HOST]["boot_id"]
    watch = _Watch(d, {CRASHED: crashed, STOPPED: stopped})
    watch.poll()
    d.act("the owner of %s stops it: openstack server stop %s (Nova's "
          "API, with the user's token)" % (STOPPED, STOPPED), mark="stop")
    _user_stop(d, stopped)
    watch.poll()
    d.act("the guest of %s on %s crashes; Nova's power-state sync stops "
          "the server (no user in the request)" % (CRASHED, HOST),
          mark="crash")
    d.cloud.crash_server(crashed, how="crashed", notify=False)
    watch.poll()
    # Found by the sweep, started, ACTIVE for min_uptime: the result
    # marker says so.
    watch.until(lambda: (_server(d.cloud, crashed)[3].get("result") or "")
                .startswith("start success"), STEP_BUDGET,
                "%s started again" % CRASHED)
    repaired = d.at(CRASHED + ":ACTIVE") - d.at("crash")
    # The sweep that found the crash listed the owner's stopped server
    # too (stopped before the crash) and read its instance actions.
    watch.until(lambda: d.service.engine.repair.describe(crashed)["case"]
                is None, STEP_BUDGET, "%s's case closed" % CRASHED)
    status, task, host, markers = _server(d.cloud, crashed)
    d.check(status == "ACTIVE" and task is None and host == HOST,
            "%s is %s (task %s) on %s, expected ACTIVE on %s"
            % (CRASHED, status, task, host, HOST))
    d.check(markers.get("result", "").startswith("start success")
            and "failed" not in markers and "pending" not in markers,
            "%s's markers: %s" % (CRASHED, markers))
    code, body = d.operator("GET", "/servers/%s/repair" % crashed)
    d.check(code == 200, "GET /servers/%s/repair: %s %s"
            % (crashed, code, body))
    rows = [(r["action"], r["outcome"]) for r in body["rows"]]
    d.check(rows == [("start", "success")],
            "%s's journal rows: %s, expected one start success"
            % (CRASHED, rows))
    d.say("%s: ACTIVE on %s, marker result = %s, journal: %s"
          % (CRASHED, host, markers["result"], ", ".join(
              "%s %s" % r for r in rows)))
    status, task, host, markers = _server(d.cloud, stopped)
    d.check(status == "SHUTOFF" and task is None and host == HOST,
            "%s (stopped by its owner) is %s (task %s) on %s"
            % (STOPPED, status, task, host))
    d.check(not markers, "%s carries repair markers: %s"
            % (STOPPED, markers))
    code, body = d.operator("GET", "/servers/%s/repair" % stopped)
    d.check(code == 200 and not body["rows"] and body["case"] is None,
            "%s (stopped by its owner) in the engine: %s %s"
            % (STOPPED, code, body))
    with d.cloud.lock:
        sent = [(sid, what) for _, sid, what in d.cloud.repair_requests]
    d.check(sent == [(crashed, "start")],
            "requests to Nova: %s, expected one start of %s"
            % (sent, CRASHED))
    d.say("%s: SHUTOFF on %s, no marker, no journal row, nothing sent"
          % (STOPPED, HOST))
    snap = d.cloud.snapshot()
    d.check(not watch.host_off and snap["hosts"][HOST]["power"] == "on"
            and snap["hosts"][HOST]["boot_id"] == boot_id,
            "%s was powered off or rebooted" % HOST)
    d.check(watch.host_states == {"active"}
            and d.state(HOST)[0] == "active",
            "%s left active: %s" % (HOST, sorted(watch.host_states)))
    moved = [t for t in d.journal.transitions()
             if t["host_name"] == HOST and t["dst"] != "active"]
    d.check(not moved, "%s's transitions: %s" % (HOST, moved))
    d.check(not snap["migrations"], "migrations: %s" % snap["migrations"])
    fences = [a for a in d.journal.actions() if a["kind"] == "fence"]
    d.check(not fences, "fence actions in the journal: %s" % fences)
    d.check_safe()
    return ("%s crashed on %s and was ACTIVE there again %.1fs later "
            "(found by the sweep, one start, marker 'start success', its "
            "journal row); %s, stopped by its owner, left SHUTOFF; %s "
            "never powered off nor left active"
            % (CRASHED, HOST, repaired, STOPPED, HOST))
