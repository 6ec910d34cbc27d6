"""The invariant check on the real-peer bed: every evacuate request on its
way to real nova-api is recorded with the power state the host's BMC
emulator reports at that instant (functional/peers/evacwatch.py), and the
check of functional/conftest.py names an unsafe one."""

import pytest

from functional.conftest import invariant_failure
from functional.realnova.engine import boot_victims
from instanceha.sim import invariant


@pytest.mark.allows_unsafe_evacuation(
    "sends an evacuate request for a server whose host is on, to show the "
    "bed's recorder sees it")
def test_recorder_sees_the_power_of_the_host_at_each_request(
        clean_bed, evacuate_ledger):
    """compute-1's nova-compute is killed and forced down while its
    machine stays on: the evacuate request sent then is recorded with power
    On and named by the check; after the BMC powers the host off, the next
    one is recorded Off and is fine."""
    bed = clean_bed
    host = bed.hosts[1]
    first, second = boot_victims(bed, host)
    bed.cloud.kill_compute(host)
    svc = bed.cloud.service(host)
    bed.cloud.call("PUT", "/os-services/%s" % svc["id"],
                   {"forced_down": True}, microversion="2.53")
    resp = bed.cloud.call("POST", "/servers/%s/action" % first,
                          {"evacuate": {}}, microversion="2.29")
    assert resp.status_code == 200, resp.text
    bed.bmc(host).power_off()
    resp = bed.cloud.call("POST", "/servers/%s/action" % second,
                          {"evacuate": {}}, microversion="2.29")
    assert resp.status_code == 200, resp.text

    seen = [r for r in evacuate_ledger.unread() if r.where == "real-nova"]
    assert [(r.server, r.host, r.power, r.answer) for r in seen] == [
        (first, host, "On", 200), (second, host, "Off", 200)]
    assert bed.cloud.evacuations.records[-2:] == seen
    message = invariant_failure(seen, "t::u")
    assert message.startswith("t::u: invariant broken: 1 evacuate "
                              "request(s)"), message
    assert "evacuate request for server %s at %s while its host %s was " \
           "powered On (real-nova, Nova answered 200)" % (
               first, invariant.iso(seen[0].time), host) in message, message
    assert second not in message
