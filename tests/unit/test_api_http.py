"""The operator API over HTTP: cheroot's WSGI server on a loopback port,
WebOb in front of the same handler the other tests call directly."""

import json
import socket

import pytest
from oslo_config import cfg

from functional import httpcall
from instanceha import conf as conf_pkg
from instanceha.api.server import OperatorAPI
from instanceha.cmd import main as cli
from instanceha import service as service_mod
from tests.unit.test_engine import World


def tcp_only(conf):
    """The whole API on a loopback TCP port without authentication, no
    unix socket: said explicitly (the default serves commands on the
    socket only; tests/unit/test_api_transport.py)."""
    conf.set_override("port", 0, "api")
    conf.set_override("unix_socket", "", "api")
    conf.set_override("allow_unauthenticated_tcp", True, "api")


@pytest.fixture
def served():
    w = World()
    w.pass_()
    tcp_only(w.conf)
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    yield w, api
    api.stop()


def _call(api, method, path, body=None, ctype="application/json",
          headers=None):
    headers = dict(headers or {})
    if ctype is not None:
        headers["Content-Type"] = ctype
    return httpcall.request("http://127.0.0.1:%d%s" % (api.port, path),
                            method, body, headers, timeout=5)


def _raw(api, data):
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_command_over_http_acts(served):
    w, api = served
    status, headers, body = _call(api, "POST", "/hosts/compute-0/suspend",
                                  b'{"reason": "bios", "forever": true}')
    assert status == 202, body
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["until"] is None
    w.drain()
    assert w.state("compute-0") == ("suspended",
                                    "suspended by operator: bios")


def test_reads_answer_json_and_head_has_no_body(served):
    w, api = served
    status, _, body = _call(api, "GET", "/status", ctype=None)
    assert status == 200 and len(json.loads(body)["hosts"]) == 3
    status, headers, body = _call(api, "HEAD", "/status", ctype=None)
    assert status == 200 and body == b""
    assert int(headers["Content-Length"]) > 0
    status, _, body = _call(api, "GET", "/metrics", ctype=None)
    assert status == 200 and b"instanceha_hosts" in body


@pytest.mark.parametrize("ctype", [
    None, "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz", "application/jsonp"])
def test_a_command_not_declared_json_is_refused_415(served, ctype):
    w, api = served
    status, _, body = _call(api, "POST", "/hosts/compute-0/maintenance",
                            b'{"reason": "x"}', ctype=ctype)
    assert status == 415, body
    assert b"application/json" in body
    w.drain()
    assert w.state("compute-0")[0] == "active"


def test_json_with_a_charset_is_accepted(served):
    w, api = served
    status, _, body = _call(api, "POST", "/hosts/compute-1/maintenance",
                            b'{"reason": "x"}',
                            ctype="application/json; charset=utf-8")
    assert status == 202, body


def test_bad_requests_are_4xx_with_a_message_never_a_traceback(served):
    w, api = served
    head = (b"POST /hosts/compute-0/resume HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n")
    for length, body, code, text in [
            (b"-1", b"{}", b"400", b"bad Content-Length"),
            (b"\xd9\xa1", b"{}", b"400", b"Content-Length"),
            (b"50", b"{}", b"400", b"shorter than its Content-Length"),
            (b"99999999", b"{}", b"413", b"")]:
        answer = _raw(api, head + b"Content-Length: " + length + b"\r\n\r\n"
                      + body)
        assert answer.split(b" ")[1] == code, answer
        assert text in answer and b"Traceback" not in answer, answer
    status, _, body = _call(api, "POST", "/hosts/nope/suspend",
                            b'{"forever": true}')
    assert status == 404 and b"unknown host 'nope'" in body
    status, _, body = _call(api, "POST", "/hosts/compute-0/suspend", b"{x")
    assert status == 400 and b"bad request body" in body
    status, headers, body = _call(api, "DELETE", "/hosts/compute-0/suspend")
    assert status == 405 and headers["Allow"] == "POST"
    status, _, body = _call(api, "GET", "/nothing", ctype=None)
    assert status == 404 and b"no such endpoint" in body
    assert w.engine.snapshot()["hosts"][0]["state"] == "active"


def test_a_body_over_the_limit_is_refused_unread(served):
    w, api = served
    big = b'{"reason": "' + b"x" * 70000 + b'"}'
    status, _, body = _call(api, "POST", "/hosts/compute-0/maintenance", big)
    assert status == 413


def test_port_zero_is_chosen_and_known_after_stop():
    w = World()
    tcp_only(w.conf)
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.bind()
    port = api.port
    assert port > 0
    api.stop()
    assert api.port == port
    again = socket.socket()
    again.bind(("127.0.0.1", port))       # closed again
    again.close()


def test_a_taken_port_says_the_cause():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        w = World()
        tcp_only(w.conf)
        w.conf.set_override("port", taken.getsockname()[1], "api")
        api = OperatorAPI(w.conf, w.engine, w.clock)
        with pytest.raises(OSError) as err:
            api.bind()
        assert "Address already in use" in str(err.value)
    finally:
        taken.close()


@pytest.mark.parametrize("address", ["0.0.0.0", "10.0.0.5", "::",
                                     "compute.example"])
