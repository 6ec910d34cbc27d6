"""The clients' side of the operator API: one JSON request, made one of
two ways.

- :meth:`APIClient.from_conf` (the ``instanceha`` commands, on the
  service's machine): where the service listens (its unix socket, else
  TCP) from its configuration, and a Keystone token when ``[api]
  auth_strategy = keystone``, got through keystoneauth (openstacksdk's
  session) from the clouds.yaml entry the service uses for Nova
  (``[DEFAULT] cloud`` and ``clouds_file``).
- :meth:`APIClient.from_session` (the ``openstack instanceha`` commands):
  the user's own keystoneauth session and the endpoint found in the
  Keystone catalog; the session sends the user's token.

Either way the token is sent as X-Auth-Token and never printed, and the
answer is (HTTP status, decoded JSON). :func:`call` is the first way in
one call.
"""

import http.client
import json
import os
import socket
import urllib.error
import urllib.parse
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


class APIClient:
    """The operator API at ``base`` (``unix:<path>`` or an HTTP URL).

    ``token``: None (no X-Auth-Token), or a function giving the token for
    each request. ``session``: a keystoneauth session that makes the HTTP
    requests and authenticates them itself (``base`` is then the
    endpoint's URL)."""

    def __init__(self, base, token=None, session=None, timeout=10.0):
        self.base = base.rstrip("/") if not base.startswith("unix:") \
            else base
        self.token = token
        self.session = session
        self.timeout = timeout

    @classmethod
    def from_conf(cls, conf, token=keystone_token, timeout=10.0):
        """The running service's API as its configuration says, with a
        token for the service's own cloud under auth_strategy = keystone."""
        need = conf.api.auth_strategy == "keystone"
        return cls(api_url(conf), token=(lambda: token(conf)) if need
                   else None, timeout=timeout)

    @classmethod
    def from_session(cls, session, endpoint, timeout=30.0):
        """The API at ``endpoint`` (from the Keystone catalog), reached
        through the keystoneauth ``session`` with its user's token."""
        return cls(endpoint, session=session, timeout=timeout)

    def request(self, method, path, body=None, query=None):
        """(HTTP status, decoded JSON answer or {"error": text}).
        ``query``: {name: value}, None values left out. Raises ClientError
        when the service cannot be reached or no token had."""
        if query:
            pairs = [(k, v) for k, v in query.items() if v is not None]
            if pairs:
                path += "?" + urllib.parse.urlencode(pairs)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.session is not None:
            return self._session_call(method, path, data, headers)
        if self.token is not None:
            headers["X-Auth-Token"] = self.token()
        if self.base.startswith("unix:"):
            return _call_unix(self.base, method, path, data, headers,
                              self.timeout)
        url = self.base + path
        req = urllib.request.Request(url, data=data, headers=headers,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read())
        except (urllib.error.URLError, OSError) as e:
            raise ClientError("cannot reach the service at %s: %s"
                              % (url, e))

    def _session_call(self, method, path, data, headers):
        # Local: keystoneauth is imported only by the session's users.
        from keystoneauth1 import exceptions as ks_exc
        url = self.base + path
        try:
            resp = self.session.request(
                url, method, data=data, headers=headers, raise_exc=False,
                timeout=self.timeout)
        except ks_exc.ConnectionError as e:
            raise ClientError("cannot reach the service at %s: %s" % (
                self.base, mask_url(e)))
        except ks_exc.ClientException as e:
            # Keystone refused the user's credentials, a catalog lookup
            # failed, ...: keystoneauth's message says which.
            raise ClientError("request to %s failed: %s: %s" % (
                self.base, type(e).__name__, mask_url(e)))
        return resp.status_code, _decode(resp.content)

    # -- the endpoints ------------------------------------------------------
    def status(self):
        return self.request("GET", "/status")

    def history(self, host, since=None, until=None, limit=None,
                marker=None):
        return self.request("GET", "/hosts/%s/history" % quote(host),
                            query={"since": since, "until": until,
                                   "limit": limit, "marker": marker})

    def command(self, host, verb, body):
        """POST /hosts/<host>/<verb> (suspend, maintenance, drain,
        resume)."""
        return self.request("POST", "/hosts/%s/%s" % (quote(host), verb),
                            body)

    def resume_storm(self, body):
        return self.request("POST", "/storm/resume", body)

    def repair(self, server, body):
        """POST /servers/<id>/repair: a one-off repair, or a clear."""
        return self.request("POST", "/servers/%s/repair" % quote(server),
                            body)

    def repair_case(self, server):
        """GET /servers/<id>/repair: the server's case, markers, rows."""
        return self.request("GET", "/servers/%s/repair" % quote(server))


#: The repair levels a one-off instance repair may be asked up to (the
#: API checks them too): both command lines offer these.
REPAIR_LEVELS = ("restart", "reboot", "migrate", "evacuate", "rebuild")


def quote(host):
    """A host name as one path segment."""
    return urllib.parse.quote(host, safe="")


def call(conf, method, path, body=None, timeout=10.0, token=keystone_token):
    """(HTTP status, decoded JSON answer or {"error": text}) from the
    service ``conf`` configures. Raises ClientError when the service
    cannot be reached or no token had."""
    return APIClient.from_conf(conf, token, timeout).request(
        method, path, body)


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
