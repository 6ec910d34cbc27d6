"""servers and os-instance-actions of the simulated Nova API: list,
show, actions (evacuate, os-stop, os-resetState; the moves of
nova_moves.py), metadata, and the actions recorded against a server."""

import hashlib
import re

from instanceha.sim import model as m
from instanceha.sim import web
from instanceha.sim.nova_moves import MOVE_ACTIONS
from instanceha.sim.nova_schema import (
    check_bool, check_keys, check_string, next_links, paginate, read_body)
from instanceha.sim.nova_wire import PREFIX, ApiFault


class ServersAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    # -- servers -------------------------------------------------------------

    def server_view(self, req, s, version, detail=True):
        base = req.base_url + PREFIX
        links = [{"rel": "self", "href": "%s/v2.1/servers/%s" % (base, s.id)},
                 {"rel": "bookmark", "href": "%s/servers/%s" % (base, s.id)}]
        if not detail:
            return {"id": s.id, "name": s.name, "links": links}
        host_id = hashlib.sha224((s.project_id + s.host).encode()) \
            .hexdigest() if s.host else ""
        if version >= (2, 47):
            flavor = {"vcpus": s.vcpus, "ram": s.ram_mb, "disk": s.disk_gb,
                      "ephemeral": 0, "swap": 0,
                      "original_name": self.cloud.flavor_name,
                      "extra_specs": dict(self.cloud.flavor_extra_specs)}
        else:
            flavor = {"id": "1", "links": []}
        view = {
            "id": s.id, "name": s.name, "status": s.status,
            "tenant_id": s.project_id, "user_id": s.user_id,
            "metadata": dict(s.metadata),
            "hostId": host_id, "image": {"id": s.image_id, "links": [{
                "rel": "bookmark",
                "href": "%s/images/%s" % (base, s.image_id)}]}
            if s.image_id else "",
            "flavor": flavor, "created": web.iso_z(s.created),
            "updated": web.iso_z(s.updated), "addresses": {},
            "accessIPv4": "", "accessIPv6": "", "links": links,
            "OS-DCF:diskConfig": "MANUAL", "progress": 0,
            "OS-EXT-AZ:availability_zone": self.cloud.zone_of(s.host),
            "config_drive": "",
            "key_name": None,
            "OS-SRV-USG:launched_at": web.iso_micro(s.created),
            "OS-SRV-USG:terminated_at": None,
            "OS-EXT-SRV-ATTR:host": s.host,
            "OS-EXT-SRV-ATTR:instance_name": "instance-%08x"
            % (int(s.id[:8], 16) % 0xffffff),
            "OS-EXT-SRV-ATTR:hypervisor_hostname": s.host,
            "OS-EXT-STS:task_state": s.task_state,
            "OS-EXT-STS:vm_state": s.vm_state,
            "OS-EXT-STS:power_state": s.power_state,
            "os-extended-volumes:volumes_attached": [],
            "security_groups": [{"name": "default"}],
        }
        if version >= (2, 9):
            view["locked"] = False
        if version >= (2, 19):
            view["description"] = None
        if version >= (2, 26):
            view["tags"] = list(s.tags)
        if version >= (2, 73):
            view["locked_reason"] = None
        if version >= (2, 96):
            view["pinned_availability_zone"] = None
        if s.vm_state == m.ERROR and s.fault:
            view["fault"] = {"code": s.fault["code"],
                             "created": web.iso_z(s.fault["created"]),
                             "message": s.fault["message"]}
        return view

    def list_servers(self, req, version, detail):
        host, status = req.arg("host"), req.arg("status")
        # Nova's name filter: a regular expression searched in the name.
        name = req.arg("name")
        try:
            named = re.compile(name).search if name else None
        except re.error:
            raise ApiFault(400, "Invalid regular expression for name")
        with self.cloud.lock:
            servers = [s for s in self.cloud.list_servers(host=host)
                       if (not status or s.status == status.upper())
                       and (named is None or named(s.name))]
            servers.sort(key=lambda s: (-s.created, s.name))
            page, more = paginate(req, servers, lambda s: s.id,
                                  "marker [%s] not found",
                                  self.cloud.api_max_limit)
            body = {"servers": [self.server_view(req, s, version, detail)
                                for s in page]}
            if more:
                body["servers_links"] = next_links(req, page[-1].id)
            return body

    def server_action(self, req, server_id, version):
        body = read_body(req)
        if not isinstance(body, dict) or len(body) != 1:
            raise ApiFault(400, "Malformed request body")
        action = next(iter(body))
        if action in MOVE_ACTIONS:
            return self.move_action(req, server_id, action, body[action],
                                    version)
        if action == "os-stop":
            self.cloud.stop_server(server_id)
            return 202, None
        if action == "os-start":
            self.cloud.start_server(server_id)
            return 202, None
        if action == "reboot":
            args = body[action]
            if not isinstance(args, dict) \
                    or args.get("type") not in ("HARD", "SOFT"):
                raise ApiFault(400, "Invalid input for field/attribute "
                                    "type.")
            self.cloud.reboot_server(server_id, hard=args["type"] == "HARD")
            return 202, None
        if action == "rebuild":
            args = body[action]
            if not isinstance(args, dict) or not args.get("imageRef"):
                raise ApiFault(400, "Invalid input for field/attribute "
                                    "imageRef.")
            self.cloud.rebuild_server(server_id, str(args["imageRef"]))
            return 202, None
        if action == "os-resetState":
            args = body[action]
            check_keys(args, ["state"], ["state"])
            if args["state"] not in ("active", "error"):
                raise ApiFault(400, "Invalid input for field/attribute "
                                    "state. Value: %s." % args["state"])
            self.cloud.reset_state(server_id, args["state"])
            return 202, None
        if action != "evacuate":
            raise ApiFault(404, "There is no such action: %s" % action)
        args = body["evacuate"]
        allowed = ["host", "adminPass"]
        required = ()
        if version < (2, 14):
            allowed.append("onSharedStorage")
            required = ("onSharedStorage",)
        if (2, 29) <= version < (2, 68):
            allowed.append("force")
        check_keys(args, allowed, required)
        host = args.get("host")
        if host is not None:
            check_string("host", host)
        shared = False
        if "onSharedStorage" in args:
            shared = check_bool("onSharedStorage", args["onSharedStorage"])
        force = False
        if "force" in args:
            force = check_bool("force", args["force"])
        self.cloud.get_server(server_id)     # 404 before the checks below
        if force and not host:
            raise ApiFault(400, "Can't force to a non-provided destination")
        if version < (2, 14) and shared and "adminPass" in args:
            raise ApiFault(400, "admin password can't be changed on existing "
                                "disk")
        if host and version < (2, 29):
            # Before 2.29 a named host bypasses the scheduler (Nova's
            # conductor rebuilds there without a requested destination).
            force = True
        password = args.get("adminPass") or "sim-%s" % server_id[:8]
        self.cloud.evacuate(server_id, host=host, force=force,
                            stop=version >= (2, 95))
        if version < (2, 14):
            return 200, {"adminPass": password}
        return 200, None

    # -- os-instance-actions ---------------------------------------------------

    def instance_actions(self, server_id, request_id, version):
        """List (newest first) or show one action with its events; an
        event's host from 2.62, as Nova shows it to an admin."""
        server = self.cloud.get_server(server_id)
        actions = self.cloud.instance_actions(server_id)

        def view(a):
            v = {"action": a["action"], "instance_uuid": server_id,
                 "request_id": a["request_id"], "message": None,
                 "project_id": a.get("project_id", server.project_id),
                 "user_id": a.get("user_id", server.user_id),
                 "start_time": web.iso_micro(a["start_time"])}
            if version >= (2, 58):
                last = max([a["start_time"]] + [
                    e["finish_time"] or e["start_time"] for e in a["events"]])
                v["updated_at"] = web.iso_micro(last)
            return v

        if not request_id:
            return {"instanceActions": [view(a) for a in actions]}
        action = next((a for a in actions
                       if a["request_id"] == request_id[0]), None)
        if action is None:
            raise ApiFault(404, "Action %s could not be found."
                           % request_id[0])
        body = view(action)
        body["events"] = []
        for e in action["events"]:
            ev = {"event": e["event"],
                  "start_time": web.iso_micro(e["start_time"]),
                  "finish_time": web.iso_micro(e["finish_time"])
                  if e["finish_time"] is not None else None,
                  "result": e["result"], "traceback": None}
            if version >= (2, 62):
                ev["host"] = e["host"]
                ev["hostId"] = hashlib.sha224(
                    (server.project_id + e["host"]).encode()).hexdigest()
            body["events"].append(ev)
        return {"instanceAction": body}
