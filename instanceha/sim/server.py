"""One threaded HTTP server on one loopback port for the whole simulated
cloud: ``/identity`` (Keystone), ``/compute`` (Nova), ``/placement``,
``/image`` (Glance), ``/redfish/v1`` (the BMCs) and ``/sim`` (control)."""

import http.server
import os
import sys
import threading
import time

import yaml

from instanceha.sim import control
from instanceha.sim import glance
from instanceha.sim import keystone
from instanceha.sim import nova_api
from instanceha.sim import placement
from instanceha.sim import redfish
from instanceha.sim import web


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "instanceha-sim"

    def log_message(self, fmt, *args):      # keep test output quiet
        pass

    def _dispatch(self):
        sim = self.server.sim
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = web.Request.from_target(self.command, self.path, self.headers,
                                      body, sim.url)
        front = sim.front_end(req.path)
        if front is None:
            resp = web.Response(404, {"error": "not found: %s" % req.path})
        else:
            if front is not sim.control and sim.cloud.api_latency > 0:
                time.sleep(sim.cloud.api_latency)
            try:
                resp = front.handle(req)
            except Exception as e:           # a bug in the simulator
                resp = web.Response(500, {"computeFault": {
                    "code": 500, "message": "simulator error: %r" % (e,)}})
        if resp is web.DROP:
            self.close_connection = True
            return
        data = resp.encode()
        self.send_response(resp.status)
        for key, value in resp.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            # The client asked to close (sushy always does): say so, or it
            # may reuse the socket we are about to close.
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients that hang up or fail the TLS handshake are expected here.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class SimServer:
    """Serves a SimCloud over HTTP; ``port=0`` picks a free port.

    ``ssl_context`` (an ``ssl.SSLContext`` holding a server certificate)
    serves HTTPS instead, to test TLS verification of clients.
    """

    def __init__(self, cloud, host="127.0.0.1", port=0, ssl_context=None):
        self.cloud = cloud
        self.keystone = keystone.Keystone(cloud)
        self.nova = nova_api.NovaAPI(cloud, self.keystone)
        self.placement = placement.Placement(cloud, self.keystone)
        self.glance = glance.Glance(cloud, self.keystone)
        self.redfish = redfish.Redfish(cloud)
        self.control = control.Control(cloud)
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.sim = self
        if ssl_context is not None:
            # Handshake in the handler thread, not in accept().
            self._httpd.socket = ssl_context.wrap_socket(
                self._httpd.socket, server_side=True,
                do_handshake_on_connect=False)
        self.host, self.port = self._httpd.server_address[:2]
        self.url = "%s://%s:%d" % ("https" if ssl_context else "http",
                                   self.host, self.port)
        self._thread = None
        cloud.where = "simulator at %s" % self.url

    def front_end(self, path):
        for prefix, front in ((keystone.PREFIX, self.keystone),
                              (nova_api.PREFIX, self.nova),
                              (placement.PREFIX, self.placement),
                              (glance.PREFIX, self.glance),
                              (redfish.PREFIX, self.redfish),
                              (control.PREFIX, self.control)):
            if path == prefix or path.startswith(prefix + "/"):
                return front
        return None

    def start(self):
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="instanceha-sim", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self):
        self._httpd.serve_forever()

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def clouds_config(self):
        c = self.cloud
        return {"clouds": {"sim": {
            "auth_type": "password",
            "auth": {"auth_url": self.url + keystone.PREFIX + "/v3",
                     "username": c.username, "password": c.password,
                     "project_name": c.project,
                     "user_domain_name": "Default",
                     "project_domain_name": "Default"},
            "region_name": c.region,
            "identity_api_version": 3,
            "interface": "public",
        }}}

    def bmc_inventory(self):
        hosts = {}
        for h in self.cloud.hosts.values():
            hosts[h.name] = {
                "driver": "redfish", "address": self.url,
                "username": h.bmc_username, "password": h.bmc_password,
                "system_id": "%s/Systems/%s" % (redfish.PREFIX, h.name),
                "verify": False}
        return {"hosts": hosts}

    def write_client_files(self, directory):
        """Write clouds.yaml and bmc.yaml (mode 0600: they hold passwords)
        into ``directory``; return (clouds_yaml_path, bmc_yaml_path)."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        for name, data in (("clouds.yaml", self.clouds_config()),
                           ("bmc.yaml", self.bmc_inventory())):
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                yaml.safe_dump(data, f, default_flow_style=False,
                               sort_keys=False)
            paths.append(path)
        return tuple(paths)
