"""The operator API behind the bed's real Keystone, for the tests that
call it with users' tokens (test_api_keystone.py) or through the
``openstack`` CLI (test_osc.py).

:func:`engine_overrides`: the engine's ``[api] auth_strategy = keystone``
with keystonemiddleware validating tokens as the ``instanceha`` user.
:func:`operator_endpoint`: the API's URL in the Keystone catalog under
service type ``instanceha`` while the ``with`` block runs (each engine
listens on a port of its own, so the bed registers none).
"""

import contextlib

from functional.peers.keystone import REGION

SERVICE_TYPE = "instanceha"


def engine_overrides(ks):
    """The engine's config groups for a Keystone-guarded operator API."""
    account = dict(ks.credentials("instanceha"))
    return {"api": {"auth_strategy": "keystone"},
            "keystone_authtoken": dict(account, auth_type="password",
                                       www_authenticate_uri=ks.url)}


@contextlib.contextmanager
def operator_endpoint(ks, url):
    """``url`` as the public and internal endpoints of service type
    ``instanceha`` (as the DevStack plugin registers it); the service and
    its endpoints removed after."""
    ks.add_endpoint(SERVICE_TYPE, "instanceha", url)
    try:
        yield url
    finally:
        services = ks.request("GET", "/services?type=%s"
                              % SERVICE_TYPE).json()["services"]
        for service in services:
            eps = ks.request("GET", "/endpoints?service_id=%s"
                             % service["id"]).json()["endpoints"]
            for ep in eps:
                ks.request("DELETE", "/endpoints/%s" % ep["id"])
            ks.request("DELETE", "/services/%s" % service["id"])


def openstack_env(base, credentials):
    """``base`` (os.environ) without any cloud of its own, plus the
    OS_* variables the ``openstack`` CLI authenticates with for
    ``credentials`` (Keystone.credentials(user))."""
    env = {k: v for k, v in base.items()
           if not k.startswith("OS_")}
    env.update({"OS_AUTH_URL": credentials["auth_url"],
                "OS_USERNAME": credentials["username"],
                "OS_PASSWORD": credentials["password"],
                "OS_PROJECT_NAME": credentials["project_name"],
                "OS_USER_DOMAIN_NAME": credentials["user_domain_name"],
                "OS_PROJECT_DOMAIN_NAME": credentials["project_domain_name"],
                "OS_IDENTITY_API_VERSION": "3", "OS_AUTH_TYPE": "password",
                "OS_REGION_NAME": REGION, "OS_INTERFACE": "public"})
    return env
