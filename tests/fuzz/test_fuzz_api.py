"""Fuzz the operator API through its real HTTP server on loopback, with an
engine double: random methods, paths, headers, Content-Length values and
bodies, sent as raw bytes.

Properties: every request is answered (an HTTP status line) and never
with a 5xx (503 only from /healthz), never with a traceback; the server's
``error_log`` is never called with an error (where cheroot reports an
exception in a request); the engine receives an event exactly for a 202
answer to a host command, and nothing else changes its state; a command
not declared ``application/json`` (a browser's cross-site form post) is
never accepted.
"""

import json
import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instanceha import conf as ih_conf
from instanceha.api.server import OperatorAPI
from instanceha.fsm.states import State
from tests.fuzz import budget
from tests.fuzz import gen


class Rec:
    def __init__(self, id, name, state):
        self.id, self.name, self.state = id, name, state


class EngineDouble:
    """What the API reads and calls; records every call that would change
    the engine's state."""

    def __init__(self):
        self.hosts = {"compute-0": Rec("id-0", "compute-0", State.ACTIVE),
                      "compute-1": Rec("id-1", "compute-1",
                                       State.SUSPENDED)}
        self.submitted = []
        self.acknowledged = []
        self.health = {}
        self.stats = {("transition", "active"): 1}
        self.started_at = time.time()
        self.lock = threading.Lock()

    def snapshot(self):
        return {"hosts": [{"id": r.id, "name": r.name, "state": r.state.value}
                          for r in self.hosts.values()],
                "cluster": {"ok": True}, "sources": {}}

    def find(self, name):
        return self.hosts.get(name)

    def submit(self, event):
        with self.lock:
            self.submitted.append(event)

    def acknowledge_storm(self, reason):
        with self.lock:
            self.acknowledged.append(reason)
        return []      # no hold: answered 409, nothing changes

    def running_work(self, host_id):
        return None


class Served:
    def __init__(self):
        self.engine = EngineDouble()
        # The whole API (the commands the unix socket serves by default)
        # on a TCP port the fuzzer can reach: the same WSGI application.
        conf = ih_conf.make({"api": {"listen_address": "127.0.0.1",
                                     "port": 0, "unix_socket": "",
                                     "allow_unauthenticated_tcp": True}})
        self.api = OperatorAPI(conf, self.engine, time.time)
        self.api.bind()
        self.errors = []
        server = next(srv for where, srv, _serves, _thread
                      in self.api._listeners if not isinstance(where, str))

        def error_log(msg="", level=20, traceback=False):
            if level >= 40:
                import traceback as tb
                self.errors.append("%s\n%s" % (msg, tb.format_exc()))
        server.error_log = error_log     # observe, do not print
        self.api.start()

    def request(self, raw, timeout=10.0):
        """Send ``raw``, half-close, read the whole answer."""
        with socket.create_connection(("127.0.0.1", self.api.port),
                                      timeout=timeout) as s:
            try:
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass    # the server may answer and close before all is sent
            chunks = []
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)

    def check(self, method, path, headers, body):
        del self.errors[:]
        before = len(self.engine.submitted)
        raw = ("%s %s HTTP/1.1\r\n" % (method, path)).encode(
            "latin-1", "replace")
        for name, value in headers:
            raw += ("%s: %s\r\n" % (name, value)).encode("latin-1",
                                                          "replace")
        raw += b"\r\n" + body
        answer = self.request(raw)
        assert not self.errors, self.errors[-1]
        assert answer.startswith(b"HTTP/1."), (raw[:300], answer[:300])
        status = int(answer.split(b" ", 2)[1])
        assert status < 500 or (status == 503 and path == "/healthz"), \
            (raw[:300], answer[:500])
        assert b"Traceback" not in answer
        if 400 <= status < 500 and method != "HEAD":
            assert answer.split(b"\r\n\r\n", 1)[1], "4xx without a message"
        submitted = len(self.engine.submitted) - before
        is_command = method == "POST" and path.startswith("/hosts/")
        assert submitted == (1 if status == 202 and is_command else 0), \
            (raw[:300], answer[:300])
        ctypes = [v for n, v in headers if n.lower() == "content-type"]
        if status == 202 and ctypes != ["application/json"]:
            assert ctypes and ctypes[0].split(";")[0].strip().lower() == \
                "application/json", (raw[:300], answer[:300])
        return status


_SERVED = []


def served():
    if not _SERVED:
        _SERVED.append(Served())
    return _SERVED[0]


def teardown_module():
    for s in _SERVED:
        s.api.stop()



METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH",
           "TRACE", "CONNECT", "FOO", "get", "POST2"]
PATHS = ["/status", "/healthz", "/metrics", "/storm/resume",
         "/hosts/compute-0/suspend", "/hosts/compute-0/maintenance",
         "/hosts/compute-0/resume", "/hosts/compute-1/resume",
         "/hosts/compute-1/suspend", "/hosts/nope/suspend",
         "/hosts/compute-0/reboot", "/hosts//suspend", "/", "*",
         "/status?x=1", "/hosts/compute-0/suspend/", "/%2e%2e/status",
         "http://127.0.0.1/status"]
