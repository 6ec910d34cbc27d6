"""The drain preflight and plan (instanceha.policy.drain): pure."""

from instanceha.drivers.compute.base import ComputeService, HostCapacity
from instanceha.policy import drain
from instanceha.policy.facts import (FlavorFacts, HostFacts, ImageFacts,
                                     ServerFacts)


def test_one_active_server_is_live_migrated():
    fl = FlavorFacts(name="m1", vcpus=2, ram_mb=4096, disk_gb=20)
    servers = [ServerFacts(id="a", name="web", status="ACTIVE", flavor=fl,
                           image=ImageFacts(id="i"), zone="az1")]
    hosts = [HostFacts("c%d" % i, zone="az1", capacity=HostCapacity(
        "c%d" % i, 32, 0, 65536, 30000, 1000, 100)) for i in range(1, 5)]
    services = [
        ComputeService("1", "ctl", "up", "enabled", False, None, None,
                       binary="nova-conductor"),
        ComputeService("2", "ctl", "up", "enabled", False, None, None,
                       binary="nova-scheduler"),
        ComputeService("3", "c1", "up", "disabled", False, None, None,
                       zone="az1")]
    p = drain.plan("c1", servers, hosts, services, drain.Settings())
    assert p.ok and p.proceed
    assert p.steps == (("a", "web", "live"),)
    assert p.destinations == ("c2", "c3", "c4")
