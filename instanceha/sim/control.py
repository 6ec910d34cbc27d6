"""The simulator's control API (``/sim``): read the whole world and break
hosts from tests or from another process, e.g. ``curl -X POST
http://127.0.0.1:8787/sim/hosts/compute-1/kill`` (the host hangs;
``kill-compute``: only its nova-compute dies; ``restart-compute``). ``GET
/sim/evacuate-requests`` lists every evacuate request that reached the Nova
API with its host's power state then (instanceha/sim/invariant.py).
``POST /sim/servers/<id>/stall-migration`` and ``POST
/sim/hosts/<host>/stall-migrations`` (``{"stall": true|false}``) stall live
migrations of a server or from or to a host. ``POST
/sim/hosts/<host>/fail-boots`` (``{"fail": true|false, "message": "..."}``)
makes builds on the host fail; ``POST /sim/scheduler``
(``{"disabled_prefilter": true|false}``) turns Placement's pre-filter of
disabled computes on or off. Instance repair (model_repair.py): ``POST
/sim/servers/<id>/crash`` (``{"how": "crashed"|"shutdown", "notify":
true}``: the guest goes off by itself and Nova's sync stops it),
``.../error`` (``{"message": "..."}``), ``.../user-stop`` (its user's
os-stop), ``.../fail-repairs`` (``{"actions": ["start", ...]}``: those
leave it in ERROR)."""

SERVER_BREAKS = ("crash", "error", "user-stop", "fail-repairs")

from instanceha.sim import model
from instanceha.sim import web

PREFIX = "/sim"


def _error(status, message):
    return web.Response(status, {"error": message})


