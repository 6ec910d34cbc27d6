"""Which listener serves what: by default the whole operator API is on a
unix socket whose directory keeps other users out, and loopback TCP
without authentication serves only the open reads (/healthz, /readyz,
/metrics). Any local process reaches a loopback port (every
host-networked container on a controller), so it must not be able to
suspend a host --forever or lift a storm hold."""

import json
import os

import pytest

from functional import httpcall
from instanceha import conf as conf_pkg
from instanceha import service as service_mod
from instanceha.api import client
from instanceha.api.server import OperatorAPI
from instanceha.cmd import main as cli
from instanceha.conf import api as api_conf
from tests.unit.test_engine import World

FOREVER = b'{"reason": "any local process", "forever": true}'


def _socket_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir(mode=0o750)
    d.chmod(0o750)
    return d


def _tcp(api, method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None \
        else {}
    status, _, raw = httpcall.request(
        "http://127.0.0.1:%d%s" % (api.port, path), method, body, headers,
        timeout=5)
    return status, json.loads(raw) if raw.startswith(b"{") else raw


@pytest.fixture
def default_api(tmp_path):
    """The API as configured by default, but for its socket's directory
    (tmp_path instead of /run/instanceha) and a free TCP port."""
    w = World()
    w.pass_()
    path = str(_socket_dir(tmp_path) / "api.sock")
    w.conf.set_override("unix_socket", path, "api")
    w.conf.set_override("port", 0, "api")
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    yield w, api, path
    api.stop()


def test_the_default_listener_is_the_unix_socket():
    conf = conf_pkg.make({})
    assert conf.api.unix_socket == "/run/instanceha/api.sock"
    assert conf.api.auth_strategy == "noauth"
    assert api_conf.tcp_serves_commands(conf) is False
    # The CLI goes there too.
    assert client.api_url(conf) == "unix:/run/instanceha/api.sock"


@pytest.mark.parametrize("api,commands", [
    ({}, False),
    ({"allow_unauthenticated_tcp": True}, True),
    ({"auth_strategy": "keystone"}, True),
    ({"auth_strategy": "keystone", "listen_tcp": False}, False),
    ({"allow_unauthenticated_tcp": True, "listen_tcp": False}, False)])
def test_tcp_serves_commands_only_with_keystone_or_an_explicit_opt_in(
        api, commands):
    assert api_conf.tcp_serves_commands(conf_pkg.make({"api": api})) \
        is commands


@pytest.fixture
def default_tcp():
    """The TCP listener exactly as by default (loopback, noauth), on a
    free port; no socket."""
    w = World()
    w.pass_()
    w.conf.set_override("unix_socket", "", "api")
    w.conf.set_override("port", 0, "api")
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    yield w, api
    api.stop()


def test_a_local_process_cannot_switch_ha_off_over_tcp(default_tcp):
    w, api = default_tcp
    for path in ("/hosts/compute-0/suspend", "/hosts/compute-1/maintenance"):
        status, answer = _tcp(api, "POST", path, FOREVER)
        assert status == 403, answer
        assert "use the unix socket" in answer["error"]
    w.engine.acknowledge_storm = lambda reason: pytest.fail("storm lifted")
    status, answer = _tcp(api, "POST", "/storm/resume", b"{}")
    assert status == 403, answer
    assert _tcp(api, "GET", "/status")[0] == 403
    assert _tcp(api, "GET", "/hosts/compute-0/history")[0] == 403
    w.drain()
    assert w.state("compute-0")[0] == "active"
    assert w.state("compute-1")[0] == "active"
    # Probes and Prometheus still read over TCP.
    assert _tcp(api, "GET", "/healthz")[0] == 200
    status, body = _tcp(api, "GET", "/metrics")
    assert status == 200 and b"instanceha_hosts" in body


def test_the_socket_names_itself_in_the_tcp_refusal(default_api):
    w, api, path = default_api
    status, answer = _tcp(api, "POST", "/storm/resume", b"{}")
    assert status == 403
    assert "use the unix socket %s" % path in answer["error"]
    assert _tcp(api, "GET", "/healthz")[0] == 200


def test_the_cli_commands_through_the_socket_by_default(default_api,
                                                        tmp_path, capsys):
    w, api, path = default_api
    conf_file = tmp_path / "instanceha.conf"
    conf_file.write_text("[DEFAULT]\nstatus_file = %s\n[api]\n"
                         "unix_socket = %s\n" % (tmp_path / "no.json", path))
    code = cli.main(["suspend", "compute-2", "--forever", "--reason", "psu",
                     "--config-file", str(conf_file)])
    assert code == 0, capsys.readouterr().err
    w.drain()
    assert w.state("compute-2") == ("suspended", "suspended by operator: psu")


def test_unauthenticated_tcp_commands_need_the_explicit_option(tmp_path):
    w = World()
    w.pass_()
    for key, value in (("unix_socket", ""), ("port", 0),
                       ("allow_unauthenticated_tcp", True)):
        w.conf.set_override(key, value, "api")
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    try:
        assert _tcp(api, "POST", "/hosts/compute-0/suspend",
                    FOREVER)[0] == 202
        assert _tcp(api, "GET", "/status")[0] == 200
    finally:
        api.stop()
    w.drain()
    assert w.state("compute-0")[0] == "suspended"


def _load(tmp_path, text):
    path = tmp_path / "instanceha.conf"
    path.write_text(text)
    return conf_pkg.load(["--config-file", str(path)])


@pytest.mark.parametrize("text", ["[api]\nport = 7411\n",
                                  "[api]\nlisten_address = 127.0.0.1\n"])
def test_an_operator_who_set_the_tcp_port_is_told_what_to_add(tmp_path,
                                                              text):
    """An upgrade from when TCP was the only listener: the start goes on
    (HA stays on) and one warning says where commands went and what keeps
    them on TCP."""
    (warning,) = api_conf.listener_warnings(_load(tmp_path, text))
    assert warning.startswith("[api] listen_address/port: without "
                              "authentication TCP now serves only "
                              "/healthz, /readyz, /metrics")
    assert "unix socket /run/instanceha/api.sock" in warning
    assert "[api] allow_unauthenticated_tcp = true" in warning
    assert "= false to keep TCP to the open reads" in warning
    assert "[api] auth_strategy = keystone" in warning
    assert api_conf.listener_warnings(_load(tmp_path, "")) == []
    # Deciding either way, explicitly, silences it.
    for decided in ("true", "false"):
        assert api_conf.listener_warnings(_load(
            tmp_path, text + "allow_unauthenticated_tcp = %s\n"
            % decided)) == []


def test_no_listener_for_commands_is_warned_about(tmp_path):
    warnings = api_conf.listener_warnings(_load(tmp_path,
                                                "[api]\nunix_socket =\n"))
    assert warnings == ["[api] unix_socket is empty and TCP serves only "
                        "/healthz, /readyz, /metrics: no listener accepts "
                        "operator commands"]


def test_nothing_to_serve_is_refused(tmp_path):
    conf = conf_pkg.make({"api": {"unix_socket": "", "listen_tcp": False}})
    with pytest.raises(service_mod.ConfigError) as err:
        OperatorAPI(conf, World().engine, lambda: 0.0)
    assert str(err.value).startswith("[api] unix_socket is empty and [api] "
                                     "listen_tcp = false")


def test_a_missing_socket_directory_says_what_makes_it(tmp_path):
    why = api_conf.check_unix_socket(str(tmp_path / "nope" / "api.sock"))
    assert "No such file or directory" in why
    assert "RuntimeDirectory=instanceha" in why


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_socket_directory_of_another_user_is_refused(tmp_path):
    d = _socket_dir(tmp_path)
    os.chown(d, 4321, 4321)
    why = api_conf.check_unix_socket(str(d / "api.sock"))
    assert why.endswith("belongs to uid 4321, neither this service's user "
                        "nor root: its owner could replace the socket")


def test_a_socket_path_too_long_for_the_kernel_is_refused(tmp_path):
    d = _socket_dir(tmp_path)
    path = str(d / ("x" * 120))
    assert "longer than 107 bytes" in api_conf.check_unix_socket(path)


def test_a_socket_another_instance_serves_is_not_taken_over(default_api):
    """Two services configured with one socket path: the second would
    replace the first's socket, and the CLI would command the wrong one."""
    w, api, path = default_api
    conf = conf_pkg.make({"api": {"unix_socket": path, "port": 0}})
    second = OperatorAPI(conf, World().engine, lambda: 0.0)
    try:
        with pytest.raises(service_mod.StartupError) as err:
            second.bind()
    finally:
        second.stop()
    assert str(err.value) == (
        "operator API: [api] unix_socket %s: another process serves it (a "
        "second instanceha on this machine?): give each its own path"
        % path)
    # The first still answers on it.
    conn = client.UnixConnection(path, 5)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_an_old_socket_nobody_serves_is_replaced(tmp_path):
    import socket
    d = _socket_dir(tmp_path)
    path = str(d / "api.sock")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(path)
    old.close()            # left behind by a killed process
    conf = conf_pkg.make({"api": {"unix_socket": path, "port": 0}})
    api = OperatorAPI(conf, World().engine, lambda: 0.0)
    api.bind()
    api.stop()
    assert not os.path.exists(path)
