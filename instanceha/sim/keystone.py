"""Keystone v3, just enough for keystoneauth password auth: version
documents, ``POST /identity/v3/auth/tokens`` and a service catalog pointing
at the simulator's own Nova, Placement and Glance (the image service only
while ``SimCloud.image_endpoint``)."""

import datetime
import secrets
import threading
import uuid

from instanceha.sim import web

PREFIX = "/identity"
DOMAIN = {"id": "default", "name": "Default"}
MEDIA = [{"base": "application/json",
          "type": "application/vnd.openstack.identity-v3+json"}]


def error(code, title, message):
    return web.Response(code, {"error": {"code": code, "title": title,
                                         "message": message}})


def unauthorized():
    return error(401, "Unauthorized",
                 "The request you have made requires authentication.")


class Keystone:
    def __init__(self, cloud):
        self.cloud = cloud
        self._tokens = {}
        self._lock = threading.Lock()

    def valid(self, token):
        with self._lock:
            return bool(token) and token in self._tokens

    def _version(self, base):
        return {"id": "v3.14", "status": "stable",
                "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": base + PREFIX + "/v3/"}],
                "media-types": MEDIA}

    def handle(self, req):
        parts = web.split(req.path, PREFIX)
        if req.method == "GET" and not parts:
            return web.Response(300, {"versions": {
                "values": [self._version(req.base_url)]}})
        if req.method == "GET" and parts == ["v3"]:
            return web.Response(200, {"version": self._version(req.base_url)})
        if parts == ["v3", "auth", "tokens"] and req.method == "POST":
            return self._issue(req)
        return error(404, "Not Found", "The resource could not be found.")

    def _check_password(self, identity):
        user = (identity.get("password") or {}).get("user") or {}
        name_ok = (user.get("name") == self.cloud.username
                   or user.get("id") == self.cloud.user_id)
        domain = user.get("domain") or DOMAIN
        domain_ok = user.get("id") or domain.get("id") == "default" \
            or domain.get("name") == "Default"
        return name_ok and domain_ok \
            and user.get("password") == self.cloud.password

    def _issue(self, req):
        try:
            auth = req.json()["auth"]
            identity = auth["identity"]
            methods = identity["methods"]
        except (ValueError, KeyError, TypeError):
            return error(400, "Bad Request",
                         "Expecting to find auth in request body. The server "
                         "could not comply with the request since it is "
                         "either malformed or otherwise incorrect.")
        if "password" in methods:
            ok = self._check_password(identity)
        elif "token" in methods:
            ok = self.valid((identity.get("token") or {}).get("id"))
        else:
            ok = False
        if not ok:
            return unauthorized()
        project = ((auth.get("scope") or {}).get("project")) or None
        if project is not None and project.get("name") not in (
                None, self.cloud.project) and project.get("id") not in (
                None, self.cloud.project_id):
            return unauthorized()
        token_id = secrets.token_hex(16)
        with self._lock:
            self._tokens[token_id] = True
        return web.Response(201, {"token": self._body(req.base_url, project)},
                            {"X-Subject-Token": token_id})

    def _body(self, base, project):
        now = datetime.datetime.now(datetime.timezone.utc)
        fmt = "%Y-%m-%dT%H:%M:%S.%f0Z"
        token = {
            "methods": ["password"],
            "user": {"id": self.cloud.user_id, "name": self.cloud.username,
                     "domain": DOMAIN, "password_expires_at": None},
            "audit_ids": [secrets.token_urlsafe(16)],
            "issued_at": now.strftime(fmt),
            "expires_at": (now + datetime.timedelta(hours=12)).strftime(fmt),
        }
        if project is not None:
            token["project"] = {"id": self.cloud.project_id,
                                "name": self.cloud.project, "domain": DOMAIN}
            token["is_domain"] = False
            token["roles"] = [{"id": uuid.uuid5(uuid.NAMESPACE_DNS, r).hex,
                               "name": r}
                              for r in ("admin", "member", "reader")]
            token["catalog"] = self._catalog(base)
        return token

    def _catalog(self, base):
        def service(stype, name, url):
            sid = uuid.uuid5(uuid.NAMESPACE_URL, stype).hex
            return {"id": sid, "type": stype, "name": name, "endpoints": [
                {"id": uuid.uuid5(uuid.NAMESPACE_URL, stype + i).hex,
                 "interface": i, "region": self.cloud.region,
                 "region_id": self.cloud.region, "url": url}
                for i in ("public", "internal", "admin")]}
        catalog = [service("compute", "nova", base + "/compute/v2.1"),
                   service("placement", "placement", base + "/placement"),
                   service("identity", "keystone", base + PREFIX)]
        if self.cloud.image_endpoint:
            catalog.append(service("image", "glance", base + "/image"))
        return catalog
