"""The simulator's index of where servers are (host -> servers, summed
sizes) agrees with reading every server, through evacuations, a server
removed from outside and a rebuild cut short by a dying destination."""

from instanceha.sim import SimCloud
from instanceha.sim.records import RESOURCES


def brute(cloud, name):
    """What the index must give: every server read, as before it."""
    servers = [s for s in cloud.servers.values() if s.host == name]
    used = dict.fromkeys(RESOURCES, 0)
    for s in servers:
        for rc, amount in s.resources().items():
            used[rc] += amount
    for m in cloud.migrations:
        s = cloud.servers[m.instance_uuid]
        if not ((m.status in ("accepted", "pre-migrating")
                 and cloud._placed.get(m.id) == name and s.host != name)
                or (m.status == "done" and m.source_compute == name
                    and s.host != name)):
            continue
        for rc, amount in s.resources().items():
            used[rc] += amount
    return servers, used


def agrees(cloud):
    cloud.now()
    for name in cloud.hosts:
        servers, used = brute(cloud, name)
        assert cloud.list_servers(name) == servers, name
        assert cloud.usage(name) == used, name
    snap = cloud.snapshot()["hosts"]
    assert all(snap[n]["usage"] == brute(cloud, n)[1] for n in cloud.hosts)


def test_index_follows_evacuations(clock):
    cloud = SimCloud(clock=clock, hosts=4, servers_per_host=5,
                     evacuation_time=1.0, schedule_time=0.5)
    agrees(cloud)
    cloud.kill("compute-1")
    clock.advance(cloud.service_down_time + 1)
    for s in cloud.list_servers("compute-1"):
        cloud.evacuate(s.id)
    agrees(cloud)                       # accepted: nothing placed yet
    clock.advance(0.6)
    agrees(cloud)                       # placed, rebuilding
    clock.advance(1.0)
    agrees(cloud)                       # done: the source keeps them
    assert cloud.list_servers("compute-1") == []
    assert sum(len(cloud.list_servers(n)) for n in cloud.hosts) == 20


def test_index_survives_a_server_removed_from_outside(clock):
    cloud = SimCloud(clock=clock, hosts=2, servers_per_host=3)
    agrees(cloud)
    sid = cloud.list_servers("compute-0")[0].id
    del cloud.servers[sid]
    agrees(cloud)
    assert len(cloud.list_servers("compute-0")) == 2


def test_index_with_a_destination_dying_during_the_rebuild(clock):
    cloud = SimCloud(clock=clock, hosts=3, servers_per_host=2,
                     evacuation_time=1.0, schedule_time=0.0)
    cloud.kill("compute-0")
    clock.advance(cloud.service_down_time + 1)
    cloud.kill_next_destinations(1, stage="claim")
    for s in cloud.list_servers("compute-0"):
        cloud.evacuate(s.id)
    clock.advance(2.0)
    agrees(cloud)
    # One rebuilt elsewhere, one left rebuilding on its source.
    assert len(cloud.list_servers("compute-0")) == 1
