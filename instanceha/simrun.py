"""Point a real instanceha at a simulated cloud: write its configuration.

Used by ``instanceha demo``, the functional tests and the benchmarks, so
they all run the same engine with the same drivers over HTTP; only the
timings are shortened to the simulator's.
"""

import os
import tempfile

#: Settings matched to the simulator's defaults (report_interval 1 s,
#: service_down_time 4 s), so a death is seen in seconds, not minutes.
FAST = {
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


def write_config(workdir, server, overrides=None):
    """Write clouds.yaml, bmc.yaml and instanceha.conf into ``workdir``.

    ``overrides`` is {group: {option: value}}. Returns the conf file path.
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
