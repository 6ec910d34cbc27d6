"""Issue 34, part 3, on real peers: a fencing method is bound to its host
only when the BMC's machine is the host's. Each fake compute of real
Nova runs a real ``instanceha-agent`` that reports a system UUID (its
DMI product_uuid, from a file here); each compute's BMC is a sushy
emulator whose System has its own UUID. compute A's agent reports its
BMC's UUID (verified); compute B's reports another machine's, as when
B's inventory entry points at another machine: when B dies it is
refused (B goes failed, the BMC stays On), and when A dies it is fenced.
"""

import uuid

from functional.peers import procs
from functional.realnova.test_agent import (
    host_status, start_with_agents, status_api)

BUDGET = 90


def test_a_bmc_of_another_machine_is_refused_a_matching_one_fences(
        clean_bed, agents, engine):
    bed = clean_bed
    good, wrong = bed.hosts[0], bed.hosts[1]
    another = str(uuid.uuid5(uuid.NAMESPACE_DNS, "another-machine"))
    hosts = agents(system_uuids={good: bed.bmc(good).system_uuid,
                                 wrong: another})
    # two hosts die in this test: above the default storm threshold
    eng = start_with_agents(bed, engine, hosts, {"policy": {"threshold": 100}})
    eng.wait(lambda: (host_status(status_api(eng), good).get("identity"),
                      host_status(status_api(eng), wrong).get("identity"))
             == ("verified", "mismatch"), 60,
             "the audit's BMC reads matched against the agents' UUIDs")
    assert "not the host" in status_api(eng)["unprotected"][wrong]

    hosts.kill(wrong)                       # B dies, its BMC still On
    bed.cloud.kill_compute(wrong)
    state, reason = eng.wait_state(wrong, "failed", timeout=BUDGET)
    assert "not the host" in reason and another in reason, reason
    assert bed.bmc(wrong).power_state() == "on"
    assert not bed.cloud.service(wrong)["forced_down"]

    hosts.kill(good)                        # A dies: fenced through its BMC
    bed.cloud.kill_compute(good)
    procs.wait_until(lambda: bed.bmc(good).power_state() == "off", BUDGET,
                     "powered off by the engine", "instanceha", eng.log_path,
                     interval=0.2)
    assert bed.bmc(wrong).power_state() == "on"
