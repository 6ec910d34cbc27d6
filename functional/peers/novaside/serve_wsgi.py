"""Serve one WSGI application on 127.0.0.1 with a thread per request.

usage: python serve_wsgi.py MODULE:ATTRIBUTE PORT
Nova and Placement ship WSGI entry points but no server; this is enough for
a test bed (one process, threads, HTTP/1.0).
"""

import importlib
import socketserver
import sys
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Handler(simple_server.WSGIRequestHandler):
    def log_message(self, fmt, *args):
        pass  # the applications log requests themselves


def main():
    target, port = sys.argv[1], int(sys.argv[2])
    module, attr = target.split(":")
    del sys.argv[1:]  # the apps parse sys.argv for oslo.config
    app = getattr(importlib.import_module(module), attr)
    server = simple_server.make_server("127.0.0.1", port, app,
                                       server_class=_Server,
                                       handler_class=_Handler)
    print("serving %s on 127.0.0.1:%d" % (target, port), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
