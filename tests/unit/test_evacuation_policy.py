"""The recovery policies wired into the evacuator (engine.selection):
which servers of a fenced host are evacuated, which stay and why (journal
and host reason), and in what order. The engine with in-memory Nova."""

from instanceha.drivers.compute.base import Aggregate
from tests.unit.test_engine import World


def _world(servers=4, **recovery):
    w = World(hosts=3, servers=servers)
    for key, value in recovery.items():
        w.conf.set_override(key, value, "recovery")
    return w


def _recover(w, host="compute-1"):
    w.pass_()
    w.compute.kill(host)
    for _ in range(30):
        w.pass_()
        if w.state(host)[0] in ("evacuated", "failed"):
            break
    return w.state(host)


def _sent(w, host="compute-1"):
    return [m["server"] for m in w.compute.migrations
            if m["source"] == host]


def test_priority_orders_the_evacuation():
    w = _world(servers=4)
    vms = ["compute-1-vm-%d" % i for i in range(4)]
    w.compute.servers[vms[2]]["metadata"] = {"instanceha:priority": "10"}
    w.compute.servers[vms[3]]["metadata"] = {"instanceha:priority": "5"}
    w.compute.servers[vms[0]]["metadata"] = {"instanceha:priority": "-1"}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert _sent(w) == [vms[2], vms[3], vms[1], vms[0]]


def test_tagging_leaves_untagged_servers_and_says_why():
    w = _world(servers=3, evacuable_tagging=True)
    vms = ["compute-1-vm-%d" % i for i in range(3)]
    w.compute.servers[vms[0]]["metadata"] = {"evacuable": "true"}
    w.compute.servers[vms[1]]["metadata"] = {"evacuable": "TRUE"}
    w.compute.servers[vms[2]]["metadata"] = {"evacuable": "maybe"}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert sorted(_sent(w)) == vms[:2]
    assert "2/2 servers evacuated, 1 not evacuable (%s:" % vms[2] in reason
    rows = {r["server_id"]: r for r in w.journal.evacuations()
            if r["status"] == "skipped"}
    assert list(rows) == [vms[2]] and rows[vms[2]]["detail"]
    assert w.compute.servers[vms[2]]["host"] == "compute-1"


def test_aggregate_metadata_tags_every_server_of_its_hosts():
    w = _world(servers=2, evacuable_tagging=True)
    w.compute.aggregates = [Aggregate("ha-hosts", ("compute-1",),
                                      metadata={"evacuable": "true"})]
    vms = ["compute-1-vm-0", "compute-1-vm-1"]
    w.compute.servers[vms[1]]["metadata"] = {"evacuable": "false"}
    state, reason = _recover(w)
    assert _sent(w) == [vms[0]]                 # nearest scope wins
    assert "server %s says evacuable=false" % vms[1] in reason or \
        "evacuable=false" in reason, reason


def test_repair_level_none_and_suspension_keep_servers_on_the_host():
    w = _world(servers=3)
    vms = ["compute-1-vm-%d" % i for i in range(3)]
    w.compute.servers[vms[0]]["metadata"] = {"instanceha:repair": "none"}
    w.compute.servers[vms[1]]["metadata"] = {
        "instanceha:suspended_until": "forever"}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert _sent(w) == [vms[2]]
    skipped = {r["server_id"]: r["detail"] for r in w.journal.evacuations()
               if r["status"] == "skipped"}
    assert sorted(skipped) == vms[:2]
    assert all(skipped.values())
