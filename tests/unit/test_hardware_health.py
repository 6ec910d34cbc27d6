"""Hardware health (proactive HA): the pure readers of Redfish resources
and ipmitool output, and the Redfish driver's health() over HTTP against
the simulated BMCs (whose health the control API sets)."""

import pytest
import requests

from instanceha.drivers.fencing import health as hm
from instanceha.drivers.fencing.health import Severity
from instanceha.drivers.fencing.redfish import RedfishDriver

from tests.unit.test_redfish_driver import clock, make_conf, world  # noqa


def test_redfish_health_worst_and_components():
    system = {"Status": {"State": "Enabled", "Health": "OK",
                         "HealthRollup": "Warning"}}
    parts = [("power supply", [
        {"Name": "PS1", "Status": {"Health": "Critical"}},
        {"Name": "PS2", "Status": {"Health": "OK"}},
        {"Name": "PS3", "Status": {"State": "Absent", "Health": "Critical"}}]),
        ("fan", [{"MemberId": "0", "Status": {"Health": "Warning"}}]),
        ("memory", [{"Name": "DIMM A1"}])]
    found = hm.redfish_health(system, parts)
    assert found.severity is Severity.CRITICAL
    assert [(c.name, c.severity) for c in found.components] == [
        ("system", Severity.WARNING), ("power supply PS1", Severity.CRITICAL),
        ("fan 0", Severity.WARNING)]
    assert "PS1 Critical" in found.why()
    assert found.at_least(Severity.WARNING)


def test_redfish_rollup_in_any_case():
    found = hm.redfish_health({"Status": {"Health": "OK",
                                          "HealthRollUp": "Critical"}}, [])
    assert found.severity is Severity.CRITICAL


def test_redfish_health_none_when_nothing_reports():
    assert hm.redfish_health({"Status": {"State": "Enabled"}}, []) is None
    ok = hm.redfish_health({"Status": {"Health": "ok"}}, [])
    assert ok.severity is Severity.OK and ok.components == ()
    assert not ok.at_least(Severity.WARNING)


def test_ipmi_sensors_and_sel():
    sdr = ("Fan1             | 30h | ok  |  29.1 | 3000 RPM\n"
           "PS1 Status       | 60h | cr  |  10.1 | Failure detected\n"
           "Inlet Temp       | 04h | unc |  64.1 | 41 degrees C\n"
           "CPU2 Temp        | 05h | ns  |   3.2 | No Reading\n")
    sel = ("   1 | 11/29/2026 | 10:00:00 | Memory #0x01 | Uncorrectable ECC |"
           " Asserted\n"
           "   2 | 11/29/2026 | 10:01:00 | Fan #0x30 | Lower Critical going "
           "low | Asserted\n"
           "   3 | 11/29/2026 | 10:02:00 | Fan #0x30 | Lower Critical going "
           "low | Deasserted\n")
    found = hm.ipmi_health(sdr, sel)
    assert found.severity is Severity.CRITICAL
    names = {c.name: c.severity for c in found.components}
    assert names == {"sensor PS1 Status": Severity.CRITICAL,
                     "sensor Inlet Temp": Severity.WARNING,
                     "SEL Memory #0x01": Severity.WARNING}
    # A SEL alone never says Critical; no sensor listed: cannot tell.
    assert hm.ipmi_health("Fan1 | 30h | ok | 29.1 | 3000 RPM", sel
                          ).severity is Severity.WARNING
    assert hm.ipmi_health(None, sel).severity is Severity.WARNING
    assert hm.ipmi_health("Err in cmd get sensor sdr info\n",
                          "SEL has no entries\n") is None
    assert hm.ipmi_health(None, None) is None


def set_health(srv, host, **parts):
    r = requests.post("%s/sim/hosts/%s/health" % (srv.url, host),
                      json=parts, timeout=10)
    assert r.status_code == 200, r.text


def test_redfish_driver_reads_the_health_of_the_simulated_bmc(world, clock):
    cloud, srv, bmcs = world()
    driver = RedfishDriver(make_conf(), sleep=clock.sleep)
    found = driver.health(bmcs["compute-0"])
    assert found.severity is Severity.OK and found.components == ()
    set_health(srv, "compute-0", power_supply="Critical", fan="Warning")
    found = driver.health(bmcs["compute-0"])
    assert found.severity is Severity.CRITICAL
    assert {c.name: c.severity for c in found.components} == {
        "system": Severity.CRITICAL,        # its HealthRollup
        "chassis compute-0": Severity.CRITICAL,
        "power supply PS1": Severity.CRITICAL,
        "fan Fan1": Severity.WARNING}
    set_health(srv, "compute-0", power_supply="OK", fan="OK",
               memory="Warning")
    found = driver.health(bmcs["compute-0"])
    assert {c.name for c in found.components} == {
        "system", "memory (summary)", "memory DIMM A1"}
    assert found.severity is Severity.WARNING
    # Another host's stays OK; a bad value is refused.
    assert driver.health(bmcs["compute-1"]).severity is Severity.OK
    r = requests.post("%s/sim/hosts/compute-1/health" % srv.url,
                      json={"fan": "Broken"}, timeout=10)
    assert r.status_code == 400


def test_redfish_health_of_unreachable_bmc_raises(world, clock):
    from instanceha.drivers.fencing import base
    cloud, srv, bmcs = world()
    cloud.set_bmc("compute-2", reachable=False)
    driver = RedfishDriver(make_conf(retries=1, poll_interval=0.05),
                           sleep=clock.sleep)
    with pytest.raises(base.FenceError):
        driver.health(bmcs["compute-2"])


def test_ipmi_verbose_forms():
    sel = ("SEL Record ID          : 0001\n Record Type           : 02\n"
           " Sensor Type           : Power Supply\n"
           " Sensor Number         : 01\n"
           " Event Direction       : Assertion Event\n"
           " Description           : Failure detected\n\n"
           "SEL Record ID          : 0002\n"
           " Sensor Type           : Temperature\n"
           " Sensor Number         : 30\n"
           " Event Direction       : Assertion Event\n"
           " Description           : Upper Critical going high\n\n"
           "SEL Record ID          : 0003\n"
           " Sensor Type           : Temperature\n"
           " Sensor Number         : 30\n"
           " Event Direction       : Deassertion Event\n"
           " Description           : Upper Critical going high\n\n")
    sdr = ("Sensor ID              : Fan1 (0x30)\n"
           " Sensor Reading        : 300 (+/- 0) RPM\n"
           " Status                : Lower Critical\n\n"
           "Sensor ID              : Inlet (0x04)\n"
           " Status                : ok\n\n")
    found = hm.ipmi_health(sdr, sel)
    assert {c.name: c.severity for c in found.components} == {
        "sensor Fan1": Severity.CRITICAL,
        "SEL Power Supply #0x01": Severity.WARNING}
