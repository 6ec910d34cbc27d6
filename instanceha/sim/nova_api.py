"""Nova's compute API v2.1 as seen by instanceha: versions, os-services,
servers (list/show/evacuate) and os-migrations.

Status codes, fault bodies (``{"badRequest": {"code": 400, "message": ...}}``),
microversion negotiation and the fields of each answer follow Nova's API
code; the behaviour behind them lives in model.py.
"""

import hashlib
import re
import urllib.parse

from instanceha.sim import model as m
from instanceha.sim import web

PREFIX = "/compute"
V21 = PREFIX + "/v2.1"
MIN_VERSION = (2, 1)
MAX_VERSION = (2, 96)
HEADER = "OpenStack-API-Version"
LEGACY_HEADER = "X-OpenStack-Nova-API-Version"
FAULT_NAMES = {400: "badRequest", 401: "unauthorized", 403: "forbidden",
               404: "itemNotFound", 405: "badMethod",
               409: "conflictingRequest"}
BOOL_TRUE = [True, "True", "TRUE", "true", "1", "ON", "On", "on",
             "YES", "Yes", "yes"]
BOOL_FALSE = [False, "False", "FALSE", "false", "0", "OFF", "Off", "off",
              "NO", "No", "no"]
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")


def vstr(v):
    return "%d.%d" % v


