"""Failover capacity on the simulator with the real engine (Placement's
counts over HTTP): the cloud is filled until a zone can no longer lose
its largest host, and status, ``instanceha capacity`` and /metrics say so;
emptied again, they say it can.

Two zones of two hosts (8 vCPU each, two servers of 2 vCPU on each):
either host of a zone can fail with its servers placed on the other (4
free): 1 per zone; the cloud can lose two of its four hosts. A server
booted on compute-1 leaves it 2 free: losing compute-1 puts 6 vCPU on
compute-0's 4: zone az1 falls to 0.

Budget: the measure runs every 10 s; each wait is for a condition, 90 s
(a measure and a status write on a loaded 2-core machine).
"""

import json
import re

from functional import waiting

ZONES = {"az1": {"hosts": ["compute-0", "compute-1"],
                 "availability_zone": "az1"},
         "az2": {"hosts": ["compute-2", "compute-3"],
                 "availability_zone": "az2"}}


def _capacity(c):
    out = c.cli("capacity", "--json")
    if out.returncode != 0:
        return None
    data = json.loads(out.stdout)
    return {s["scope"]: s["hosts"] for s in data["scopes"]}


def _metric(c, scope):
    status, _, body = c.engine.api("GET", "/metrics")
    assert status == 200, body
    m = re.search(r'^instanceha_failover_capacity_hosts\{scope="%s"\} '
                  r'(\S+)$' % re.escape(scope), body.decode(), re.M)
    return None if m is None else float(m.group(1))


def _wait(c, predicate, what):
    return waiting.wait_for(predicate, 90, lambda: "%s (capacity: %s; "
                            "engine log: %s)" % (what, _capacity(c),
                                                 c.log_path), interval=0.5)


def test_filling_a_zone_drops_it_to_zero_and_status_and_metrics_say_so(
        make_cloud):
    c = make_cloud({"failover_capacity": {"enabled": True, "interval": 10.0}}, hosts=4,
                   servers_per_host=2, host_vcpus=8, server_vcpus=2,
                   aggregates=ZONES)
    c.start_engine()
    # (The zones' aggregates are the zones: no scope of their own.)
    _wait(c, lambda: _capacity(c) == {"zone:az1": 1, "zone:az2": 1,
                                      "cloud": 2}, "the first measure")
    assert _metric(c, "zone:az1") == 1.0
    # One more server on compute-1.
    server = c.sim.create_server("filler", "1", c.sim.default_image,
                                 host="compute-1")
    _wait(c, lambda: (_capacity(c) or {}).get("zone:az1") == 0,
          "zone az1 at 0")
    got = _capacity(c)
    assert got["zone:az2"] == 1 and got["cloud"] == 1, got
    _wait(c, lambda: _metric(c, "zone:az1") == 0.0, "/metrics at 0")
    out = c.cli("status")
    assert "failover capacity: zone:az1: losing its largest host " \
           "(compute-1) would leave servers without room" in out.stdout, \
        out.stdout
    table = c.cli("capacity")
    row = [line for line in table.stdout.splitlines()
           if line.startswith("zone:az1")]
    assert row and row[0].split()[1] == "0" and row[0].endswith("!"), \
        table.stdout
    # Its owner deletes it: az1 can lose a host again.
    c.sim.delete_server(server.id)
    _wait(c, lambda: (_capacity(c) or {}).get("zone:az1") == 1,
          "zone az1 back at 1")
