"""devstack/plugin.sh registers the operator API in Keystone's catalog
(service type ``instanceha``, where ``openstack instanceha`` looks) and
puts it behind Keystone, when DevStack runs Keystone. The DevStack
functions it calls are stand-ins that record their arguments."""

import pathlib
import shutil
import subprocess

import pytest

PLUGIN = pathlib.Path(__file__).resolve().parents[3] / "devstack" / "plugin.sh"

STUBS = r'''
calls() { echo "$*" >> "$LOG"; }
is_service_enabled() {
    local s; for s in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$s,"* ]] && return 0; done; return 1; }
trueorfalse() {
    local v=${!2:-$1}
    case "${v,,}" in 1|yes|true|on) echo True ;; *) echo False ;; esac; }
create_service_user() { calls create_service_user "$@"; }
get_or_create_service() { calls get_or_create_service "$@"; }
get_or_create_endpoint() { calls get_or_create_endpoint "$@"; }
configure_keystone_authtoken_middleware() {
    calls configure_keystone_authtoken_middleware "$@"; }
iniset() { calls iniset "$@"; }
'''


def _run(tmp_path, script, **env):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    log = tmp_path / "calls.log"
    log.write_text("")
    values = dict(LOG=str(log), SERVICE_HOST="192.0.2.10",
                  SERVICE_PROTOCOL="http", SERVICE_LISTEN_ADDRESS="0.0.0.0",
                  REGION_NAME="RegionOne", INSTANCEHA_API_PORT="7411",
                  INSTANCEHA_CONF="/etc/instanceha/instanceha.conf",
                  PATH="/usr/bin:/bin")
    values.update(env)
    out = subprocess.run(["bash", "-c", STUBS + 'source "%s"\n%s'
                          % (PLUGIN, script)], capture_output=True,
                         text=True, env=values, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout, log.read_text().splitlines()


def test_with_keystone_the_api_is_registered_and_takes_tokens(tmp_path):
    out, calls = _run(tmp_path, "instanceha_api_keystone && echo on\n"
                      "create_instanceha_accounts\n"
                      "configure_instanceha_api_keystone",
                      ENABLED_SERVICES="key,keystone,n-api")
    assert out == "on\n"
    conf = "/etc/instanceha/instanceha.conf"
    assert calls == [
        "create_service_user instanceha",
        "get_or_create_service instanceha instanceha instanceha operator "
        "API (instance high availability)",
        "get_or_create_endpoint instanceha RegionOne http://192.0.2.10:7411",
        "iniset %s api auth_strategy keystone" % conf,
        "iniset %s api listen_address 0.0.0.0" % conf,
        "configure_keystone_authtoken_middleware %s instanceha" % conf]


@pytest.mark.parametrize("env", [
    {"ENABLED_SERVICES": "n-api,n-cpu"},
    {"ENABLED_SERVICES": "keystone", "INSTANCEHA_API_KEYSTONE": "False"}])
def test_without_keystone_or_when_turned_off_nothing_is_registered(
        tmp_path, env):
    out, _calls = _run(tmp_path, "instanceha_api_keystone || echo off", **env)
    assert out == "off\n"


def test_an_ipv6_service_host_is_bracketed_in_the_endpoint(tmp_path):
    out, _calls = _run(tmp_path, "instanceha_api_url",
                       ENABLED_SERVICES="keystone", SERVICE_HOST="2001:db8::1")
    assert out == "http://[2001:db8::1]:7411\n"
