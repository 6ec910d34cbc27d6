"""Placement, just enough for a reachability check: the version document
and ``GET /resource_providers`` (one provider per compute host, filtered
by ``name`` or ``uuid``).

``SimCloud.set_placement(False)`` makes it unreachable: every connection
is closed without an answer, as when no Placement backend is left behind
the load balancer; the scheduler then finds no allocation candidates.
"""

from instanceha.sim import model
from instanceha.sim import web

PREFIX = "/placement"
MIN_VERSION, MAX_VERSION = "1.0", "1.39"
HEADER = "OpenStack-API-Version"


def _error(code, title, detail):
    return web.Response(code, {"errors": [{
        "status": code, "title": title, "detail": detail,
        "request_id": "req-sim"}]})


class Placement:
    def __init__(self, cloud, keystone):
        self.cloud = cloud
        self.keystone = keystone

    def handle(self, req):
        if not self.cloud.placement_reachable:
            return web.DROP
        parts = web.split(req.path, PREFIX)
        if not parts and req.method == "GET":
            return web.Response(200, {"versions": [{
                "id": "v1.0", "status": "CURRENT",
                "min_version": MIN_VERSION, "max_version": MAX_VERSION,
                "links": [{"rel": "self", "href": ""}]}]})
        if not self.keystone.valid(req.headers.get("X-Auth-Token")):
            return _error(401, "Unauthorized", "The request you have made "
                                               "requires authentication.")
        if parts == ["resource_providers"] and req.method == "GET":
            resp = web.Response(200, self.resource_providers(req))
        else:
            resp = _error(404, "Not Found", "The resource could not be "
                                            "found.")
        resp.headers[HEADER] = "placement " + MIN_VERSION
        return resp

    def resource_providers(self, req):
        name, uuid = req.arg("name"), req.arg("uuid")
        with self.cloud.lock:
            self.cloud.now()
            hosts = list(self.cloud.hosts.values())
        providers = []
        for h in hosts:
            rp_uuid = model.stable_uuid(self.cloud.seed, "provider", h.name)
            if name not in (None, h.name) or uuid not in (None, rp_uuid):
                continue
            providers.append({
                "uuid": rp_uuid, "name": h.name, "generation": 1,
                "links": [{"rel": "self", "href": "%s/resource_providers/%s"
                           % (PREFIX, rp_uuid)}]})
        return {"resource_providers": providers}
