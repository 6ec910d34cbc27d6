"""The fencing drivers' hardware health read (proactive HA) against real
BMC peers: the Redfish driver against the sushy-tools emulator (its fake systems driver, over TLS with basic
auth): the System's Status, its chassis, the Thermal's fans and the
memory summary, as the emulator serves them.

sushy-tools reports every ``Status.Health`` as OK and cannot be told
otherwise: a degraded part is made by the peer's ``health`` extra, a WSGI
layer of ours that replaces one ``Health`` value in the emulator's own
answer (functional.peers.redfish). The degradation end to end (audit,
drain, never fenced) is tested on the simulator's Redfish:
functional/sim/test_proactive.py.

The IPMI driver against OpenIPMI's ipmi_sim: it serves no sensor records
(its SDR repository is empty here), so its health is told by its event
log, which ``ipmitool sel add`` fills as a BMC would on a fault.
"""

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import inventory, load_driver
from instanceha.drivers.fencing.health import Severity
from functional.peers import harness, ipmi, redfish
from functional.peers.errors import PeerMissing


@pytest.fixture
def bmc(tmp_path):
    try:
        peer = redfish.RedfishBMC("compute-h", tmp_path, health=True)
        peer.start()
    except PeerMissing as e:
        harness.handle_missing(e)
    yield peer
    peer.stop()


def entry(peer):
    return inventory.parse({"hosts": {peer.host: peer.inventory_entry()}},
                           fencing.FIELDS)[peer.host]


def driver():
    return load_driver("redfish", iha_conf.make({"fencing": {
        "timeout": 10, "poll_interval": 0.1, "retries": 2}}))


def test_health_read_from_the_emulator(bmc):
    d, e = driver(), entry(bmc)
    found = d.health(e)
    assert found is not None
    assert found.severity is Severity.OK and found.components == ()

    system = bmc._get(bmc.system_path).json()
    chassis_path = system["Links"]["Chassis"][0]["@odata.id"]
    chassis = bmc._get(chassis_path).json()
    thermal_path = chassis["Thermal"]["@odata.id"]
    fans = bmc._get(thermal_path).json()["Fans"]
    assert fans, "the emulator's Thermal lists fans"

    bmc.set_health(thermal_path, "Critical", member=("Fans", 0))
    bmc.set_health(bmc.system_path, "Warning")
    found = d.health(e)
    assert found.severity is Severity.CRITICAL
    names = {c.name: c.severity for c in found.components}
    fan = "fan %s" % (fans[0].get("Name") or fans[0].get("MemberId"))
    assert names == {"system": Severity.WARNING, fan: Severity.CRITICAL}, \
        names
    assert "Redfish Status.Health Critical" in found.why()

    bmc.set_health(thermal_path, "OK", member=("Fans", 0))
    bmc.set_health(chassis_path, "Warning")
    found = d.health(e)
    assert found.severity is Severity.WARNING
    assert {c.name for c in found.components} == {
        "system", "chassis %s" % chassis["Name"]}
    d.close()


@pytest.fixture
def ipmi_bmc(tmp_path):
    try:
        peer = ipmi.IPMIBMC("compute-i", tmp_path)
        peer.start()
    except PeerMissing as e:
        harness.handle_missing(e)
    yield peer
    peer.stop()


def test_ipmi_health_from_the_event_log(ipmi_bmc):
    d, e = load_driver("ipmi", iha_conf.make({"fencing": {
        "timeout": 10, "poll_interval": 0.1, "retries": 2}})), \
        entry(ipmi_bmc)
    # No sensor record and no event: nothing can be told.
    assert d.health(e) is None
    ipmi_bmc.add_sel(
        # a power supply: failure detected, asserted
        "0x04 0x08 0x01 0x6f 0x01 0x00 0x00",
        # a temperature over its upper critical threshold, then back
        "0x04 0x01 0x30 0x01 0x09 0x00 0x00",
        "0x04 0x01 0x30 0x81 0x09 0x00 0x00")
    found = d.health(e)
    assert found.severity is Severity.WARNING
    assert [c.name for c in found.components] == [
        "SEL Power Supply #0x01"], found
    assert "Failure detected" in found.why()
