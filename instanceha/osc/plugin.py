"""The OpenStackClient plugin module: what ``openstack`` reads from the
``openstack.cli.extension`` entry point.

``make_client`` gives the commands the operator API client of
:mod:`instanceha.api.client`, on the user's keystoneauth session, at the
endpoint of service type ``instanceha`` in the Keystone catalog (for the
OSC's region and interface), or at ``instanceha_endpoint_override`` from
clouds.yaml.
"""

from osc_lib import exceptions
from osc_lib import utils

API_NAME = "instanceha"
API_VERSION_OPTION = "os_instanceha_api_version"
DEFAULT_API_VERSION = "1"
API_VERSIONS = ("1",)
#: The Keystone catalog's service type of the operator API (the DevStack
#: plugin registers it; doc/osc.md says how by hand).
SERVICE_TYPE = "instanceha"


def make_client(instance):
    """The API client for osc-lib's client manager ``instance``."""
    # Local: every openstack command imports this module; only ours need
    # the client (its logging and options cost ~0.1 s).
    from keystoneauth1 import exceptions as ks_exc

    from instanceha.api import client
    try:
        endpoint = instance.get_endpoint_for_service_type(
            SERVICE_TYPE, region_name=instance.region_name,
            interface=instance.interface)
    except ks_exc.EndpointNotFound:
        endpoint = None
    if not endpoint:
        raise exceptions.CommandError(
            "no %r endpoint in the Keystone catalog (region %s, interface "
            "%s): register the operator API's service and endpoint (see "
            "instanceha's doc/osc.md), or set instanceha_endpoint_override "
            "in clouds.yaml" % (SERVICE_TYPE, instance.region_name or "any",
                                instance.interface or "public"))
    return client.APIClient.from_session(instance.session, endpoint)


def build_option_parser(parser):
    """The plugin's global option: its API version (only 1)."""
    parser.add_argument(
        "--os-instanceha-api-version", metavar="<instanceha-api-version>",
        default=utils.env("OS_INSTANCEHA_API_VERSION"),
        help="instanceha operator API version, default=%s "
        "(Env: OS_INSTANCEHA_API_VERSION)" % DEFAULT_API_VERSION)
    return parser
