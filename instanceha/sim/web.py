"""Tiny request/response types shared by the simulator's HTTP front ends.

Each front end (keystone, nova_api, redfish, control) is a function
``handle(request) -> Response`` that never touches sockets; server.py turns
HTTP into ``Request`` and ``Response`` back into HTTP. ``DROP`` asks the
server to close the connection without answering (an unreachable BMC).
"""

import datetime
import json
import urllib.parse


class Request:
    def __init__(self, method, path, query, headers, body, base_url):
        self.method = method
        self.path = path                   # without the query string
        self.query = query                 # {name: [values]}
        self.headers = headers             # case-insensitive mapping
        self.body = body or b""
        self.base_url = base_url           # http://127.0.0.1:PORT

    @classmethod
    def from_target(cls, method, target, headers, body, base_url):
        parts = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        return cls(method, parts.path, query, headers, body, base_url)

    def arg(self, name, default=None):
        values = self.query.get(name)
        return values[-1] if values else default

    def json(self):
        """The body as JSON; raises ValueError when it is not."""
        if not self.body:
            raise ValueError("empty body")
        return json.loads(self.body.decode("utf-8"))


class Response:
    def __init__(self, status=200, body=None, headers=None):
        self.status = status
        self.body = body                   # dict/list -> JSON, bytes, None
        self.headers = dict(headers or {})

    def encode(self):
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        self.headers.setdefault("Content-Type", "application/json")
        return json.dumps(self.body).encode("utf-8")


DROP = object()


def split(path, prefix):
    """Path segments after ``prefix`` ('' segments removed), each
    percent-decoded as a WSGI server decodes PATH_INFO."""
    rest = path[len(prefix):]
    return [urllib.parse.unquote(p) for p in rest.split("/") if p]


def utc(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def iso_z(ts):
    """Nova's isotime: 2026-11-22T04:36:34Z."""
    if ts is None:
        return None
    return utc(ts).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_micro(ts):
    """A DB timestamp as Nova serialises it (second precision, naive UTC):
    2026-11-22T04:36:34.000000."""
    if ts is None:
        return None
    return utc(ts).strftime("%Y-%m-%dT%H:%M:%S.000000")
