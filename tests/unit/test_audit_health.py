"""The audit reads each host's hardware health with its power state
(when proactive HA asks for it), hands it over after each audit, logs a
change of severity, and never lets a health read change the fencing
verdict."""

import random

from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing.health import Component, Health, Severity
from instanceha.drivers.fencing.inventory import BMC
from instanceha.sources.audit import FencingAudit
from tests.unit.fakes import Clock, FakeCompute

CRIT = Health.of([Component("fan Fan1", Severity.CRITICAL, "Redfish")])


def rig(healths, on_health):
    clock = Clock()
    compute = FakeCompute(clock, hosts=3, servers_per_host=0)
    hosts = sorted(compute.services)
    inventory = {h: BMC(host=h, driver="fake", address="10.0.0.%d" % i)
                 for i, h in enumerate(hosts)}

    class Fencer(fb.FencingDriver):
        name = "fake"

        def power_off(self, bmc):
            raise AssertionError("the audit never powers off")

        def power_state(self, bmc):
            return fb.PowerState.ON

        def health(self, bmc):
            found = healths.get(bmc.host)
            if isinstance(found, Exception):
                raise found
            return found

    fencer = Fencer()
    conf = conf_pkg.make({"audit": {"interval": 300, "jitter": 0.1,
                                    "hosts_per_second": 0}})
    audit = FencingAudit(conf, compute, inventory.get, lambda n: fencer,
                         clock, rng=random.Random(1), on_health=on_health)
    return audit, hosts


def test_health_read_and_handed_over():
    got = []
    healths = {}
    audit, hosts = rig(healths, got.append)
    healths[hosts[0]] = CRIT
    healths[hosts[1]] = fb.FenceError("health: HTTP 500")
    with capture_logs() as logs:
        unprotected = audit.run_once()
    assert unprotected == {}        # a failed health read changes nothing
    assert got == [{hosts[0]: CRIT}]
    assert audit.hardware() == {hosts[0]: CRIT}
    events = [e["event"] for e in logs]
    assert "hardware_degraded" in events
    assert "hardware_health_unread" in events
    # Same severity again: not logged again.
    with capture_logs() as logs:
        audit.run_once()
    assert "hardware_degraded" not in [e["event"] for e in logs]
    healths[hosts[0]] = Health.of([])
    with capture_logs() as logs:
        audit.run_once()
    assert "hardware_health_ok" in [e["event"] for e in logs]


def test_no_health_read_without_proactive():
    calls = []

    audit, hosts = rig({}, None)
    audit._fencer = lambda n: type("F", (fb.FencingDriver,), {
        "name": "fake", "power_off": lambda s, b: None,
        "power_state": lambda s, b: fb.PowerState.ON,
        "health": lambda s, b: calls.append(b) or CRIT})()
    audit.run_once()
    assert calls == [] and audit.hardware() == {}
