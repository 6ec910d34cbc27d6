"""The two clouds the conformance suite asks the same questions.

Both are reached the way the engine reaches Nova: openstacksdk's compute
proxy with an explicit microversion per call (``conn.compute.get(path,
microversion=...)``). Each target also knows how to cut a host's power and
give it back: real Nova through the host's Redfish emulator (the BMC link
kills/starts the nova-compute process), the simulator through its model.
"""

import pathlib

import openstack
import openstack.config.loader

from functional import waiting

#: servers on the host under test
SERVERS = 2


def connect(clouds_yaml, cloud):
    config = openstack.config.loader.OpenStackConfig(
        config_files=[str(clouds_yaml)], load_envvars=False)
    return openstack.connection.Connection(config=config.get_one(cloud=cloud))


class Target:
    name = None
    service_down_time = None

    def __init__(self, conn, hosts):
        self.conn = conn
        self.hosts = list(hosts)

    def call(self, method, path, body=None, microversion="2.1"):
        """(status, json-or-None, response) for one compute API call."""
        proxy = self.conn.compute
        kwargs = {"microversion": microversion, "raise_exc": False}
        if body is not None:
            kwargs["json"] = body
        resp = getattr(proxy, method.lower())(path, **kwargs)
        try:
            doc = resp.json() if resp.content else None
        except ValueError:
            doc = None
        return resp.status_code, doc, resp

    def service(self, host):
        _, doc, _ = self.call("GET", "/os-services?binary=nova-compute&host=%s"
                              % host, microversion="2.53")
        return doc["services"][0]

    def wait(self, predicate, timeout, what):
        return waiting.wait_for(predicate, timeout,
                                "%s: %s" % (self.name, what), interval=0.5)


class RealNova(Target):
    name = "real-nova"

    def __init__(self, bed, directory):
        path = bed.cloud.clouds_yaml(pathlib.Path(directory) / "clouds.yaml")
        super().__init__(connect(path, "realnova"), bed.hosts)
        self.bed = bed
        self.service_down_time = bed.cloud.service_down_time

    def boot(self, host, count):
        ids = self.bed.cloud.boot(host, count)
        self.bed.cloud.wait_servers(ids, host=host)
        return ids

    def kill(self, host):
        self.bed.cloud.kill_compute(host)

    def power_off(self, host):
        self.bed.bmc(host).power_off()

    def power_on(self, host):
        self.bed.bmc(host).power_on()


class Simulator(Target):
    name = "simulator"

    def __init__(self, directory, hosts=3):
        from instanceha.sim import SimCloud, SimServer
        self.cloud = SimCloud(hosts=hosts, servers_per_host=SERVERS)
        self.server = SimServer(self.cloud, port=0).start()
        clouds_yaml, _ = self.server.write_client_files(directory)
        super().__init__(connect(clouds_yaml, "sim"), sorted(self.cloud.hosts))
        self.service_down_time = self.cloud.service_down_time

    def boot(self, host, count):
        # The simulator has no boot API; its model starts with ``count``
        # servers on every host (servers_per_host), which is what we need.
        _, doc, _ = self.call("GET", "/servers/detail?all_tenants=1",
                              microversion="2.74")
        ids = [s["id"] for s in doc["servers"]
               if s["OS-EXT-SRV-ATTR:host"] == host]
        assert len(ids) == count, (host, ids)
        return ids

    def kill(self, host):
        self.cloud.kill(host)

    def power_off(self, host):
        self.cloud.power(host, False)

    def power_on(self, host):
        self.cloud.power(host, True)

    def close(self):
        self.server.stop()
