"""Glance's image API v2, just enough for the recovery policies: the
version document and ``GET /v2/images/{id}``, answered as Glance answers
it: the image's custom properties are top-level fields beside Glance's own
(id, name, status, visibility, ...), ``tags`` is a list.

Images live in the model (``SimCloud.set_image``); each server names the
image it was booted from.
"""

from instanceha.sim import model
from instanceha.sim import web

PREFIX = "/image"
VERSIONS = ("2.16", "2.15", "2.9", "2.7", "2.6", "2.5", "2.4", "2.3", "2.2",
            "2.1", "2.0")


def _plain(code, title, detail):
    # Glance's faults are webob's plain text, not JSON.
    return web.Response(code, ("%d %s\n\n%s\n\n   " % (code, title, detail))
                        .encode(), {"Content-Type": "text/plain"})


def image_view(img):
    """An image as GET /v2/images/{id} shows it."""
    view = dict(img["properties"])
    view.update({
        "id": img["id"], "name": img["name"], "status": "active",
        "visibility": "public", "protected": False, "os_hidden": False,
        "owner": None, "size": 21430272, "virtual_size": 117440512,
        "checksum": "0b12f4f3a1b2c3d4e5f60718293a4b5c",
        "os_hash_algo": "sha512", "os_hash_value": None,
        "min_ram": 0, "min_disk": 0, "disk_format": "qcow2",
        "container_format": "bare", "tags": list(img["tags"]),
        "created_at": web.iso_z(img["created"]),
        "updated_at": web.iso_z(img["updated"]),
        "self": "/v2/images/%s" % img["id"],
        "file": "/v2/images/%s/file" % img["id"],
        "schema": "/v2/schemas/image"})
    return view


class Glance:
    def __init__(self, cloud, keystone):
        self.cloud = cloud
        self.keystone = keystone

    def handle(self, req):
        parts = web.split(req.path, PREFIX)
        if req.method == "GET" and parts in ([], ["versions"]):
            return web.Response(300 if not parts else 200, {"versions": [{
                "id": "v" + v,
                "status": "CURRENT" if i == 0 else "SUPPORTED",
                "links": [{"rel": "self",
                           "href": "%s%s/v2/" % (req.base_url, PREFIX)}]}
                for i, v in enumerate(VERSIONS)]})
        if not self.keystone.valid(req.headers.get("X-Auth-Token")):
            return _plain(401, "Unauthorized", "This server could not verify "
                                               "that you are authorized to "
                                               "access the document you "
                                               "requested.")
        if len(parts) == 3 and parts[:2] == ["v2", "images"] \
                and req.method == "GET":
            try:
                img = self.cloud.get_image(parts[2])
            except model.NotFound as e:
                return _plain(404, "Not Found", e.message)
            return web.Response(200, image_view(img))
        return _plain(404, "Not Found", "The resource could not be found.")
