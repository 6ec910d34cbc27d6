"""[api] auth_strategy = keystone: keystonemiddleware's auth_token in front
of the API (its token validation replaced by keystonemiddleware's own
AuthTokenFixture: no Keystone here), then the oslo.policy rules."""

import json

import pytest
from keystonemiddleware import fixture as ksm_fixture

from functional import httpcall
from instanceha import conf as conf_pkg
from instanceha import service as service_mod
from instanceha.api import auth
from instanceha.api import client
from instanceha.api.server import OperatorAPI
from instanceha.cmd import main as cli
from tests.unit.test_engine import World

ADMIN, MEMBER, READER = "admin-token-1", "member-token-2", "reader-token-3"
AUTHTOKEN = {"auth_type": "password", "auth_url": "http://192.0.2.1:5000/v3",
             "username": "instanceha", "password": "not-used-here",
             "project_name": "service", "user_domain_name": "Default",
             "project_domain_name": "Default",
             "www_authenticate_uri": "http://192.0.2.1:5000/v3"}


def keystone_conf(**api):
    return conf_pkg.make({"api": dict({"auth_strategy": "keystone"}, **api),
                          "keystone_authtoken": AUTHTOKEN})


@pytest.fixture
def tokens():
    fx = ksm_fixture.AuthTokenFixture()
    fx.setUp()
    fx.add_token_data(token_id=ADMIN, user_id="u-admin", project_id="p",
                      role_list=["admin", "member", "reader"])
    fx.add_token_data(token_id=MEMBER, user_id="u-member", project_id="p",
                      role_list=["member", "reader"])
    fx.add_token_data(token_id=READER, user_id="u-reader", project_id="p",
                      role_list=["reader"])
    yield fx
    fx.cleanUp()


def _serve(tokens, **api):
    w = World()
    w.pass_()
    w.conf.set_override("port", 0, "api")
    w.conf.set_override("unix_socket", "", "api")     # TCP only
    w.conf.set_override("auth_strategy", "keystone", "api")
    for key, value in AUTHTOKEN.items():
        w.conf.set_override(key, value, "keystone_authtoken")
    for key, value in api.items():
        w.conf.set_override(key, value, "api")
    server = OperatorAPI(w.conf, w.engine, w.clock)
    server.start()
    return w, server


@pytest.fixture(autouse=True)
def file_journal(monkeypatch, tmp_path):
    """The World's journal in a file: the server's threads read it too (an
    in-memory SQLite database is one per thread)."""
    from instanceha.journal import Journal
    from tests.unit import test_engine
    url = "sqlite:///%s" % (tmp_path / "journal.db")
    monkeypatch.setattr(test_engine, "Journal", lambda _url: Journal(url))


@pytest.fixture
def served(tokens):
    w, api = _serve(tokens)
    yield w, api
    api.stop()


