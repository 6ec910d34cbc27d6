"""devstack/plugin.sh against the real-peer test bed in Keystone mode:
real Nova (fake computes) behind keystonemiddleware, a real Keystone
holding the admin password DevStack's variables name, real BMC emulators
(INSTANCEHA_BMC_INVENTORY, so real fencing, not noop). The generated
configuration runs the real service, which powers off and evacuates a
dead compute.

The bed is shared by the tests of the directories in
functional/peers/harness.py SUITES (started once, one xdist worker runs
them all). This directory is not one of them yet, so under xdist this test
could start a second bed beside the first: it runs only when the directory
is registered there, or alone with INSTANCEHA_DEVSTACK_ON_BED=1
(``pytest functional/devstack/test_plugin_realbed.py``).
"""

import os
import pathlib

import pytest
import yaml

from functional import waiting
from functional.devstack.test_plugin import Stack, _alive
from functional.peers import harness
from functional.realnova.engine import TIMINGS, boot_victims

HERE = pathlib.Path(__file__).resolve().parent


def _registered():
    return any(HERE == suite for suite in harness.SUITES)


@pytest.fixture
def keystone_bed():
    if not (_registered() or os.environ.get("INSTANCEHA_DEVSTACK_ON_BED")):
        pytest.skip("functional/devstack is not in harness.SUITES: run alone "
                    "with INSTANCEHA_DEVSTACK_ON_BED=1")
    bed = harness.testbed_or_missing(auth="keystone")
    try:
        yield bed
    finally:
        bed.restore()


class _Server:
    """The DevStack variables Stack reads, from the bed's Keystone."""

    region = "RegionOne"

    def __init__(self, bed):
        creds = bed.keystone.admin_credentials
        assert creds["auth_url"].endswith("/v3")
        self.url = creds["auth_url"][:-len("/v3")]
        self.password = creds["password"]

    @property
    def cloud(self):
        return self


def test_plugin_on_the_real_bed_fences_and_evacuates(tmp_path, keystone_bed):
    bed = keystone_bed
    ks = _Server(bed)
    inventory = tmp_path / "bed-bmc.yaml"
    inventory.write_text(yaml.safe_dump(bed.inventory()))
    stack = Stack(tmp_path, ks, INSTANCEHA_BMC_INVENTORY=str(inventory),
                  INSTANCEHA_FENCING_DRIVER="redfish",
                  INSTANCEHA_COMPUTE_HOSTS=" ".join(bed.hosts),
                  SERVICE_HOST="192.0.2.1", REGION_NAME="RegionOne",
                  KEYSTONE_SERVICE_URI=ks.url)
    # local.conf post-config: the bed's Nova timings.
    (tmp_path / "local.conf.lines").write_text("".join(
        "%s %s %s\n" % (group, key, value)
        for group, values in TIMINGS.items() if group != "api"
        for key, value in values.items()))
    host = bed.hosts[0]
    try:
        ids = boot_victims(bed, host)
        result = stack.run("install", "post-config", "local", "extra",
                           xtrace=True)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        assert "NOOP" not in out and ks.password not in out
        assert "RESULT: ready to recover" in out
        assert any(line.startswith("OK    nova: cloud 'devstack-instanceha'")
                   for line in result.stdout.splitlines()), result.stdout
        waiting.wait_for(lambda: len(stack.states()) >= len(bed.hosts), 60,
                         lambda: "the service to see every host; log:\n"
                         + stack.log()[-2000:])
        bed.cloud.kill_compute(host)
        waiting.wait_for(lambda: stack.states().get(host) == "evacuated",
                         150, lambda: "%s evacuated (%s); log:\n%s" % (
                             host, stack.states(), stack.log()[-3000:]))
        assert bed.bmc(host).power_state() == "off"
        bed.cloud.wait_servers(ids, timeout=60)
        for sid in ids:
            assert bed.cloud.server(sid)["OS-EXT-SRV-ATTR:host"] \
                not in (host, None)
        svc = bed.cloud.service(host)
        assert svc["forced_down"] is True and svc["status"] == "disabled"
        assert ks.password not in stack.log()
        pid = stack.pid()
        assert stack.run("unstack").returncode == 0
        waiting.wait_for(lambda: not _alive(pid), 15, "the service to stop")
        assert stack.run("clean").returncode == 0
        assert not stack.conf_dir.exists()
    finally:
        pid = stack.pid()
        if pid is not None and _alive(pid):
            os.kill(pid, 9)
