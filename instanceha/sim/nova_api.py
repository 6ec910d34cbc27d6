"""Nova's compute API v2.1 as seen by instanceha: versions, os-services,
servers (list/show/evacuate) and os-migrations.

Status codes, fault bodies (``{"badRequest": {"code": 400, "message": ...}}``),
microversion negotiation and the fields of each answer follow Nova's API
code; the behaviour behind them lives in model.py.

This module is the front door: token check, microversion negotiation and
routing. The handlers live beside it (nova_services, nova_servers,
nova_builds, nova_hosts, nova_migrations, nova_moves), on the wire helpers
of nova_wire and the request checks of nova_schema.
"""

import re

from instanceha.sim import model as m
from instanceha.sim import web
from instanceha.sim.nova_builds import BuildsAPI
from instanceha.sim.nova_hosts import HostsAPI
from instanceha.sim.nova_migrations import MigrationsAPI
from instanceha.sim.nova_moves import MovesAPI
from instanceha.sim.nova_schema import (
    BOOL_FALSE, BOOL_TRUE, UUID_RE, check_bool, check_keys, check_string,
    next_links, paginate, read_body)
from instanceha.sim.nova_servers import ServersAPI
from instanceha.sim.nova_services import ServicesAPI
from instanceha.sim.nova_wire import (
    FAULT_NAMES, HEADER, LEGACY_HEADER, PREFIX, ApiFault, fault, stamp, vstr)

# Re-exported: the names callers and tests import from nova_api.
__all__ = ["ApiFault", "BOOL_FALSE", "BOOL_TRUE", "FAULT_NAMES", "HEADER",
           "LEGACY_HEADER", "MAX_VERSION", "MIN_VERSION", "NovaAPI",
           "PREFIX", "UUID_RE", "V21", "check_bool", "check_keys",
           "check_string", "fault", "next_links", "paginate",
           "parse_version", "stamp", "vstr"]

V21 = PREFIX + "/v2.1"
MIN_VERSION = (2, 1)
MAX_VERSION = (2, 96)


def parse_version(headers):
    """The requested microversion as a tuple; raises ApiFault 400/406."""
    raw = None
    value = headers.get(HEADER)
    if value:
        for item in value.split(","):
            words = item.strip().split()
            if len(words) == 2 and words[0].lower() == "compute":
                raw = words[1]
    if raw is None:
        raw = headers.get(LEGACY_HEADER)
    if raw is None:
        return MIN_VERSION
    raw = raw.strip()
    if raw == "latest":
        return MAX_VERSION
    match = re.match(r"^([1-9]\d*)\.([1-9]\d*|0)$", raw)
    if not match:
        raise ApiFault(400, "API Version String %s is of invalid format. "
                            "Must be of format MajorNum.MinorNum." % raw)
    version = (int(match.group(1)), int(match.group(2)))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ApiFault(406, "Version %s is not supported by the API. Minimum "
                            "is %s and maximum is %s." % (
                                vstr(version), vstr(MIN_VERSION),
                                vstr(MAX_VERSION)))
    return version