def _call(api, method, path, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Auth-Token"] = token
    status, _, raw = httpcall.request(
        "http://127.0.0.1:%d%s" % (api.port, path), method, body, headers,
        timeout=5)
    return status, raw


SUSPEND = b'{"reason": "r", "forever": true}'


def test_a_command_needs_a_token_and_the_admin_role(served, caplog):
    w, api = served
    path = "/hosts/compute-0/suspend"
    for token in (None, "not-a-token"):
        status, body = _call(api, "POST", path, token, SUSPEND)
        assert status == 401, body
    status, body = _call(api, "POST", path, MEMBER, SUSPEND)
    assert status == 403 and b"instanceha:host:suspend" in body
    status, body = _call(api, "POST", path, READER, SUSPEND)
    assert status == 403
    w.drain()
    assert w.state("compute-0")[0] == "active"      # nothing happened
    status, body = _call(api, "POST", path, ADMIN, SUSPEND)
    assert status == 202, body
    w.drain()
    assert w.state("compute-0")[0] == "suspended"
    for token in (ADMIN, MEMBER, READER):
        assert token not in caplog.text


def test_status_and_history_need_a_token(served):
    w, api = served
    for path in ("/status", "/hosts/compute-0/history"):
        assert _call(api, "GET", path)[0] == 401
        assert _call(api, "GET", path, MEMBER)[0] == 403
        status, body = _call(api, "GET", path, ADMIN)
        assert status == 200, body


def test_health_and_metrics_are_open_unless_configured(tokens):
    w, api = _serve(tokens)
    try:
        assert _call(api, "GET", "/healthz")[0] == 200
        assert _call(api, "GET", "/metrics")[0] == 200
    finally:
        api.stop()
    w, api = _serve(tokens, public_health_and_metrics=False)
    try:
        assert _call(api, "GET", "/healthz")[0] == 401
        assert _call(api, "GET", "/metrics")[0] == 401
        assert _call(api, "GET", "/metrics", MEMBER)[0] == 403
        assert _call(api, "GET", "/metrics", ADMIN)[0] == 200
    finally:
        api.stop()


def test_a_policy_file_changes_who_may(tokens, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"instanceha:status:read": "role:reader"\n'
                      '"instanceha:host:maintenance": "role:member"\n')
    w = World()
    w.pass_()
    w.conf.set_override("policy_file", str(policy), "oslo_policy")
    w.conf.set_override("port", 0, "api")
    w.conf.set_override("unix_socket", "", "api")     # TCP only
    w.conf.set_override("auth_strategy", "keystone", "api")
    for key, value in AUTHTOKEN.items():
        w.conf.set_override(key, value, "keystone_authtoken")
    api = OperatorAPI(w.conf, w.engine, w.clock)
    api.start()
    try:
        assert _call(api, "GET", "/status", READER)[0] == 200
        assert _call(api, "POST", "/hosts/compute-1/maintenance", MEMBER,
                     b"{}")[0] == 202
        assert _call(api, "POST", "/hosts/compute-0/suspend", MEMBER,
                     SUSPEND)[0] == 403      # not overridden: admin
    finally:
        api.stop()


def test_a_broken_policy_file_stops_the_start(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"instanceha:status:read": [unclosed\n')
    conf = keystone_conf()
    conf.set_override("policy_file", str(policy), "oslo_policy")
    with pytest.raises(service_mod.ConfigError) as err:
        OperatorAPI(conf, World().engine, lambda: 0.0)
    assert str(err.value).startswith("[oslo_policy] policy_file %s: "
                                     % policy)


def test_without_a_confirmed_identity_nothing_passes_policy():
    """Defence in depth: were the middleware set to delay its decision,
    a request it did not confirm is still refused."""
    api = OperatorAPI(keystone_conf(), World().engine, lambda: 0.0)
    resp = api.app._authorized({"instanceha.rule": "instanceha:status:read",
                                "REQUEST_METHOD": "GET",
                                "PATH_INFO": "/status",
                                "HTTP_X_IDENTITY_STATUS": "Invalid",
                                "HTTP_X_ROLES": "admin"})
    assert resp.status_int == 401


def test_the_middleware_never_delays_its_decision():
    conf = keystone_conf()
    conf.set_override("delay_auth_decision", True, "keystone_authtoken")
    private = auth._middleware_conf(conf)
    assert private.keystone_authtoken.delay_auth_decision is False
    assert private.keystone_authtoken.www_authenticate_uri == \
        AUTHTOKEN["www_authenticate_uri"]
    assert private.keystone_authtoken.username == "instanceha"


@pytest.mark.parametrize("authtoken,says", [
    ({}, "[keystone_authtoken] auth_type is not set"),
    ({"auth_type": "password"}, "[keystone_authtoken]: "),
    ({"auth_type": "no-such-plugin"}, "[keystone_authtoken] auth_type "
                                      "no-such-plugin: ")])
def test_keystone_without_an_account_stops_the_start(authtoken, says):
    conf = conf_pkg.make({"api": {"auth_strategy": "keystone"},
                          "keystone_authtoken": authtoken})
    with pytest.raises(service_mod.ConfigError) as err:
        OperatorAPI(conf, World().engine, lambda: 0.0)
    assert str(err.value).startswith(says), str(err.value)
    assert "\n" not in str(err.value)


def test_every_rule_is_registered_and_admin_by_default():
    names = {r.name for r in auth.RULES}
    assert {"instanceha:status:read", "instanceha:history:read",
            "instanceha:host:suspend", "instanceha:host:maintenance",
            "instanceha:host:resume", "instanceha:storm:resume"} <= names
    assert all(r.check_str == "rule:admin_api" for r in auth.RULES
               if r.name != "admin_api")


def test_the_cli_sends_a_token_from_clouds_yaml(tokens, tmp_path, capsys,
                                                monkeypatch):
    w, api = _serve(tokens)
    try:
        status = tmp_path / "status.json"
        status.write_text(json.dumps({"api": "http://127.0.0.1:%d"
                                      % api.port}))
        path = tmp_path / "instanceha.conf"
        path.write_text("[DEFAULT]\nstatus_file = %s\n[api]\n"
                        "auth_strategy = keystone\n" % status)
        asked = []

        class Conn:
            @property
            def auth_token(self):
                asked.append(True)
                return ADMIN
        from instanceha.drivers.compute import nova
        monkeypatch.setattr(nova, "connect", lambda conf: Conn())
        code = cli.main(["maintenance", "compute-1", "--reason", "bios",
                         "--config-file", str(path)])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert out.out.splitlines()[-1] == \
            "compute-1: maintenance requested (was active)"
        assert asked and ADMIN not in out.out + out.err
        w.drain()
        assert w.state("compute-1")[0] == "maintenance"
        # A token the policy refuses: said in one line, exit 1.
        monkeypatch.setattr(nova, "connect", lambda conf: type(
            "C", (), {"auth_token": MEMBER})())
        code = cli.main(["resume", "compute-1", "--config-file", str(path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1
        assert err == ["instanceha: resume refused (403): policy does not "
                       "allow instanceha:host:resume"]
    finally:
        api.stop()


def test_the_cli_says_when_it_gets_no_token(tmp_path, monkeypatch):
    conf = conf_pkg.make({"api": {"auth_strategy": "keystone"},
                          "DEFAULT": {"cloud": "overcloud"}})
    from instanceha.drivers.compute import nova

    def refused(conf):
        raise RuntimeError("The request you have made requires "
                           "authentication")
    monkeypatch.setattr(nova, "connect", refused)
    with pytest.raises(client.ClientError) as err:
        client.call(conf, "POST", "/hosts/x/resume", {})
    assert str(err.value).startswith("cannot get a Keystone token for "
                                     "cloud 'overcloud': ")