class ApiFault(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def fault(code, message, version=None):
    resp = web.Response(code, {FAULT_NAMES.get(code, "computeFault"): {
        "code": code, "message": message}})
    if version is not None:
        stamp(resp, version)
    return resp


def stamp(resp, version):
    resp.headers[HEADER] = "compute " + vstr(version)
    resp.headers[LEGACY_HEADER] = vstr(version)
    resp.headers["Vary"] = "%s, %s" % (HEADER, LEGACY_HEADER)
    return resp


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


# -- body validation (the few schemas we need, with Nova's messages) --------

def _invalid(field, value, reason):
    raise ApiFault(400, "Invalid input for field/attribute %s. Value: %s. %s"
                   % (field, value, reason))


def check_bool(field, value):
    if value not in BOOL_TRUE + BOOL_FALSE or isinstance(value, int) \
            and not isinstance(value, bool):
        _invalid(field, value, "%r is not one of %r"
                 % (value, BOOL_TRUE + BOOL_FALSE))
    return value in BOOL_TRUE


def check_string(field, value, max_len=255):
    if not isinstance(value, str):
        _invalid(field, value, "%r is not of type 'string'" % (value,))
    if len(value) < 1:
        _invalid(field, value, "%r is too short" % (value,))
    if len(value) > max_len:
        _invalid(field, value, "%r is too long" % (value,))
    return value


def check_keys(body, allowed, required=()):
    if not isinstance(body, dict):
        raise ApiFault(400, "%r is not of type 'object'" % (body,))
    extra = sorted(set(body) - set(allowed))
    if extra:
        raise ApiFault(400, "Additional properties are not allowed (%s %s "
                            "unexpected)" % (", ".join(repr(e) for e in extra),
                                             "was" if len(extra) == 1
                                             else "were"))
    for key in required:
        if key not in body:
            raise ApiFault(400, "%r is a required property" % key)


def paginate(req, items, key, not_found, max_limit=1000):
    """Nova's limit/marker paging: items after ``marker``, at most
    ``limit``, itself capped at ``max_limit`` (Nova's [api] max_limit,
    1000 by default). Returns (page, next): ``next`` is true when the page
    is full, even if nothing follows, as Nova's ``_get_collection_links``
    decides (a client learns it is done from a short or empty page)."""
    raw_limit = req.arg("limit")
    limit = max_limit
    if raw_limit is not None:
        try:
            limit = int(raw_limit)
        except ValueError:
            limit = -1
        if limit < 0:
            raise ApiFault(400, "Invalid input for query parameters limit. "
                                "Value: %s. %r is not a valid positive "
                                "integer" % (raw_limit, raw_limit))
        limit = min(limit, max_limit)
    marker = req.arg("marker")
    if marker is not None:
        keys = [key(i) for i in items]
        if marker not in keys:
            raise ApiFault(400, not_found % marker)
        items = items[keys.index(marker) + 1:]
    page = items[:limit]
    return page, bool(page) and len(page) == limit


def next_links(req, marker):
    """Nova's ``*_links``: one "next" link, the request's own query
    (sorted, as Nova's ``_get_next_link`` writes it) with ``marker``."""
    query = {k: v[-1] for k, v in sorted(req.query.items())}
    query["marker"] = marker
    return [{"rel": "next", "href": "%s%s?%s" % (
        req.base_url, req.path, urllib.parse.urlencode(query))}]


class NovaAPI:
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
        if parts in (["servers"], ["servers", "detail"]) and method == "GET":
            return 200, self.list_servers(req, version,
                                          detail=len(parts) == 2)
        if len(parts) == 2 and parts[0] == "servers" and method == "GET":
            server = self.cloud.get_server(parts[1])
            return 200, {"server": self.server_view(req, server, version)}
        if len(parts) == 3 and parts[0] == "servers" \
                and parts[2] == "action" and method == "POST":
            return self.server_action(req, parts[1], version)
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

    @staticmethod
    def _body(req):
        try:
            return req.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiFault(400, "Malformed request body")

    # -- os-services ---------------------------------------------------------

    def service_view(self, h, version):
        c = self.cloud
        view = {"binary": "nova-compute", "host": h.name,
                "id": h.service_uuid if version >= (2, 53) else h.service_id,
                "zone": c.zone_of(h.name),
                "status": "disabled" if h.disabled else "enabled",
                "state": "up" if c.service_up(h) else "down",
                "updated_at": web.iso_micro(max(c.heartbeat(h),
                                                h.service_updated)),
                "disabled_reason": h.disabled_reason}
        if version >= (2, 11):
            view["forced_down"] = h.forced_down
        return view

    def aggregate_view(self, a, version):
        zone = a["availability_zone"]
        view = {"id": a["id"], "name": a["name"], "availability_zone": zone,
                "hosts": a["hosts"],
                "metadata": dict(a.get("metadata") or {},
                                 **({"availability_zone": zone}
                                    if zone else {})),
                "created_at": web.iso_micro(a["created"]),
                "updated_at": web.iso_micro(a.get("updated")), "deleted_at": None, "deleted": False}
        if version >= (2, 41):
            view["uuid"] = a["uuid"]
        return view

    def aggregate_action(self, req, aggregate_id, version):
        """Only ``set_metadata`` (a null value removes the key), with
        Nova's schema: metadata keys 1-255 characters, values strings of
        at most 255 characters or null."""
        body = self._body(req)
        if not isinstance(body, dict) or len(body) != 1:
            raise ApiFault(400, "Malformed request body")
        action = next(iter(body))
        if action != "set_metadata":
            raise ApiFault(400, "Additional properties are not allowed "
                                "(%r was unexpected)" % action)
        args = body[action]
        check_keys(args, ["metadata"], ["metadata"])
        metadata = args["metadata"]
        if not isinstance(metadata, dict):
            _invalid("metadata", metadata, "%r is not of type 'object'"
                     % (metadata,))
        for key, value in metadata.items():
            if not 1 <= len(key) <= 255:
                _invalid("metadata", key, "%r does not match any of the "
                                          "regexes" % key)
            if value is not None:
                check_string(key, value)
        agg = self.cloud.update_aggregate_metadata(aggregate_id, metadata)
        return {"aggregate": self.aggregate_view(agg, version)}

    def hypervisor_view(self, h, version, claims=None):
        """A compute node as os-hypervisors/detail shows it: its sizes and
        usage up to 2.87 (Nova 2.88 removed them: read Placement).
        ``claims``: SimCloud._claims(), read once for a whole listing."""
        c = self.cloud
        view = {"id": h.node_uuid if version >= (2, 53) else h.service_id,
                "hypervisor_hostname": h.name,
                "state": "up" if c.service_up(h) else "down",
                "status": "disabled" if h.disabled else "enabled",
                "hypervisor_type": "QEMU", "hypervisor_version": 8002000,
                "host_ip": "192.0.2.%d" % (h.service_id % 250 + 1),
                "service": {"host": h.name,
                            "id": h.service_uuid if version >= (2, 53)
                            else h.service_id,
                            "disabled_reason": h.disabled_reason}}
        if version < (2, 88):
            used = c.usage(h.name, claims)
            view.update(
                vcpus=h.vcpus, vcpus_used=used["VCPU"],
                memory_mb=h.ram_mb, memory_mb_used=used["MEMORY_MB"],
                local_gb=h.disk_gb, local_gb_used=used["DISK_GB"],
                free_ram_mb=h.ram_mb - used["MEMORY_MB"],
                free_disk_gb=h.disk_gb - used["DISK_GB"],
                disk_available_least=h.disk_gb - used["DISK_GB"],
                current_workload=0,
                running_vms=len(c._servers_on(h.name)),
                cpu_info="{}")
        else:
            view["uptime"] = None
        return view

    def list_hypervisors(self, req, version):
        """os-hypervisors/detail, paged from 2.33 like Nova (limit,
        marker, hypervisors_links)."""
        with self.cloud.lock:
            self.cloud.now()
            hosts = sorted(self.cloud.hosts.values(),
                           key=lambda h: h.service_id)
            more = False
            if version >= (2, 33):
                hosts, more = paginate(
                    req, hosts,
                    lambda h: h.node_uuid if version >= (2, 53)
                    else str(h.service_id),
                    "marker [%s] not found", self.cloud.api_max_limit)
            claims = self.cloud._claims()
            body = {"hypervisors": [self.hypervisor_view(h, version, claims)
                                    for h in hosts]}
            if more:
                body["hypervisors_links"] = next_links(
                    req, body["hypervisors"][-1]["id"])
            return body

    def control_view(self, c, version):
        """A nova-scheduler or nova-conductor row (zone internal)."""
        view = self.service_view(c, version)
        view.update(binary=c.binary, zone="internal")
        return view

    def list_services(self, req, version):
        host, binary = req.arg("host"), req.arg("binary")
        with self.cloud.lock:
            self.cloud.now()
            return {"services": [
                self.service_view(h, version)
                for h in self.cloud.hosts.values()
                if (not host or h.name == host)
                and (not binary or binary == "nova-compute")] + [
                self.control_view(c, version) for c in self.cloud.control
                if (not host or c.name == host)
                and (not binary or binary == c.binary)]}

    def update_service(self, req, service_id, version):
        body = self._body(req)
        if version < (2, 53):
            return self._update_service_legacy(service_id, body, version)
        check_keys(body, ("status", "disabled_reason", "forced_down"))
        status = body.get("status")
        if "status" in body and status not in ("enabled", "disabled"):
            _invalid("status", status, "%r is not one of ['enabled', "
                                       "'disabled']" % (status,))
        reason = body.get("disabled_reason")
        if "disabled_reason" in body:
            check_string("disabled_reason", reason)
        forced = None
        if "forced_down" in body:
            forced = check_bool("forced_down", body["forced_down"])
        if not UUID_RE.match(service_id):
            raise ApiFault(400, "Invalid uuid %s" % service_id)
        with self.cloud.lock:
            h = self.cloud.update_service(service_id, status=status,
                                          disabled_reason=reason,
                                          forced_down=forced)
            return {"service": self.service_view(h, version)}

    def _update_service_legacy(self, action, body, version):
        allowed = ["host", "binary", "disabled_reason"]
        if version >= (2, 11):
            allowed.append("forced_down")
        check_keys(body, allowed, required=("host", "binary"))
        actions = ["enable", "disable", "disable-log-reason"]
        if version >= (2, 11):
            actions.append("force-down")
        if action not in actions:
            raise ApiFault(404, "Unknown action")
        host, binary = body["host"], body["binary"]
        if action == "disable-log-reason" and "disabled_reason" not in body:
            raise ApiFault(400, "Missing disabled reason field")
        if action == "force-down" and "forced_down" not in body:
            raise ApiFault(400, "Missing forced_down field")
        if binary != "nova-compute":
            raise ApiFault(400, "Updating a %s service is not supported. Only "
                                "nova-compute services can be updated."
                           % binary)
        with self.cloud.lock:
            self.cloud.now()
            h = self.cloud.hosts.get(host)
            if h is None:
                raise ApiFault(404, "Could not find binary %s on host %s."
                               % (binary, host))
            service = {"host": host, "binary": binary}
            if action == "force-down":
                forced = check_bool("forced_down", body["forced_down"])
                self.cloud.update_service(h.service_uuid, forced_down=forced)
                service["forced_down"] = forced
            elif action == "enable":
                self.cloud.update_service(h.service_uuid, status="enabled")
                service["status"] = "enabled"
            else:
                reason = body.get("disabled_reason") \
                    if action == "disable-log-reason" else None
                self.cloud.update_service(h.service_uuid, status="disabled",
                                          disabled_reason=reason)
                service["status"] = "disabled"
                if reason:
                    service["disabled_reason"] = reason
            return {"service": service}

    # -- servers -------------------------------------------------------------

    def server_view(self, req, s, version, detail=True):
        base = req.base_url + PREFIX
        links = [{"rel": "self", "href": "%s/v2.1/servers/%s" % (base, s.id)},
                 {"rel": "bookmark", "href": "%s/servers/%s" % (base, s.id)}]
        if not detail:
            return {"id": s.id, "name": s.name, "links": links}
        host_id = hashlib.sha224((s.project_id + s.host).encode()).hexdigest()
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
        with self.cloud.lock:
            servers = [s for s in self.cloud.list_servers(host=host)
                       if not status or s.status == status.upper()]
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
        body = self._body(req)
        if not isinstance(body, dict) or len(body) != 1:
            raise ApiFault(400, "Malformed request body")
        action = next(iter(body))
        if action == "os-stop":
            self.cloud.stop_server(server_id)
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
                 "project_id": server.project_id, "user_id": server.user_id,
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

    # -- os-migrations -------------------------------------------------------

    def migration_view(self, mig, version):
        view = {"id": mig.id, "source_node": mig.source_compute,
                "dest_node": mig.dest_compute,
                "source_compute": mig.source_compute,
                "dest_compute": mig.dest_compute, "dest_host": None,
                "status": mig.status, "instance_uuid": mig.instance_uuid,
                "old_instance_type_id": 1, "new_instance_type_id": 1,
                "created_at": web.iso_micro(mig.created_at),
                "updated_at": web.iso_micro(mig.updated_at)}
        if version >= (2, 23):
            view["migration_type"] = mig.migration_type
        if version >= (2, 59):
            view["uuid"] = mig.uuid
        if version >= (2, 80):
            view["user_id"] = mig.user_id
            view["project_id"] = mig.project_id
        return view

    def list_migrations(self, req, version):
        filters = {k: req.arg(k) for k in ("migration_type", "source_compute",
                                           "host", "status", "instance_uuid")}
        with self.cloud.lock:
            migrations = self.cloud.list_migrations(**filters)
            more = False
            if version >= (2, 59):
                # Paged from 2.59 only (sorted created_at, id descending);
                # below, Nova lists every row.
                migrations, more = paginate(
                    req, migrations, lambda m: m.uuid,
                    "Marker %s could not be found.", self.cloud.api_max_limit)
            body = {"migrations": [self.migration_view(mig, version)
                                   for mig in migrations]}
            if more:
                body["migrations_links"] = next_links(req,
                                                      migrations[-1].uuid)
            return body
