"""Run the real ``instanceha run`` process against the real-peer test bed."""

import os
import tempfile
import time

import yaml

from functional.engine_process import EngineProcess
from functional.peers.errors import PeerError
from instanceha import simrun

#: Detection tuned to the test bed's Nova (report_interval 2 s,
#: service_down_time 8 s): a dead compute is fenced ~10 s after its death.
TIMINGS = {
    "api": {"port": 0},
    "detection": {"poll_interval": 1.0, "delta": 6.0, "grace_period": 2.0,
                  "tick_interval": 0.2},
    "fencing": {"timeout": 30.0, "poll_interval": 0.2, "retries": 2},
    "evacuation": {"poll_interval": 0.5, "cleanup_check_interval": 1.0,
                   "concurrency": 4, "retry_backoff": 2.0},
    # A powered-on compute of the bed reports within ~10 s.
    "policy": {"resume_boot_time": 30.0},
    "control_plane": {"poll_interval": 1.0},
}


class Engine(EngineProcess):

    def __init__(self, bed, workdir, overrides=None, auth=None):
        """``auth``: the clouds.yaml ``auth_type``/``auth`` to use on a
        Keystone-mode bed (default: the ``instanceha`` user's password)."""
        self.bed = bed
        self.auth = auth
        os.makedirs(str(workdir), exist_ok=True)
        super().__init__(
            workdir, None, os.path.join(str(workdir), "status.json"),
            "sqlite:///" + os.path.join(str(workdir), "journal.sqlite"))
        self.conf_path = self._write(overrides or {})

    def _write(self, overrides):
        clouds = self.bed.cloud.clouds_yaml(os.path.join(self.workdir,
                                                         "clouds.yaml"),
                                            auth=self.auth)
        inventory = os.path.join(self.workdir, "bmc.yaml")
        fd = os.open(inventory, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(self.bed.inventory(), f)
        groups = {g: dict(v) for g, v in TIMINGS.items()}
        groups["DEFAULT"] = {"cloud": "realnova", "clouds_file": str(clouds),
                             "status_file": self.status_path}
        groups["fencing"]["inventory"] = inventory
        groups["journal"] = {"connection": self.journal_url}
        # The operator API's socket, in a directory closed to other users
        # (a short path: the workdir's is too long for a unix socket).
        groups["api"]["unix_socket"] = os.path.join(
            tempfile.mkdtemp(prefix="instanceha-api-"), "api.sock")
        for group, values in overrides.items():
            groups.setdefault(group, {}).update(values)
        return simrun.write_conf_file(
            os.path.join(self.workdir, "instanceha.conf"), groups)

    def start(self, env=None):
        env = dict(os.environ if env is None else env)
        env.pop("OS_CLIENT_CONFIG_FILE", None)
        try:
            return super().start(len(self.bed.hosts), timeout=60, env=env)
        except AssertionError as e:
            raise PeerError("instanceha", str(e), self.log_path)


    def compute_through(self, proxy):
        """Send the engine's Nova requests through ``proxy`` (a
        functional.peers.faultproxy.HttpFaultProxy in front of nova-api)."""
        path = os.path.join(self.workdir, "clouds.yaml")
        with open(path) as f:
            doc = yaml.safe_load(f)
        cloud = doc["clouds"]["realnova"]
        path_part = cloud.get("compute_endpoint_override",
                              self.bed.cloud.api_url).split("/", 3)[3:]
        cloud["compute_endpoint_override"] = "/".join(
            [proxy.url] + path_part)
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)


VICTIM_SERVERS = 2


def boot_victims(bed, host, within=90.0):
    """VICTIM_SERVERS servers booted on ``host`` and ACTIVE there (see
    boot_on)."""
    return boot_on(bed, host, VICTIM_SERVERS, within=within)


def boot_on(bed, host, count, within=90.0, **boot_args):
    """``count`` servers booted on ``host`` and ACTIVE there
    (``boot_args``: the bed's boot options, name=, flavor=).

    Right after the bed (re)starts a compute, Placement may have no
    allocation candidate for it yet (Nova's scheduler says so: "a temporary
    occurrence as compute nodes start up"); a boot that ends in No valid
    host is deleted and tried again a few seconds later, for up to
    ``within`` seconds (a server in ERROR is seen at once, so a count of
    attempts would be over in seconds)."""
    deadline = time.monotonic() + within
    while True:
        ids = bed.cloud.boot(host, count, **boot_args)
        try:
            bed.cloud.wait_servers(ids, host=host)
            return ids
        except PeerError as e:
            if "No valid host" not in str(e) \
                    or time.monotonic() > deadline:
                raise
            for sid in ids:
                bed.cloud.call("DELETE", "/servers/%s" % sid, ok=(204, 404))
            time.sleep(5)
