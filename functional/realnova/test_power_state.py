"""Power state across a recovery on real Nova (instanceha.policy.power).

A host dies carrying three servers: one ACTIVE, one its owner stopped, and
one stopped then reset to error (vm_state error, power_state still
SHUTDOWN: what Nova leaves when an evacuation of a stopped server found no
valid host). Nova 34 powers the stopped one off again after its rebuild;
it starts the one in error, which instanceha then stops. Read through
Nova's API only.
"""

import time

from functional.peers import procs

SHUTDOWN = 4        # nova/compute/power_state.py


def _action(bed, sid, body):
    bed.cloud.call("POST", "/servers/%s/action" % sid, body)


def test_power_state_kept_across_evacuation(bed, engine):
    host = bed.hosts[1]
    ids = bed.cloud.boot(host, 3, name="power")
    bed.cloud.wait_servers(ids, host=host)
    active, stopped, errored = ids
    for sid in (stopped, errored):
        _action(bed, sid, {"os-stop": None})
    bed.cloud.wait_servers([stopped, errored], status="SHUTOFF", host=host,
                           timeout=60)
    _action(bed, errored, {"os-resetState": {"state": "error"}})
    s = bed.cloud.server(errored)
    assert (s["status"], s["OS-EXT-STS:power_state"]) == ("ERROR", SHUTDOWN)

    eng = engine().start()
    t0 = time.monotonic()
    bed.cloud.kill_compute(host)
    state, reason = eng.wait_state(host, "evacuated", timeout=90)
    assert "3/3 servers evacuated" in reason, reason
    live = [h for h in bed.hosts if h != host]

    def settled():
        servers = {sid: bed.cloud.server(sid) for sid in ids}
        return all(s["OS-EXT-STS:task_state"] is None
                   and s["OS-EXT-SRV-ATTR:host"] in live
                   and s["status"] in ("ACTIVE", "SHUTOFF")
                   for s in servers.values()) and servers
    servers = procs.wait_until(settled, 30, "servers settled on live hosts",
                               "nova", bed.cloud.log_of("nova-conductor"),
                               interval=0.5)
    # The stop of the one in error is asked once it is ACTIVE; it may
    # still be running for a moment.
    if servers[errored]["status"] != "SHUTOFF":
        servers[errored] = bed.cloud.wait_servers(
            [errored], status="SHUTOFF", timeout=30)[0]
    assert servers[active]["status"] == "ACTIVE"
    assert servers[stopped]["status"] == "SHUTOFF"
    assert servers[errored]["status"] == "SHUTOFF"
    for sid in (stopped, errored):
        assert servers[sid]["OS-EXT-STS:power_state"] == SHUTDOWN
    log = eng.log_text()
    assert "evacuated_server_stopped" in log and errored in log
    evacs = eng.journal().evacuations()
    assert {e["server_id"] for e in evacs} == set(ids)
    assert {e["status"] for e in evacs} == {"done"}
    assert time.monotonic() - t0 < 90
