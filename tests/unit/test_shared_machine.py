"""Issue 21, hole 2 (the shared-BMC check extended): one machine entered
by IP address and by DNS name, by its Redfish and by its IPMI address
(the system UUID its BMCs report), and a live compute host with no
inventory entry of its own whose machine another entry reaches (the host
name the BMC reports): never powered off for another host."""

import uuid

from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.inventory import BMC
from instanceha.sources.audit import FencingAudit
from tests.unit.test_engine import World


def test_one_bmc_by_ip_and_by_dns_name_is_one_bmc():
    by_ip = BMC(host="a", driver="redfish", address="https://10.0.0.5")
    by_name = BMC(host="b", driver="redfish",
                  address="https://bmc-a.example.net/")
    names = {"bmc-a.example.net": frozenset({"10.0.0.5"}),
             "10.0.0.5": frozenset({"10.0.0.5"})}
    assert not inventory.same_bmc(by_ip, by_name)       # spelt differently
    assert inventory.same_bmc(by_ip, by_name, names.get)
    assert inventory.shared({"a": by_ip, "b": by_name}, names.get) == [
        ("https://10.0.0.5", ["a", "b"])]
    # The real resolver: an address is itself; localhost is the loopback.
    assert inventory.resolve("10.0.0.5") == {"10.0.0.5"}
    assert "127.0.0.1" in inventory.resolve("localhost")
    other = BMC(host="c", driver="redfish", address="https://10.0.0.6")
    assert not inventory.same_bmc(by_ip, other, inventory.resolve)


def test_an_ipmi_system_guid_matches_the_redfish_uuid_of_one_machine():
    machine = uuid.UUID("4c4c4544-0051-3710-8057-b5c04f4e4b32")
    for raw in (machine.bytes, machine.bytes_le, machine.bytes[::-1]):
        assert str(machine) in fb.uuid_forms(raw)
    assert fb.uuid_forms(b"\x01\x02") == []


class SharedWorld(World):
    """Fake BMCs that report a system UUID and a host name per machine;
    ``machine_of`` maps an entry's address to the machine it reaches."""

    def __init__(self, **kw):
        super().__init__(hosts=5, **kw)
        self.machine_of = {}
        world = self

        def system_identity(bmc):
            machine = world.machine_of.get(bmc.address, bmc.host)
            return {"uuids": [str(uuid.uuid5(uuid.NAMESPACE_DNS, machine))],
                    "hostname": machine + ".example.net"}
        self.fencer.system_identity = system_identity
        self.audit = FencingAudit(self.conf, self.compute, self.ctx.bmc_for,
                                  self.ctx.fencer, self.clock,
                                  sink=self.engine.submit)

    def audit_once(self):
        self.audit.run_once()
        self.drain()


def _refused(w, host, other):
    w.until(host, "failed", passes=40)
    reason = w.state(host)[1]
    assert "refusing to power off" in reason and other in reason, reason
    assert w.fencer.powered_off == []
    assert w.compute.migrations == []
    assert w.compute.services[other]["alive"]


def test_an_entry_reaching_another_entrys_machine_by_its_ipmi_address():
    """compute-2's entry is compute-1's machine by its IPMI address (no
    address in common with compute-1's Redfish entry); the UUID both BMCs
    report is the same."""
    w = SharedWorld()
    w.ctx.inventory["compute-2"] = BMC(host="compute-2", driver="fake",
                                       address="ipmi-of-compute-1")
    w.machine_of["ipmi-of-compute-1"] = "compute-1"
    w.fencer.power_off = lambda bmc: (_ for _ in ()).throw(
        AssertionError("powered off %s" % bmc))
    w.pass_()
    w.audit_once()
    w.compute.kill("compute-2")
    _refused(w, "compute-2", "compute-1")


def test_an_entry_reaching_a_live_host_that_has_no_entry_of_its_own():
    """compute-3 has no inventory entry; compute-2's entry reaches its
    machine, whose BMC reports host name compute-3."""
    w = SharedWorld()
    del w.ctx.inventory["compute-3"]
    w.ctx.inventory["compute-2"] = BMC(host="compute-2", driver="fake",
                                       address="bmc-of-compute-3")
    w.machine_of["bmc-of-compute-3"] = "compute-3"
    w.fencer.power_off = lambda bmc: (_ for _ in ()).throw(
        AssertionError("powered off %s" % bmc))
    w.pass_()
    w.audit_once()
    w.compute.kill("compute-2")
    _refused(w, "compute-2", "compute-3")


def test_one_machine_by_ip_and_dns_name_in_two_entries_is_refused():
    w = SharedWorld()
    w.ctx.inventory["compute-1"] = BMC(host="compute-1", driver="fake",
                                       address="127.0.0.1")
    w.ctx.inventory["compute-2"] = BMC(host="compute-2", driver="fake",
                                       address="localhost")
    w.pass_()
    w.compute.kill("compute-2")
    _refused(w, "compute-2", "compute-1")


def test_the_host_itself_reported_by_its_bmc_is_no_sharer():
    w = SharedWorld()
    w.pass_()
    w.audit_once()
    w.compute.kill("compute-2")
    w.until("compute-2", "evacuated", passes=40)
    assert w.fencer.powered_off == ["compute-2"]
