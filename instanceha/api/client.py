"""The CLI's side of the operator API: where the service listens, a
Keystone token when ``[api] auth_strategy = keystone``, one JSON request.

The token comes through keystoneauth (openstacksdk's session) from the
same clouds.yaml entry the service uses for Nova (``[DEFAULT] cloud`` and
``clouds_file``). It is sent as X-Auth-Token and never printed.
"""

import http.client
import json
import os
import socket
import urllib.error
import urllib.request

from instanceha.conf import api as api_conf
from instanceha.log import mask_url


class ClientError(Exception):
    """The request could not be made; the message is for the operator."""


def api_url(conf):
    """The running service's API: ``unix:<path>`` for ``[api]
    unix_socket`` (the default), else its TCP URL from its status file,
    else from the config. TCP instead of the socket only where TCP serves
    commands (Keystone, or allow_unauthenticated_tcp) and no socket is at
    the path (a CLI on another machine)."""
    path = conf.api.unix_socket
    if path and (os.path.exists(path)
                 or not api_conf.tcp_serves_commands(conf)):
        return "unix:" + path
    try:
        with open(conf.status_file) as f:
            url = json.load(f).get("api")
        if url:
            return url
    except (OSError, ValueError):
        pass
    address = conf.api.listen_address
    if ":" in address:
        address = "[%s]" % address
    return "http://%s:%d" % (address, conf.api.port)


def keystone_token(conf):
    """A token for the clouds.yaml entry ``[DEFAULT] cloud``."""
    # Local: openstacksdk costs ~0.3 s at import; only a CLI command sent
    # with auth_strategy = keystone needs a token.
    from instanceha.drivers.compute import nova
    try:
        token = nova.connect(conf).auth_token
    except Exception as e:   # noqa: BLE001 - keystoneauth's many errors
        raise ClientError("cannot get a Keystone token for cloud %r: %s" % (
            conf.cloud, mask_url(e)))
    if not token:
        raise ClientError("cloud %r gave no Keystone token" % conf.cloud)
    return token


def call(conf, method, path, body=None, timeout=10.0, token=keystone_token):
    """(HTTP status, decoded JSON answer or {"error": text}). Raises
    ClientError when the service cannot be reached or no token had."""
    base = api_url(conf)
    url = base + path
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if conf.api.auth_strategy == "keystone":
        headers["X-Auth-Token"] = token(conf)
    if base.startswith("unix:"):
        return _call_unix(base, method, path, data, headers, timeout)
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, _decode(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, _decode(e.read())
    except (urllib.error.URLError, OSError) as e:
        raise ClientError("cannot reach the service at %s: %s" % (url, e))


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the unix socket at ``path`` (Host: localhost)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _call_unix(base, method, path, data, headers, timeout):
    conn = UnixConnection(base[len("unix:"):], timeout)
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, _decode(resp.read())
    except OSError as e:
        raise ClientError("cannot reach the service at %s: %s%s" % (
            base, e, _SOCKET_HINTS.get(type(e), "")))
    finally:
        conn.close()


_SOCKET_HINTS = {
    PermissionError: " (the socket's directory admits the service's user "
                     "and group only: run this as one of them)",
    FileNotFoundError: " (is the service running with this [api] "
                       "unix_socket? give its --config-file)",
    ConnectionRefusedError: " (the service is not running)",
}


def _decode(raw):
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {"error": raw[:300].decode("utf-8", "replace")}
    if not isinstance(data, dict):
        return {"error": str(data)[:300]}
    return data


def error_text(answer):
    """The message of an error answer (ours, or keystonemiddleware's
    {"error": {"message": ...}})."""
    err = answer.get("error", answer)
    if isinstance(err, dict):
        err = err.get("message") or err.get("title") or json.dumps(err)
    return str(err)
