"""The OpenStackClient plugin: its entry points and how it finds the
operator API (the Keystone catalog's ``instanceha`` endpoint on the user's
own session)."""

import argparse
import inspect
import importlib.metadata

from keystoneauth1 import exceptions as ks_exc
from osc_lib import exceptions
import pytest

from instanceha.osc import plugin
from tests.unit.osc.fakes import ENDPOINT, FakeSession

COMMANDS = {
    "instanceha_host_list": "ListHost",
    "instanceha_host_show": "ShowHost",
    "instanceha_host_suspend": "SuspendHost",
    "instanceha_host_resume": "ResumeHost",
    "instanceha_host_maintenance": "MaintenanceHost",
    "instanceha_host_drain": "DrainHost",
    "instanceha_host_history": "HostHistory",
    "instanceha_storm_resume": "ResumeStorm",
    "instanceha_server_repair": "RepairServer",
    "instanceha_server_repair_show": "ShowServerRepair",
}


def _group(name):
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=name)
            if ep.value.startswith("instanceha.")}


def test_the_plugin_and_its_commands_are_registered():
    ext = _group("openstack.cli.extension")
    assert ext["instanceha"].load() is plugin
    cmds = _group("openstack.instanceha.v1")
    assert {n: ep.value.split(":")[1] for n, ep in cmds.items()} == COMMANDS
    for ep in cmds.values():
        assert callable(ep.load().take_action)


def test_the_plugin_module_has_what_openstackclient_reads():
    assert plugin.API_NAME == "instanceha"
    assert plugin.API_VERSION_OPTION == "os_instanceha_api_version"
    assert plugin.DEFAULT_API_VERSION in plugin.API_VERSIONS
    parser = plugin.build_option_parser(argparse.ArgumentParser())
    assert parser.parse_args(
        ["--os-instanceha-api-version", "1"]).os_instanceha_api_version == "1"


class Manager:
    """osc-lib's ClientManager as make_client reads it."""

    def __init__(self, endpoint=None, missing=False):
        self.session = FakeSession()
        self.region_name = "RegionOne"
        self.interface = "public"
        self.endpoint, self.missing, self.asked = endpoint, missing, []

    def get_endpoint_for_service_type(self, service_type, region_name=None,
                                      interface="public"):
        self.asked.append((service_type, region_name, interface))
        if self.missing:
            raise ks_exc.EndpointNotFound("no endpoint")
        return self.endpoint


def test_the_client_uses_the_users_session_and_the_catalogs_endpoint():
    m = Manager(endpoint=ENDPOINT + "/")
    api = plugin.make_client(m)
    assert m.asked == [("instanceha", "RegionOne", "public")]
    assert api.session is m.session and api.base == ENDPOINT
    api.status()
    assert m.session.requests[0]["url"] == ENDPOINT + "/status"


@pytest.mark.parametrize("manager", [Manager(missing=True), Manager()])
def test_no_endpoint_in_the_catalog_is_said(manager):
    with pytest.raises(exceptions.CommandError) as err:
        plugin.make_client(manager)
    text = str(err.value)
    assert text.startswith("no 'instanceha' endpoint in the Keystone catalog "
                           "(region RegionOne, interface public)")
    assert "instanceha_endpoint_override" in text


def test_the_client_manager_gives_the_plugin_its_client():
    # What openstackclient does with the entry point: a cached attribute
    # of its ClientManager named API_NAME.
    from openstackclient.common import clientmanager
    assert plugin in clientmanager.PLUGIN_MODULES
    cache = inspect.getattr_static(clientmanager.ClientManager, "instanceha")
    assert cache.factory is plugin.make_client
