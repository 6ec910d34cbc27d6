"""Point a real instanceha at a simulated cloud: write its configuration.

Used by ``instanceha demo``, the functional tests and the benchmarks, so
they all run the same engine with the same drivers over HTTP; only the
timings are shortened to the simulator's.
"""

import dataclasses
import os
import secrets
import socket
import tempfile
from typing import Dict, List, Optional

from instanceha.heartbeat import keys

#: Settings matched to the simulator's defaults (report_interval 1 s,
#: service_down_time 4 s), so a death is seen in seconds, not minutes.
FAST: Dict[str, Dict[str, object]] = {
    "DEFAULT": {"workers": 8},
    "api": {"port": 0},
    "detection": {"poll_interval": 0.5, "delta": 3.0, "grace_period": 1.0,
                  "tick_interval": 0.1},
    "fencing": {"timeout": 15.0, "poll_interval": 0.1, "retries": 2},
    "evacuation": {"poll_interval": 0.1, "cleanup_check_interval": 0.5,
                   "concurrency": 10, "retry_backoff": 2.0,
                   "stall_timeout": 5.0, "server_retry_delay": 0.5,
                   # Its API answers at once: no request waits in a queue.
                   "unanswered_request_wait": 3.0},
    # The simulator's hosts boot in 2 s.
    "policy": {"resume_boot_time": 3.0},
    "control_plane": {"poll_interval": 0.5},
    # Often enough for a test to see a BMC fixed; not every 2 s on the
    # benchmarks' thousands of hosts.
    "audit": {"interval": 10.0},
}


#: The simulated agents' networks: each path beats from its own loopback
#: address (the whole of 127.0.0.0/8 is local on Linux).
MGMT = {"mgmt": "127.0.0.1"}
TWO_PATHS = {"mgmt": "127.0.0.1", "storage": "127.0.0.2"}
KEY_FILE = "agent.key"
MASTER_KEY_FILE = "master.key"


@dataclasses.dataclass
class AgentSetup:
    """Where the engine hears the simulated agents and where they hear
    it: written into the engine's ``[agent]`` by :func:`write_config`,
    given to ``instanceha.sim.agents.SimAgents`` by :meth:`sim_args`."""
    key_file: Optional[str]
    listen_port: int
    request_port: int
    paths: Dict[str, str]
    interval: float = 1.0
    #: Each host's own key derived from it (the engine's master key);
    #: None: one shared key_file for every host.
    master_key_file: Optional[str] = None

    @property
    def engines(self) -> List[str]:
        return ["127.0.0.1:%d" % self.listen_port]

    def engine_options(self):
        """The engine's ``[agent]`` options."""
        options = {"listen_addresses": self.engines,
                   "request_port": self.request_port}
        if self.key_file:
            options["key_file"] = self.key_file
        if self.master_key_file:
            options["master_key_file"] = self.master_key_file
            options["accept_shared_key"] = bool(self.key_file)
        return options

    def sim_args(self):
        """Keyword arguments of ``SimAgents(cloud, **setup.sim_args())``."""
        return {"engines": self.engines,
                "keyring": keys.load_keyring(self.key_file)
                if self.key_file else None,
                "master_key": keys.load_key(self.master_key_file)
                if self.master_key_file else None,
                "paths": dict(self.paths),
                "request_port": self.request_port,
                "interval": self.interval}


def write_key(path):
    """A new random key file at ``path``, mode 0600; returns ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)       # an older file's mode is not kept
    return path


def _free_udp_port(addresses, attempts=50):
    """A UDP port free on every one of ``addresses`` now (whoever binds
    it later may still race another process for it)."""
    for _ in range(attempts):
        socks = []
        try:
            first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(first)
            first.bind((addresses[0], 0))
            port = first.getsockname()[1]
            for address in addresses[1:]:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(sock)
                sock.bind((address, port))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise OSError("no UDP port free on %s" % ", ".join(addresses))


def agent_setup(workdir, two_paths=False, interval=1.0, host_keys=False):
    """Prepare heartbeat agents for the simulated cloud: a key file (mode
    0600) in ``workdir``, a free UDP port for the engine's listener on
    127.0.0.1 and one for the agents' requests on every path address.
    ``two_paths``: beats go over "mgmt" (127.0.0.1) and "storage"
    (127.0.0.2), else over "mgmt" only. Then::

        setup = simrun.agent_setup(workdir)
        path = simrun.write_config(workdir, srv, agents=setup)
        agents = SimAgents(cloud, **setup.sim_args()).start()

    ``host_keys``: a master key file instead of the shared key: the
    engine derives each host's own key from it, as the agents do.

    (The agents are started by the caller: this module stays out of the
    agent's code, which the ``instanceha demo`` command must not import.)
    """
    os.makedirs(workdir, exist_ok=True)
    paths = dict(TWO_PATHS if two_paths else MGMT)
    where = os.path.abspath(workdir)
    key_file = master = None
    if host_keys:
        master = write_key(os.path.join(where, MASTER_KEY_FILE))
    else:
        key_file = write_key(os.path.join(where, KEY_FILE))
    return AgentSetup(key_file=key_file,
                      listen_port=_free_udp_port(["127.0.0.1"]),
                      request_port=_free_udp_port(list(paths.values())),
                      paths=paths, interval=float(interval),
                      master_key_file=master)


def write_config(workdir, server, overrides=None,
                 agents: Optional[AgentSetup] = None):
    """Write clouds.yaml, bmc.yaml and instanceha.conf into ``workdir``.

    ``overrides`` is {group: {option: value}}; ``agents`` (see
    :func:`agent_setup`) turns the engine's heartbeat listener on (no
    agents by default). Returns the conf file path.
    """
    os.makedirs(workdir, exist_ok=True)
    clouds, bmc = server.write_client_files(workdir)
    groups = {g: dict(v) for g, v in FAST.items()}
    groups["DEFAULT"].update(
        cloud="sim", clouds_file=clouds,
        status_file=os.path.join(workdir, "status.json"))
    groups.setdefault("fencing", {})["inventory"] = bmc
    groups["journal"] = {"connection": "sqlite:///" + os.path.join(
        workdir, "journal.sqlite")}
    # The operator API's socket, in a directory closed to other users (a
    # short one where the workdir's path is too long for a unix socket).
    run = os.path.join(os.path.abspath(workdir), "run")
    if len(run) > 90:
        run = tempfile.mkdtemp(prefix="instanceha-api-")
    os.makedirs(run, mode=0o700, exist_ok=True)
    groups["api"]["unix_socket"] = os.path.join(run, "api.sock")
    if agents is not None:
        groups["agent"] = agents.engine_options()
    for group, values in (overrides or {}).items():
        groups.setdefault(group, {}).update(values)
    return write_conf_file(os.path.join(workdir, "instanceha.conf"), groups)


def write_conf_file(path, groups):
    """Write {group: {option: value}} as an oslo.config file; return path."""
    with open(path, "w") as f:
        for group in sorted(groups, key=lambda g: g != "DEFAULT"):
            f.write("[%s]\n" % group)
            for key, value in groups[group].items():
                if isinstance(value, bool):
                    value = str(value).lower()
                elif isinstance(value, (list, tuple)):
                    value = ",".join(str(v) for v in value)
                f.write("%s = %s\n" % (key, value))
            f.write("\n")
    return path