class NovaAPI(ServicesAPI, HostsAPI, ServersAPI, MigrationsAPI, MovesAPI,
              BuildsAPI):
    def __init__(self, cloud, keystone):
        self.cloud = cloud
        self.keystone = keystone

    # -- dispatch ------------------------------------------------------------

    def handle(self, req):
        parts = web.split(req.path, PREFIX)
        if req.method == "GET" and not parts:
            return web.Response(200, {"versions": [
                self._version_doc(req, "v2.0"),
                self._version_doc(req, "v2.1")]})
        if parts == ["v2.1"] and req.method == "GET":
            return web.Response(200, {
                "version": self._version_doc(req, "v2.1")})
        if parts[:1] != ["v2.1"]:
            return fault(404, "The resource could not be found.")
        if not self.keystone.valid(req.headers.get("X-Auth-Token")):
            resp = web.Response(401, {"error": {
                "code": 401, "title": "Unauthorized",
                "message": "The request you have made requires "
                           "authentication."}})
            resp.headers["WWW-Authenticate"] = \
                'Keystone uri="%s/identity"' % req.base_url
            return resp
        try:
            version = parse_version(req.headers)
        except ApiFault as e:
            return fault(e.code, e.message)
        record = self._note_evacuate(req, parts[1:])
        resp = self._answer(req, parts[1:], version)
        if record is not None:
            record.answer = resp.status
        return resp

    def _answer(self, req, parts, version):
        failure = self.cloud.api_failure
        if failure is not None:
            # Nova's API broken behind its front door (database, message
            # bus): every call is a 500 computeFault.
            return fault(500, failure, version)
        try:
            status, body = self._route(req, parts, version)
            resp = web.Response(status, body)
        except ApiFault as e:
            resp = fault(e.code, e.message)
        except m.SimError as e:
            resp = fault(e.status, e.message)
        return stamp(resp, version)

    def _note_evacuate(self, req, parts):
        """An authenticated evacuate request reached the API: the model
        records its server's host and that host's power now, whatever Nova
        then answers (the invariant is about what clients send)."""
        if req.method != "POST" or len(parts) != 3 \
                or parts[0] != "servers" or parts[2] != "action":
            return None
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict) or "evacuate" not in body:
            return None
        return self.cloud.note_evacuate_request(parts[1])

    def _route(self, req, parts, version):
        method = req.method
        if parts == ["os-services"] and method == "GET":
            return 200, self.list_services(req, version)
        if len(parts) == 2 and parts[0] == "os-services" and method == "PUT":
            return 200, self.update_service(req, parts[1], version)
        if len(parts) == 2 and parts[0] == "os-services" \
                and method == "DELETE":
            return self.delete_service(parts[1], version)
        if parts == ["servers"] and method == "POST":
            return self.create_server(req, version)
        if len(parts) == 2 and parts[0] == "servers" and method == "DELETE":
            return self.delete_server(parts[1])
        if parts in (["servers"], ["servers", "detail"]) and method == "GET":
            return 200, self.list_servers(req, version,
                                          detail=len(parts) == 2)
        if len(parts) == 2 and parts[0] == "servers" and method == "GET":
            server = self.cloud.get_server(parts[1])
            return 200, {"server": self.server_view(req, server, version)}
        if len(parts) == 3 and parts[0] == "servers" \
                and parts[2] == "action" and method == "POST":
            return self.server_action(req, parts[1], version)
        if len(parts) == 3 and parts[0] == "servers" \
                and parts[2] == "metadata" and method == "POST":
            body = read_body(req)
            items = body.get("metadata") if isinstance(body, dict) else None
            if not isinstance(items, dict) or not all(
                    isinstance(v, str) for v in items.values()):
                raise ApiFault(400, "Malformed request body")
            return 200, {"metadata": self.cloud.update_server_metadata(
                parts[1], items)}
        if len(parts) == 4 and parts[0] == "servers" \
                and parts[2] == "metadata" and method == "DELETE":
            self.cloud.delete_server_metadata(parts[1], parts[3])
            return 204, None
        if len(parts) == 3 and parts[0] == "os-aggregates" \
                and parts[2] == "action" and method == "POST":
            return 200, self.aggregate_action(req, parts[1], version)
        if parts == ["os-hypervisors", "detail"] and method == "GET":
            return 200, self.list_hypervisors(req, version)
        if len(parts) == 2 and parts[0] == "os-aggregates" \
                and method == "GET":
            found = [a for a in self.cloud.list_aggregates()
                     if str(a["id"]) == parts[1]]
            if not found:
                raise ApiFault(404, "Aggregate %s could not be found."
                               % parts[1])
            return 200, {"aggregate": self.aggregate_view(found[0],
                                                          version)}
        if parts == ["os-aggregates"] and method == "GET":
            return 200, {"aggregates": [self.aggregate_view(a, version)
                                        for a in self.cloud.list_aggregates()]}
        if parts == ["os-migrations"] and method == "GET":
            return 200, self.list_migrations(req, version)
        if len(parts) >= 3 and parts[0] == "servers" \
                and parts[2] == "migrations":
            return self.server_migrations_route(req, parts, version)
        if len(parts) in (3, 4) and parts[0] == "servers" \
                and parts[2] == "os-instance-actions" and method == "GET":
            return 200, self.instance_actions(parts[1], parts[3:], version)
        raise ApiFault(404, "The resource could not be found.")

    def _version_doc(self, req, vid):
        current = vid == "v2.1"
        return {
            "id": vid,
            "status": "CURRENT" if current else "SUPPORTED",
            "version": vstr(MAX_VERSION) if current else "",
            "min_version": vstr(MIN_VERSION) if current else "",
            "updated": "2013-07-23T11:33:21Z" if current
            else "2011-01-21T11:33:21Z",
            "links": [{"rel": "self",
                       "href": "%s%s/%s/" % (req.base_url, PREFIX, vid)}],
            "media-types": [{"base": "application/json",
                             "type": "application/vnd.openstack.compute+json;"
                                     "version=2.1"}],
        }
