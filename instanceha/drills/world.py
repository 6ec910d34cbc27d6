"""What the simulated world says, read from a SimCloud: the facts the
drills' verdicts (and the simulator's functional tests) are judged on.
Each function takes the cloud (instanceha.sim.SimCloud) and reads one
consistent snapshot of it."""


def powered_off(cloud):
    """The hosts whose BMC reads Off, sorted."""
    return sorted(n for n, h in cloud.snapshot()["hosts"].items()
                  if h["power"] == "off")


def servers_on(cloud, host):
    """The ids of the servers Nova places on ``host``."""
    return {sid for sid, s in cloud.snapshot()["servers"].items()
            if s["host"] == host}


def computes_down(cloud, besides=()):
    """The hosts whose nova-compute does not run, sorted, ``besides``
    left out."""
    return sorted(h for h, v in cloud.snapshot()["hosts"].items()
                  if not v["compute_alive"] and h not in besides)


def misplaced(cloud, servers, gone):
    """Of ``servers`` (ids), each that is not ACTIVE with no task on a
    host outside ``gone`` whose compute runs: "name is STATUS on HOST"."""
    snap = cloud.snapshot()
    wrong = []
    for sid in sorted(servers):
        s = snap["servers"][sid]
        host = s["host"]
        alive = host in snap["hosts"] and snap["hosts"][host]["compute_alive"]
        if (s["status"] != "ACTIVE" or s["task_state"] is not None
                or host in gone or not alive):
            wrong.append("%s is %s on %s" % (s["name"], s["status"], host))
    return wrong


def safety_breaches(cloud):
    """What must never happen, as the simulator recorded it: an
    evacuate request for a server whose host was powered on at that
    moment, a guest running on two hosts, a server rebuilt on two hosts
    at once. Empty when none happened."""
    cloud.now()                     # let the simulated time catch up
    snap = cloud.snapshot()
    found = []
    unsafe = cloud.unsafe_evacuate_requests()
    if unsafe:
        found.append("%d evacuate request(s) for servers whose host was "
                     "powered on" % len(unsafe))
    if snap["double_running"]:
        found.append("guests running on two hosts: %s"
                     % snap["double_running"])
    if snap["double_rebuilds"]:
        found.append("servers rebuilt on two hosts at once: %s"
                     % snap["double_rebuilds"])
    return found


def service(cloud, host):
    """The host's nova-compute service record (status, forced_down,
    disabled_reason)."""
    return cloud.snapshot()["services"][host]