def test_noauth_off_loopback_refuses_to_start(address):
    conf = conf_pkg.make({"api": {"listen_address": address}})
    with pytest.raises(service_mod.ConfigError) as err:
        OperatorAPI(conf, World().engine, lambda: 0.0)
    assert str(err.value).startswith(
        "[api] auth_strategy = noauth is only allowed on a loopback "
        "listen_address, not %s" % address)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "localhost",
                                     "127.0.0.53"])
def test_noauth_on_loopback_is_allowed(address):
    conf = conf_pkg.make({"api": {"listen_address": address}})
    OperatorAPI(conf, World().engine, lambda: 0.0)


def test_noauth_off_loopback_stops_the_cli_with_one_line(tmp_path, capsys):
    path = tmp_path / "instanceha.conf"
    path.write_text("[api]\nlisten_address = 0.0.0.0\n")
    assert cli.main(["run", "--config-file", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["instanceha: configuration error: [api] auth_strategy = "
                   "noauth is only allowed on a loopback listen_address, "
                   "not 0.0.0.0: set [api] auth_strategy = keystone (and "
                   "[keystone_authtoken]) or listen on 127.0.0.1"]


def test_keystone_off_loopback_is_allowed_by_the_config_check():
    conf = conf_pkg.make({"api": {"listen_address": "0.0.0.0",
                                  "auth_strategy": "keystone"}})
    from instanceha.conf import api as api_conf
    assert api_conf.check_listener(conf) is None
    with pytest.raises(cfg.Error):
        api_conf.validate(conf_pkg.make({"api": {
            "listen_address": "0.0.0.0"}}))


@pytest.mark.parametrize("host,code", [
    (b"127.0.0.1", b"200"), (b"127.0.0.1:7411", b"200"),
    (b"localhost:80", b"200"), (b"[::1]:7411", b"200"),
    (b"evil.example", b"403"), (b"evil.example:7411", b"403"),
    (b"10.0.0.1", b"403")])
def test_without_auth_only_loopback_host_names_are_answered(served, host,
                                                            code):
    """DNS rebinding: a web page whose name resolves to 127.0.0.1 is
    same-origin for the browser, but its Host header is its own name."""
    w, api = served
    body = b'{"forever": true}'
    answer = _raw(api, b"POST /hosts/compute-0/suspend HTTP/1.1\r\nHost: "
                  + host + b"\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
    status = answer.split(b" ")[1]
    assert status == (b"202" if code == b"200" else code), answer
    answer = _raw(api, b"GET /status HTTP/1.1\r\nHost: " + host
                  + b"\r\n\r\n")
    assert answer.split(b" ")[1] == code, answer
    w.drain()
    assert (w.state("compute-0")[0] == "suspended") == (code == b"200")


def _socket_dir(tmp_path, mode=0o750):
    d = tmp_path / "run"
    d.mkdir()
    d.chmod(mode)
    return d


def test_a_unix_socket_serves_noauth_and_the_cli_uses_it(tmp_path, capsys):
    d = _socket_dir(tmp_path)
    path = str(d / "api.sock")
    w = World()
    w.pass_()
    # No TCP listener at all: a public listen_address does not matter.
    w.conf.set_override("listen_tcp", False, "api")
    w.conf.set_override("listen_address", "0.0.0.0", "api")
    w.conf.set_override("unix_socket", path, "api")
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    try:
        import os
        import stat
        assert api.port is None
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        conf_file = tmp_path / "instanceha.conf"
        conf_file.write_text("[DEFAULT]\nstatus_file = %s\n[api]\n"
                             "unix_socket = %s\n" % (tmp_path / "no.json",
                                                     path))
        code = cli.main(["suspend", "compute-2", "--forever", "--reason",
                         "psu", "--config-file", str(conf_file)])
        assert code == 0, capsys.readouterr().err
        w.drain()
        assert w.state("compute-2") == ("suspended",
                                        "suspended by operator: psu")
    finally:
        api.stop()
    import os
    assert not os.path.exists(path)


def _refused_at_bind(conf):
    """The StartupError binding ``conf``'s API raises; the TCP port it
    bound first is closed again."""
    conf.set_override("port", 0, "api")
    api = OperatorAPI(conf, World().engine, lambda: 0.0)
    with pytest.raises(service_mod.StartupError) as err:
        api.bind()
    again = socket.socket()
    again.bind(("127.0.0.1", api.port))
    again.close()
    return str(err.value)


@pytest.mark.parametrize("mode,says", [
    (0o755, "is open to other users (mode 0755)"),
    (0o701, "is open to other users (mode 0701)")])
def test_a_unix_socket_in_an_open_directory_refuses_to_start(tmp_path, mode,
                                                             says):
    d = _socket_dir(tmp_path, mode)
    conf = conf_pkg.make({"api": {"unix_socket": str(d / "api.sock")}})
    why = _refused_at_bind(conf)
    assert says in why and why.startswith("operator API: [api] unix_socket")


def test_a_unix_socket_path_holding_a_file_refuses_to_start(tmp_path):
    d = _socket_dir(tmp_path, 0o700)
    (d / "api.sock").write_text("precious")
    conf = conf_pkg.make({"api": {"unix_socket": str(d / "api.sock")}})
    assert _refused_at_bind(conf).endswith("exists and is not a socket")
    assert (d / "api.sock").read_text() == "precious"