class Control:
    def __init__(self, cloud):
        self.cloud = cloud

    def handle(self, req):
        parts = web.split(req.path, PREFIX)
        if parts == ["state"] and req.method == "GET":
            return web.Response(200, self.cloud.snapshot())
        if parts == ["evacuate-requests"] and req.method == "GET":
            with self.cloud.lock:
                records = [r.as_dict() for r in self.cloud.evacuate_requests]
            return web.Response(200, {
                "evacuate_requests": records,
                "unsafe": sum(1 for r in records if r["unsafe"])})
        if len(parts) == 3 and parts[0] == "hosts" and req.method == "POST":
            return self._host_action(parts[1], parts[2], req)
        if parts == ["scheduler"] and req.method == "POST":
            return self._scheduler(req)
        if parts[:1] == ["servers"] and len(parts) == 3 \
                and parts[2] == "stall-migration" and req.method == "POST":
            return self._stall(req, server_id=parts[1])
        if parts[:1] == ["servers"] and len(parts) == 3 \
                and req.method == "POST" and parts[2] in SERVER_BREAKS:
            return self._break(parts[1], parts[2], req)
        return _error(404, "no such control path: %s %s"
                      % (req.method, req.path))

    def _host_action(self, name, action, req):
        c = self.cloud
        try:
            if action == "kill":
                c.kill(name)
            elif action == "kill-compute":
                c.kill_compute(name)
            elif action == "restart-compute":
                if not c.restart_compute(name):
                    return _error(409, "host %s is off or hung" % name)
            elif action == "power-on":
                c.power(name, on=True)
            elif action == "power-off":
                c.power(name, on=False)
            elif action == "cleanup":
                try:
                    body = req.json() if req.body else {"hold": False}
                except ValueError:
                    return _error(400, "body must be a JSON object")
                if not isinstance(body, dict) or set(body) != {"hold"} \
                        or not isinstance(body["hold"], bool):
                    return _error(400, "body must be {\"hold\": true|false}")
                c.hold_cleanup(name, body["hold"])
            elif action == "stall-migrations":
                return self._stall(req, host=name)
            elif action == "fail-boots":
                try:
                    body = req.json() if req.body else {"fail": True}
                except ValueError:
                    return _error(400, "body must be a JSON object")
                if not isinstance(body, dict) or "fail" not in body \
                        or set(body) - {"fail", "message"} \
                        or not isinstance(body["fail"], bool) \
                        or not isinstance(body.get("message", ""), str):
                    return _error(400, "body must be {\"fail\": true|false"
                                       "[, \"message\": \"...\"]}")
                c.fail_boots(name, body["fail"], body.get("message"))
            elif action == "bmc":
                try:
                    body = req.json()
                except ValueError:
                    return _error(400, "body must be a JSON object")
                if not isinstance(body, dict) or set(body) - {
                        "reachable", "refuse_power_off"}:
                    return _error(400, "body may hold only 'reachable' and "
                                       "'refuse_power_off'")
                for key, value in body.items():
                    if not isinstance(value, bool):
                        return _error(400, "%s must be true or false" % key)
                c.set_bmc(name, **body)
            elif action == "health":
                return self._health(name, req)
            else:
                return _error(404, "unknown host action %s" % action)
        except model.NotFound as e:
            return _error(404, e.message)
        return web.Response(200, c.snapshot()["hosts"][name])

    def _health(self, name, req):
        """POST /sim/hosts/NAME/health {"system"|"power_supply"|"fan"|
        "memory": "OK"|"Warning"|"Critical"}: what the host's BMC reports
        (parts not named keep theirs)."""
        try:
            body = req.json()
        except ValueError:
            return _error(400, "body must be a JSON object")
        parts = ("system", "power_supply", "fan", "memory")
        if not isinstance(body, dict) or set(body) - set(parts) or any(
                v not in ("OK", "Warning", "Critical")
                for v in body.values()):
            return _error(400, "body maps %s to OK, Warning or Critical"
                          % ", ".join(parts))
        c = self.cloud
        with c.lock:
            h = c.hosts.get(name)
            if h is None:
                return _error(404, "no host %s" % name)
            h.hardware_health = dict(h.hardware_health, **body)
        return web.Response(200, dict(c.snapshot()["hosts"][name],
                                      hardware_health=dict(body)))

    def _scheduler(self, req):
        try:
            body = req.json()
        except ValueError:
            return _error(400, "body must be a JSON object")
        if not isinstance(body, dict) or set(body) != {"disabled_prefilter"} \
                or not isinstance(body["disabled_prefilter"], bool):
            return _error(400, "body must be {\"disabled_prefilter\": "
                               "true|false}")
        with self.cloud.lock:
            self.cloud.disabled_prefilter = body["disabled_prefilter"]
        return web.Response(200, {
            "disabled_prefilter": self.cloud.disabled_prefilter})

    def _break(self, server_id, what, req):
        c = self.cloud
        try:
            body = req.json() if req.body else {}
        except ValueError:
            return _error(400, "body must be a JSON object")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        try:
            if what == "crash":
                how = body.get("how", "crashed")
                if how not in ("crashed", "shutdown"):
                    return _error(400, "how must be crashed or shutdown")
                c.crash_server(server_id, how=how,
                               notify=bool(body.get("notify", True)))
            elif what == "error":
                c.error_server(server_id, str(body.get("message")
                                              or "Simulated failure"),
                               notify=bool(body.get("notify", True)))
            elif what == "user-stop":
                c.user_stop(server_id)
            else:
                actions = body.get("actions", [])
                if not isinstance(actions, list):
                    return _error(400, "actions must be a list")
                c.fail_repairs(server_id, actions)
        except model.NotFound as e:
            return _error(404, e.message)
        except model.Conflict as e:
            return _error(409, e.message)
        with c.lock:
            s = c.servers[server_id]
            return web.Response(200, {"id": s.id, "status": s.status,
                                      "vm_state": s.vm_state,
                                      "power_state": s.power_state})

    def _stall(self, req, **which):
        try:
            body = req.json() if req.body else {"stall": True}
        except ValueError:
            return _error(400, "body must be a JSON object")
        if not isinstance(body, dict) or set(body) != {"stall"} \
                or not isinstance(body["stall"], bool):
            return _error(400, "body must be {\"stall\": true|false}")
        try:
            self.cloud.stall_migrations(stall=body["stall"], **which)
        except model.NotFound as e:
            return _error(404, e.message)
        return web.Response(200, self.cloud.snapshot()["stalled_migrations"])