BODIES = [b"", b"{}", b'{"reason": "x"}', b'{"reason": "x", "seconds": 30}',
          b'{"reason": "x", "forever": true}', b'{"seconds": -1}',
          b'{"seconds": 1e999}', b'{"seconds": NaN}', b"[1]", b"null",
          b'{"seconds": ' + b"9" * 400 + b"}", b'{"seconds": true}',
          b'{"forever": "yes"}', b"\xff\xfe", b"{x", b'"' + b"[" * 3000,
          b"[" * 3000 + b"]" * 3000]
CONTENT_TYPES = ["application/json"] * 6 + [
    "application/json; charset=utf-8", "APPLICATION/JSON", None,
    "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/jsonx", ""]
LENGTHS = ["-1", "abc", "1e3", " 5", "99999999999999999999", "0x10",
           "10, 10", "", "+3", "\u0661"]


def _headers(rnd_body_len, extra, length, ctype="application/json"):
    headers = [("Host", "127.0.0.1")]
    if ctype is not None:
        headers.append(("Content-Type", ctype))
    if length == "auto":
        headers.append(("Content-Length", str(rnd_body_len)))
    elif length is not None:
        headers.append(("Content-Length", length))
    return headers + extra


def _gen_request(rnd):
    method = rnd.choice(METHODS) if rnd.random() < 0.9 else gen.text(rnd, 6)
    if rnd.random() < 0.7:
        path = rnd.choice(PATHS)
    else:
        path = "/hosts/%s/%s" % (gen.text(rnd, 10), gen.text(rnd, 8))
    path = "".join(c for c in path if c not in " \r\n") or "/"
    method = "".join(c for c in method if c not in " \r\n:") or "GET"
    body = rnd.choice(BODIES) if rnd.random() < 0.6 else \
        json.dumps(gen.json_like(rnd, ["reason", "seconds", "forever"]),
                   default=str).encode("utf-8", "surrogatepass")
    length = rnd.choice(["auto"] * 6 + [None] + LENGTHS + [
        str(rnd.randint(0, len(body) + 10))])
    extra = [(gen.text(rnd, 10).replace(":", "").replace("\r", "")
              .replace("\n", "") or "X", gen.text(rnd, 20)
              .replace("\r", "").replace("\n", ""))
             for _ in range(rnd.randint(0, 2))]
    extra = [(n, v) for n, v in extra if n.strip()]
    return method, path, _headers(len(body), extra, length,
                                  rnd.choice(CONTENT_TYPES)), body


REQUESTS = st.tuples(
    st.sampled_from(METHODS) | st.text(
        st.characters(min_codepoint=33, max_codepoint=126,
                      exclude_characters=":"), min_size=1, max_size=8),
    st.sampled_from(PATHS) | st.builds(
        "/hosts/{}/{}".format,
        st.text(st.characters(min_codepoint=33, max_codepoint=0x2ff),
                max_size=10),
        st.text(st.characters(min_codepoint=33, max_codepoint=126),
                max_size=10)),
    st.sampled_from(BODIES) | st.binary(max_size=100),
    st.sampled_from(["auto", None] + LENGTHS) | st.integers(-5, 200).map(str),
    st.lists(st.tuples(
        st.text(st.characters(min_codepoint=33, max_codepoint=126,
                              exclude_characters=":"), min_size=1,
                max_size=10),
        st.text(st.characters(min_codepoint=32, max_codepoint=255),
                max_size=30)), max_size=3),
    st.sampled_from(CONTENT_TYPES))


@budget.fuzz_settings(short=150)
@given(request=REQUESTS, rnd=st.randoms(use_true_random=False))
def test_random_requests(counter, request, rnd):
    s = served()
    method, path, body, length, extra, ctype = request
    counter()
    s.check(method, path, _headers(len(body), extra, length, ctype), body)
    for _ in range(budget.BATCH):
        counter()
        s.check(*_gen_request(rnd))


# -- defects the fuzzing found (each failed before the server's fix) --------

@pytest.mark.parametrize("method,path,length,body", [
    ("POST", "/hosts/compute-0/suspend", "abc", b"{}"),       # ValueError
    ("POST", "/hosts/compute-0/suspend", "-1", b"{}"),        # read to EOF
    ("POST", "/storm/resume", "99999999999999999999", b"{}"),  # MemoryError
    ("PUT", "/status", "auto", b""),                          # 501
    ("DELETE", "/hosts/compute-0/suspend", "auto", b""),      # 501
    ("POST", "/hosts/compute-0/suspend", "auto",              # OverflowError
     b'{"reason": "x", "seconds": ' + b"9" * 400 + b"}"),
    ("POST", "/hosts/compute-0/suspend", "auto",              # RecursionError
     b"[" * 3000 + b"]" * 3000),
    ("POST", "/hosts/compute-0/suspend", "50", b"{}"),        # short body
], ids=["length_text", "length_negative", "length_huge", "put", "delete",
        "seconds_huge_int", "deep_json", "short_body"])
def test_defect_requests_answered_4xx(method, path, length, body):
    s = served()
    status = s.check(method, path, _headers(len(body), [], length), body)
    assert 400 <= status < 500


@pytest.mark.parametrize("ctype", [
    None, "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x"])
def test_a_cross_site_form_post_is_refused_415(ctype):
    s = served()
    body = b'{"reason": "x", "forever": true}'
    status = s.check("POST", "/hosts/compute-0/suspend",
                     _headers(len(body), [], "auto", ctype), body)
    assert status == 415
