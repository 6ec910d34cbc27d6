"""Failover capacity on real Nova with Placement (issue 38 part 1): the
bed's computes are filled until the cloud cannot lose a host, and
``instanceha capacity``, status and /metrics say so.

A flavor takes 55 % of a compute's RAM: one fits on each compute, two
never on one. One such server on the first compute: losing it puts the
server on either other: the cloud can lose at least one host. One on each
compute: a lost compute's server has room nowhere: 0.

Budgets: the measure runs every 10 s; each wait is for a condition with
120 s (a measure, Placement's allocation, a status write on a loaded
2-core machine).
"""

import json
import re
import subprocess
import sys
import time

from functional.realnova.engine import boot_on

FLAVOR = "iha.failover-huge"
BUDGET = 120.0


def _cli(eng, *args):
    return subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", *args,
         "--config-file", eng.conf_path],
        capture_output=True, text=True, timeout=60)


def _capacity(eng):
    out = _cli(eng, "capacity", "--json")
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)


def _cloud(eng):
    data = _capacity(eng) or {}
    return {s["scope"]: s["hosts"] for s in data.get("scopes") or []} \
        .get("cloud")


def _metric(eng, scope):
    status, _, body = eng.api("GET", "/metrics")
    assert status == 200, body
    m = re.search(r'^instanceha_failover_capacity_hosts\{scope="%s"\} '
                  r'(\S+)$' % re.escape(scope), body.decode(), re.M)
    return None if m is None else float(m.group(1))


def _until(what, predicate, eng):
    deadline = time.monotonic() + BUDGET
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError("%s within %.0f s (capacity: %s; engine log: %s)"
                         % (what, BUDGET, _capacity(eng), eng.log_path))


def _huge_flavor(bed):
    hv = bed.cloud.get("/os-hypervisors/detail", "2.53")["hypervisors"]
    ram = int(min(h["memory_mb"] for h in hv) * 0.55)
    bed.cloud.call("DELETE", "/flavors/%s" % FLAVOR, ok=(202, 404))
    bed.cloud.call("POST", "/flavors", {"flavor": {
        "name": FLAVOR, "id": FLAVOR, "ram": ram, "vcpus": 1, "disk": 1}})


def test_filled_computes_drop_the_cloud_to_zero(clean_bed, engine):
    bed = clean_bed
    _huge_flavor(bed)
    try:
        first = boot_on(bed, bed.hosts[0], 1, name="huge", flavor=FLAVOR)
        eng = engine({"failover_capacity": {"enabled": True, "interval": 10.0}}).start()
        _until("the cloud can lose a host", lambda: (_cloud(eng) or 0) >= 1,
               eng)
        for host in bed.hosts[1:]:
            boot_on(bed, host, 1, name="huge", flavor=FLAVOR)
        _until("the cloud at 0", lambda: _cloud(eng) == 0, eng)
        _until("/metrics at 0", lambda: _metric(eng, "cloud") == 0.0, eng)
        status = _cli(eng, "status")
        assert "failover capacity: " in status.stdout, status.stdout
        assert "would leave servers without room" in status.stdout, \
            status.stdout
        table = _cli(eng, "capacity")
        row = [line for line in table.stdout.splitlines()
               if line.startswith("cloud")]
        assert row and row[0].split()[1] == "0", table.stdout
        # The first server deleted: its compute has room for another's.
        bed.cloud.call("DELETE", "/servers/%s" % first[0], ok=(204, 404))
        _until("the cloud back at 1 or more",
               lambda: (_cloud(eng) or 0) >= 1, eng)
    finally:
        bed.cloud.delete_all_servers()
        bed.cloud.call("DELETE", "/flavors/%s" % FLAVOR, ok=(202, 404))
