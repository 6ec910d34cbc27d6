"""A simulated OpenStack cloud for instanceha: Keystone, the parts of Nova
instanceha uses, and one Redfish BMC per compute host, served over real HTTP
on loopback so the real drivers (openstacksdk, sushy) run against it.

    from instanceha.sim import SimCloud, SimServer
    cloud = SimCloud(hosts=3, servers_per_host=2)
    srv = SimServer(cloud).start()
    clouds_yaml, bmc_yaml = srv.write_client_files(tmpdir)
    ...
    srv.stop()

See doc/simulator.md.
"""

from instanceha.sim.model import SimCloud
from instanceha.sim.server import SimServer

__all__ = ["SimCloud", "SimServer"]
