"""Fault-injecting proxies on loopback, for the faults-of-the-world tests.

:class:`HttpFaultProxy` sits in front of an HTTP API (the simulator's Nova,
or real nova-api) and, on a seeded share of the requests under a path
prefix, answers 503 without forwarding (the request never reached the
service), forwards and then answers 500 (the request *took effect* but the
client is told it failed: the nastiest case for a client that retries), or
holds the request longer than the client's timeout before forwarding it.
Every request and what was done to it is counted.

:class:`TcpProxy` forwards raw TCP (a database, a message broker) and can
be taken down (every connection cut, new ones refused) and up again: the
service as its clients see it during a restart or a network cut, without
touching the shared service itself.

Both bind 127.0.0.1 on a free port and run on daemon threads.
"""

import collections
import http.client
import http.server
import random
import select
import socket
import threading
import time
import urllib.parse

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
        "te", "trailer", "upgrade", "content-length"}


class HttpFaultProxy:

    def __init__(self, target_url, prefix="/", fail_before=0.0,
                 fail_after=0.0, delay_rate=0.0, delay=0.0, seed=0,
                 methods=None, script=None, inspect=None):
        """``target_url``: where requests go (scheme, host and port used).
        ``prefix``: only paths under it get faults. ``methods``: only these
        methods (None: any). ``script``: {method: [fault, ...]}: the next
        requests of that method get these faults in turn, before the
        random ones apply (so that rare calls, writes, surely get some).
        ``inspect(method, path, body)``: called just before a request is
        forwarded (never for one refused without forwarding); an object it
        returns gets the service's HTTP status as its ``answer``."""
        self.inspect = inspect
        self.script = {m: list(f) for m, f in (script or {}).items()}
        target = urllib.parse.urlsplit(target_url)
        self.target = (target.hostname, target.port or 80)
        self.prefix = prefix
        self.fail_before, self.fail_after = fail_before, fail_after
        self.delay_rate, self.delay = delay_rate, delay
        self.methods = set(methods) if methods else None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.enabled = True
        #: (method, fault) -> count; fault: none, fail_before, fail_after,
        #: delay
        self.counts = collections.Counter()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                try:
                    proxy._handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up first (its timeout, a held
                    # request): what a real proxy sees too.
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                       Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="faultproxy-http").start()

    def _fault(self, method, path):
        if not self.enabled or not path.startswith(self.prefix):
            return "none"
        with self._lock:
            if self.script.get(method):
                return self.script[method].pop(0)
        if self.methods is not None and method not in self.methods:
            return "none"
        with self._lock:
            roll = self._rng.random()
        for fault, rate in (("fail_before", self.fail_before),
                            ("fail_after", self.fail_after),
                            ("delay", self.delay_rate)):
            if roll < rate:
                return fault
            roll -= rate
        return "none"

    def _handle(self, h):
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        fault = self._fault(h.command, h.path)
        with self._lock:
            self.counts[(h.command, fault)] += 1
        if fault == "fail_before":
            return self._answer(h, 503, b'{"computeFault": {"code": 503, '
                                b'"message": "injected: service '
                                b'unavailable"}}')
        if fault == "delay":
            time.sleep(self.delay)
        note = self.inspect(h.command, h.path, body) if self.inspect else None
        conn = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items()
                       if k.lower() not in _HOP}
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            return self._answer(h, 502, ('{"error": "proxy: %s"}' % e)
                                .encode())
        finally:
            conn.close()
        if note is not None:
            note.answer = resp.status
        if fault == "fail_after":
            return self._answer(h, 500, b'{"computeFault": {"code": 500, '
                                b'"message": "injected: the request was '
                                b'applied, the answer lost"}}')
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    @staticmethod
    def _answer(h, code, data):
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def faults(self):
        """{fault: count} over every method."""
        out = collections.Counter()
        for (_, fault), n in self.counts.items():
            out[fault] += n
        return dict(out)

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class TcpProxy:

    def __init__(self, target_host, target_port):
        self.target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._closed = False
        self._lock = threading.Lock()
        self._pairs = []
        #: connections cut or refused while down
        self.cut = 0
        threading.Thread(target=self._accept, daemon=True,
                         name="faultproxy-tcp").start()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                self.cut += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream),
                             daemon=True).start()

    def _pump(self, a, b):
        socks = [a, b]
        try:
            while self._up.is_set():
                ready, _, _ = select.select(socks, [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except OSError:
            pass
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def down(self):
        """Cut every connection; refuse new ones until :meth:`up`."""
        self._up.clear()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            self.cut += 1
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def up(self):
        self._up.set()

    def close(self):
        self._closed = True
        self.down()
        self._listener.close()
