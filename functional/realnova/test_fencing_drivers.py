"""Our fencing drivers against the real BMC peers, with the compute link.

A driver's power-off must reach the emulated BMC, and the BMC link must then
take that host's nova-compute down, as losing power would.
"""

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base, inventory, load_driver
from functional.peers import procs


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 20, "poll_interval": 0.2}})


def entry(bed, host):
    data = {"hosts": {host: bed.bmc(host).inventory_entry()}}
    return inventory.parse(data, fencing.FIELDS)[host]


@pytest.mark.parametrize("kind", ["ipmi", "redfish"])
def test_driver_fences_host_and_compute_dies(clean_bed, conf, kind):
    bed = clean_bed
    host = bed.hosts[1]
    bmc = bed.use_ipmi(host) if kind == "ipmi" else bed.use_redfish(host)
    driver = load_driver(kind, conf)
    bmc_entry = entry(bed, host)
    assert driver.power_state(bmc_entry) is base.PowerState.ON
    driver.power_off(bmc_entry)
    assert bmc.power_state() == "off"
    assert driver.power_state(bmc_entry) is base.PowerState.OFF
    procs.wait_until(lambda: not bed.cloud.compute_running(host), 10,
                     "killed by the BMC link", "bmclink")
    driver.power_off(bmc_entry)            # idempotent on an Off host
    driver.power_on(bmc_entry)
    procs.wait_until(lambda: bed.cloud.compute_running(host), 10,
                     "started by the BMC link", "bmclink")
    procs.wait_until(lambda: bed.cloud.service(host)["state"] == "up", 60,
                     "up again", "nova-compute-%s" % host,
                     bed.cloud.log_of("nova-compute-%s" % host))


@pytest.mark.parametrize("kind", ["ipmi", "redfish"])
def test_refused_power_off_is_fence_error_and_host_keeps_running(clean_bed, conf, kind):
    bed = clean_bed
    host = bed.hosts[1]
    if kind == "ipmi":
        bmc = bed.use_ipmi(host)
        bmc.refuse_power_off(True)
    else:
        bmc = bed.use_redfish(host)
        bmc.restart(refuse_power_off=True)
    bmc_entry = entry(bed, host)
    with pytest.raises(base.FenceError) as err:
        load_driver(kind, conf).power_off(bmc_entry)
    assert host in str(err.value)
    assert bmc_entry.password not in str(err.value)
    assert bmc.power_state() == "on"
    assert bed.cloud.compute_running(host)


def test_ipmi_password_never_on_command_line(clean_bed, conf):
    bed = clean_bed
    bmc = bed.use_ipmi(bed.hosts[2])
    bmc_entry = entry(bed, bed.hosts[2])
    argv = load_driver("ipmi", conf).argv(bmc_entry, "chassis", "power", "status")
    assert bmc.password not in " ".join(argv)
