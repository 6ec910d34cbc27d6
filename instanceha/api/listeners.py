"""The cheroot servers behind the operator API's listeners: build and bind
one (a TCP address or a unix socket, whose directory and current holder
are checked first), and remove our unix socket afterwards.
:class:`instanceha.api.server.OperatorAPI` decides which listeners serve
what, and starts and stops them.
"""

import os
import socket

from cheroot import server as cheroot_server
from cheroot import wsgi as cheroot_wsgi
import structlog

from instanceha.conf import api as api_conf
from instanceha.errors import StartupError

LOG = structlog.get_logger("instanceha.api")


def make_server(where, app, api):
    """A prepared (bound) server for ``app`` at ``where`` (a (host, port)
    or a unix socket path) with the ``[api]`` options ``api``. Raises the
    OSError of the failed bind."""
    server = Server(where, app, numthreads=api.threads,
                    timeout=int(max(1, api.request_timeout)),
                    shutdown_timeout=2)
    server.max_request_body_size = api.max_request_body
    server.max_request_header_size = api.max_request_header
    server.server_name = "instanceha"
    server.software = "instanceha"
    try:
        server.prepare()
    except OSError as e:
        # cheroot folds the cause into a sentence; say the cause.
        raise (server.bind_error or e) from None
    return server


def bind_unix(path, app, api):
    """The unix socket's server, its directory checked first (it must
    keep other users out), the socket itself made 0660. StartupError
    naming the socket."""
    why = api_conf.check_unix_socket(path) or served_by_another(path)
    if why is not None:
        raise StartupError("operator API: %s" % why)
    try:
        server = make_server(path, app, api)
    except OSError as e:
        raise StartupError("operator API: cannot bind unix socket %s: "
                           "%s" % (path, e.strerror or e)) from None
    # cheroot makes it 0777; the directory (checked at start) keeps others
    # out, the socket its owner and group in.
    os.chmod(path, 0o660)
    return server


def unlink(where):
    """Remove our unix socket (only a socket, in a directory that passes
    the start checks); a TCP address: nothing to do."""
    if isinstance(where, str) and api_conf.check_unix_socket(where) \
            is None:
        try:
            os.unlink(where)
        except FileNotFoundError:
            pass


def served_by_another(path):
    """A reason not to replace the socket at ``path``: a process (another
    instanceha on this machine) still accepts connections on it, or None
    (no socket, or an old one nobody serves)."""
    if not os.path.exists(path):
        return None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return None
    finally:
        probe.close()
    return ("[api] unix_socket %s: another process serves it (a second "
            "instanceha on this machine?): give each its own path" % path)


class _Request(cheroot_server.HTTPRequest):
    """cheroot's own refusals (a CONNECT, a malformed request line) say
    what they are, never with an empty body."""

    def simple_response(self, status, msg=""):
        return super().simple_response(status, msg or str(status))


class _Connection(cheroot_server.HTTPConnection):
    RequestHandlerClass = _Request


class Server(cheroot_wsgi.Server):
    """cheroot's server, its errors logged through structlog and the cause
    of a failed bind kept."""

    ConnectionClass = _Connection
    bind_error = None

    def bind(self, family, type, proto=0):
        try:
            return super().bind(family, type, proto)
        except OSError as e:
            self.bind_error = e
            raise

    def error_log(self, msg="", level=20, traceback=False):
        if level < 40:
            return
        if traceback:
            LOG.exception("api_server_error", reason=str(msg)[:300])
        else:
            LOG.error("api_server_error", reason=str(msg)[:300])
