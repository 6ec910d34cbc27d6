# shellcheck shell=bash
# Pinned versions of the real peers. Changing a pin changes the cache key,
# so the next install builds a fresh venv next to the old one.
NOVA_VERSION=34.0.0
PLACEMENT_VERSION=16.0.0
PYMYSQL_VERSION=1.1.1
NOVA_PACKAGES=("nova==$NOVA_VERSION" "openstack-placement==$PLACEMENT_VERSION"
               "PyMySQL==$PYMYSQL_VERSION")
NOVA_KEY="$NOVA_VERSION-$PLACEMENT_VERSION-$PYMYSQL_VERSION"

SUSHY_TOOLS_VERSION=2.2.0
SUSHY_VERSION=5.14.0
SUSHY_PACKAGES=("sushy-tools==$SUSHY_TOOLS_VERSION" "sushy==$SUSHY_VERSION" "bcrypt")
SUSHY_KEY="$SUSHY_TOOLS_VERSION-$SUSHY_VERSION"

# Keystone of the same OpenStack series as Nova 34 / Placement 16 (2026.2),
# in a venv of its own (functional/peers/keystone.py).
KEYSTONE_VERSION=30.0.0
KEYSTONE_PACKAGES=("keystone==$KEYSTONE_VERSION" "PyMySQL==$PYMYSQL_VERSION")
KEYSTONE_KEY="$KEYSTONE_VERSION-$PYMYSQL_VERSION"
