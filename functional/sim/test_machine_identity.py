"""Issue 34, part 3, on the simulator: compute-1's inventory entry reaches
another *live* machine, one whose BMC reports no host name, and that no
other entry reaches: every check before this one let its power-off
through when compute-1 died. The real ``instanceha run`` hears the real
agent code of every simulated host (each reports its machine's system
UUID, as DMI product_uuid); the BMC's system UUID is another machine's,
so compute-1 goes failed and the other machine stays on.

Two BMCs: the simulator's Redfish (compute-2's machine, its HostName
empty) and OpenIPMI's ``ipmi_sim`` read by the real ipmitool (its system
GUID sent least significant byte first, as IPMI encodes it). Budgets: the
engine reacts within seconds; 60 s waits hold on a loaded machine."""

import os
import uuid

import pytest
import yaml

from functional.engine_process import EngineProcess
from functional.peers import ipmi as ipmi_peer
from functional.peers.errors import PeerMissing
from instanceha import simrun
from instanceha.sim import SimCloud, SimServer
from instanceha.sim.agents import SimAgents

HOSTS = 3


class Bed:
    def __init__(self, tmp, entry=None):
        """``entry(cloud)``: compute-1's inventory entry (else its own)."""
        self.cloud = SimCloud(hosts=HOSTS, servers_per_host=1,
                              boot_time=1.0, evacuation_time=0.2)
        self.srv = SimServer(self.cloud).start()
        setup = simrun.agent_setup(tmp, interval=0.2)
        conf = simrun.write_config(tmp, self.srv, {
            "agent": {"silence_timeout": 1.5}}, agents=setup)
        self.path = os.path.join(tmp, "bmc.yaml")
        self.agents = SimAgents(self.cloud, **setup.sim_args()).start()
        self.engine = EngineProcess(
            tmp, conf, os.path.join(tmp, "status.json"),
            "sqlite:///" + os.path.join(tmp, "journal.sqlite"))

    def inventory(self, change):
        with open(self.path) as f:
            inv = yaml.safe_load(f)
        change(inv["hosts"])
        with open(self.path, "w") as f:
            yaml.safe_dump(inv, f)

    def start(self):
        self.engine.start(HOSTS, timeout=60)

    def host(self, name):
        return next((h for h in self.engine.status().get("hosts", [])
                     if h["name"] == name), {})

    def servers_of(self, host):
        return {sid for sid, s in self.cloud.snapshot()["servers"].items()
                if s["host"] == host}

    def close(self):
        self.engine.stop()
        self.agents.stop()
        self.srv.stop()


@pytest.fixture
def bed(tmp_path):
    beds = []

    def make():
        beds.append(Bed(str(tmp_path / ("bed%d" % len(beds)))))
        return beds[-1]
    yield make
    for b in beds:
        b.close()


def _dies_and_fails(b, power_on):
    """compute-1's agent is heard, the audit has read its BMC; then
    compute-1 dies. It must end failed with the reason, nothing powered
    off (``power_on()`` reads the other machine), nothing evacuated."""
    victims = b.servers_of("compute-1")
    b.engine.wait(lambda: b.host("compute-1").get("identity") == "mismatch",
                  60, "compute-1's BMC found to reach another machine")
    b.cloud.kill("compute-1")
    state, reason = b.engine.wait_state("compute-1", "failed", timeout=60)
    assert "not the host" in reason, reason
    assert power_on()
    assert b.servers_of("compute-1") == victims
    assert b.cloud.unsafe_evacuate_requests() == []
    assert [r for r in b.cloud.evacuate_requests
            if r.server in victims] == []


def test_redfish_entry_reaching_another_machine_without_hostname(bed):
    b = bed()
    # compute-2's BMC reports no host name; its entry is gone and
    # compute-1's reaches its BMC instead (a copy-paste, a recabling).
    b.cloud.hosts["compute-2"].bmc_hostname = ""
    b.inventory(lambda hosts: hosts.update({"compute-1": hosts.pop(
        "compute-2")}))
    b.start()
    _dies_and_fails(
        b, lambda: b.cloud.snapshot()["hosts"]["compute-2"]["power"] == "on")
    assert b.cloud.snapshot()["hosts"]["compute-2"]["compute_alive"]


def test_ipmi_entry_reaching_another_machine(bed, tmp_path):
    b = bed()
    other = str(uuid.uuid5(uuid.NAMESPACE_DNS, "another-machine"))
    bmc = ipmi_peer.IPMIBMC("other", str(tmp_path),
                            guid=uuid.UUID(other).bytes[::-1].hex())
    try:
        bmc.start()
    except PeerMissing as e:
        pytest.skip(str(e))
    try:
        b.inventory(lambda hosts: hosts.update(
            {"compute-1": bmc.inventory_entry()}))
        b.start()
        _dies_and_fails(b, lambda: bmc.power_state() == "on")
        assert not any(" set " in c for c in bmc.calls()), bmc.calls()
    finally:
        bmc.stop()


def test_ipmi_entry_reaching_the_hosts_machine_fences(bed, tmp_path):
    """The same entry's BMC sending compute-1's own machine UUID, in SMBIOS
    byte order this time: verified, and compute-1 is fenced through it
    (the simulated machine loses its power; ipmi_sim stands for its BMC)."""
    b = bed()
    mine = b.cloud.hosts["compute-1"].system_uuid
    bmc = ipmi_peer.IPMIBMC("mine", str(tmp_path),
                            guid=uuid.UUID(mine).bytes_le.hex())
    try:
        bmc.start()
    except PeerMissing as e:
        pytest.skip(str(e))
    try:
        b.inventory(lambda hosts: hosts.update(
            {"compute-1": bmc.inventory_entry()}))
        b.start()
        b.engine.wait(lambda: b.host("compute-1").get("identity")
                      == "verified", 60, "compute-1's BMC verified")
        b.cloud.power("compute-1", False)
        b.engine.wait(lambda: bmc.power_state() == "off", 60,
                      "compute-1 fenced through its IPMI BMC")
        b.engine.wait_state("compute-1", "evacuated", timeout=60)
        assert b.cloud.unsafe_evacuate_requests() == []
    finally:
        bmc.stop()
