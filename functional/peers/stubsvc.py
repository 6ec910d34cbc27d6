"""Stand-ins for the two services Nova calls and we do not run.

* Image service (v2, read-only): every image id names an active qcow2 image.
  The fake virt driver never downloads image data; Nova only reads metadata.
* Network service (v2.0): every GET of a collection is an empty list. Servers
  are booted with ``networks: none``, so Nova only ever asks for ports,
  networks and extensions, and an empty answer is the truth.

Anything else answers 404 and is logged, so a Nova change that needs more
shows up in the log instead of being papered over.

usage: python stubsvc.py IMAGE_PORT NETWORK_PORT   (binds 127.0.0.1)
Runs with the standard library only.
"""

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

IMAGE_ID = "6a1d3a0e-4c2f-4c55-9a58-1f0d2b7c9e01"
_UUID = re.compile(r"^/v2/images/([0-9a-fA-F-]{32,36})$")
_COLLECTION = re.compile(r"^/v2\.0/([a-z][a-z_-]*)$")


def image_doc(image_id):
    return {
        "id": image_id, "name": "instanceha-test-%s" % image_id[:8],
        "status": "active", "visibility": "public", "protected": False,
        "os_hidden": False, "disk_format": "qcow2", "container_format": "bare",
        "size": 1048576, "virtual_size": 1073741824, "min_disk": 0,
        "min_ram": 0, "owner": "admin", "tags": [],
        "checksum": "0" * 32, "os_hash_algo": "sha512", "os_hash_value": "0" * 128,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "self": "/v2/images/%s" % image_id, "file": "/v2/images/%s/file" % image_id,
        "schema": "/v2/schemas/image",
    }


IMAGE_SCHEMA = {
    "name": "image",
    "properties": {"id": {"type": "string"}, "name": {"type": ["null", "string"]},
                   "status": {"type": "string"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "additionalProperties": {"type": ["null", "string", "integer", "boolean",
                                      "array", "object"]},
    "links": [{"rel": "self", "href": "{self}"},
              {"rel": "enclosure", "href": "{file}"},
              {"rel": "describedby", "href": "{schema}"}],
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    service = "?"

    def log_message(self, fmt, *args):
        sys.stdout.write("%s %s\n" % (self.service, fmt % args))
        sys.stdout.flush()

    def _send(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drain(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        doc = self.answer(path)
        if doc is None:
            self._send(404, {"message": "%s stand-in: GET %s not served"
                             % (self.service, path)})
        else:
            self._send(200, doc)

    def _refuse(self):
        self._drain()
        self._send(405, {"message": "%s stand-in is read-only" % self.service})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse


class ImageHandler(_Handler):
    service = "image"

    def answer(self, path):
        if path in ("", "/versions"):
            return {"versions": [{"id": "v2.16", "status": "CURRENT",
                                  "links": [{"rel": "self", "href": "/v2/"}]}]}
        if path == "/v2/schemas/image":
            return IMAGE_SCHEMA
        if path == "/v2/images":
            return {"images": [image_doc(IMAGE_ID)], "first": "/v2/images",
                    "schema": "/v2/schemas/images"}
        m = _UUID.match(path)
        return image_doc(m.group(1)) if m else None


class NetworkHandler(_Handler):
    service = "network"

    def answer(self, path):
        if path.endswith(".json"):
            path = path[:-5]
        if path == "":
            return {"versions": [{"id": "v2.0", "status": "CURRENT",
                                  "links": [{"rel": "self", "href": "/v2.0/"}]}]}
        m = _COLLECTION.match(path)
        return {m.group(1).replace("-", "_"): []} if m else None


def main(argv):
    servers = [ThreadingHTTPServer(("127.0.0.1", int(argv[1])), ImageHandler),
               ThreadingHTTPServer(("127.0.0.1", int(argv[2])), NetworkHandler)]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("stand-ins ready: image %s network %s" % (argv[1], argv[2]), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv)
