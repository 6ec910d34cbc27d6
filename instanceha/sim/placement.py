"""Placement, just enough for a reachability check and capacity: the
version document, ``GET /resource_providers`` (one provider per compute
host, named after it, its UUID the compute node's; filtered by ``name`` or
``uuid``), and each provider's ``inventories`` (VCPU, MEMORY_MB, DISK_GB
with reserved and allocation_ratio) and ``usages``.

``SimCloud.set_placement(False)`` makes it unreachable: every connection
is closed without an answer, as when no Placement backend is left behind
the load balancer; the scheduler then finds no allocation candidates.
"""

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
        elif parts == ["allocation_candidates"] and req.method == "GET":
            resp = self.allocation_candidates(req)
        elif len(parts) == 3 and parts[0] == "resource_providers" \
                and parts[2] in ("inventories", "usages") \
                and req.method == "GET":
            resp = self.provider_detail(parts[1], parts[2])
        else:
            resp = _error(404, "Not Found", "The resource could not be "
                                            "found.")
        resp.headers[HEADER] = "placement " + MIN_VERSION
        return resp

    def provider_detail(self, rp_uuid, what):
        c = self.cloud
        with c.lock:
            c.now()
            host = next((h for h in c.computes()
                         if h.node_uuid == rp_uuid), None)
            if host is None:
                return _error(404, "Not Found", "No resource provider with "
                                                "uuid %s found" % rp_uuid)
            if what == "inventories":
                return web.Response(200, {
                    "resource_provider_generation": 1,
                    "inventories": c.inventories(host.name)})
            return web.Response(200, {"resource_provider_generation": 1,
                                      "usages": c.usages(host.name)})

    def allocation_candidates(self, req):
        """``GET /allocation_candidates?resources=RC:N,...``: the providers
        that can take the request, each with its provider summary of every
        resource class (capacity = (total - reserved) * allocation_ratio,
        and used), as Placement answers from microversion 1.27. Only
        single-provider candidates (no nesting or sharing here)."""
        wanted = {}
        for item in (req.arg("resources") or "").split(","):
            rc, _, amount = item.partition(":")
            if not rc or not amount.isdigit():
                return _error(400, "Bad Request", "Badly formed resources "
                              "parameter. Expected resources query string "
                              "parameter in form: ?resources=VCPU:2,"
                              "MEMORY_MB:1024. Got: %s" % req.arg("resources"))
            wanted[rc] = int(amount)
        c = self.cloud
        with c.lock:
            c.now()
            summaries, requests = {}, []
            claims = c._claims()
            for h in c.computes():
                inv, used = c.inventories(h.name), c.usage(h.name, claims)
                res = {rc: {"capacity": int((i["total"] - i["reserved"])
                                            * i["allocation_ratio"]),
                            "used": used.get(rc, 0)}
                       for rc, i in inv.items()}
                if any(rc not in res or
                       res[rc]["capacity"] - res[rc]["used"] < n
                       for rc, n in wanted.items()):
                    continue
                summaries[h.node_uuid] = {
                    "resources": res, "traits": [],
                    "parent_provider_uuid": None,
                    "root_provider_uuid": h.node_uuid}
                requests.append({"allocations": {h.node_uuid: {
                    "resources": dict(wanted)}}, "mappings": {
                        "": [h.node_uuid]}})
        return web.Response(200, {"allocation_requests": requests,
                                  "provider_summaries": summaries})

    def resource_providers(self, req):
        name, uuid = req.arg("name"), req.arg("uuid")
        with self.cloud.lock:
            self.cloud.now()
            hosts = self.cloud.computes()
        providers = []
        for h in hosts:
            rp_uuid = h.node_uuid
            if name not in (None, h.name) or uuid not in (None, rp_uuid):
                continue
            providers.append({
                "uuid": rp_uuid, "name": h.name, "generation": 1,
                "links": [{"rel": "self", "href": "%s/resource_providers/%s"
                           % (PREFIX, rp_uuid)}]})
        return {"resource_providers": providers}
