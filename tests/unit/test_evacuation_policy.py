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


def test_image_properties_and_tags_are_consulted():
    """Evacuable tagging reads each server's Glance image: a property or
    a tag on the image opts its servers in; the server's own metadata
    still wins (nearest scope)."""
    w = _world(servers=4, evacuable_tagging=True)
    vms = ["compute-1-vm-%d" % i for i in range(4)]
    w.compute.images = {"img-ha": {"name": "ha", "evacuable": "True"},
                        "img-tag": {"name": "tagged", "tags": ["evacuable"]},
                        "img-plain": {"name": "plain"}}
    for vm, image in zip(vms, ("img-ha", "img-tag", "img-plain", "img-ha")):
        w.compute.servers[vm]["image"] = image
    w.compute.servers[vms[3]]["metadata"] = {"evacuable": "false"}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert sorted(_sent(w)) == vms[:2]
    skipped = {r["server_id"]: r["detail"] for r in w.journal.evacuations()
               if r["status"] == "skipped"}
    assert sorted(skipped) == vms[2:]
    assert "evacuable=false" in skipped[vms[3]], skipped


def test_a_deleted_image_counts_as_saying_nothing():
    w = _world(servers=1, evacuable_tagging=True, evacuable_when_untagged=True)
    w.compute.servers["compute-1-vm-0"]["image"] = "img-gone"
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert _sent(w) == ["compute-1-vm-0"]


def test_image_scope_off_reads_no_image():
    w = _world(servers=1, evacuable_tagging=True,
               evacuable_sources=["server", "flavor", "aggregate"])
    w.compute.servers["compute-1-vm-0"]["image"] = "img-ha"
    w.compute.images = {"img-ha": {"evacuable": "true"}}
    reads = []
    w.compute.get_image = lambda iid: reads.append(iid) or {}
    _recover(w)
    assert reads == [] and _sent(w) == []      # untagged: left


def test_expired_markers_are_removed_where_they_were_found():
    w = _world(servers=2)
    vms = ["compute-1-vm-0", "compute-1-vm-1"]
    past = "1970-01-02T00:00:00Z"
    w.compute.servers[vms[0]]["metadata"] = {
        "instanceha:suspended_until": past, "keep": "me"}
    w.compute.aggregates = [Aggregate(
        "rack", ("compute-1",), id="7",
        metadata={"instanceha:suspended_until": past, "other": "x"})]
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert sorted(_sent(w)) == vms          # expired: no effect
    assert w.compute.servers[vms[0]]["metadata"] == {"keep": "me"}
    assert dict(w.compute.aggregates[0].metadata) == {"other": "x"}


def test_a_marker_renewed_since_it_was_read_is_kept():
    w = _world(servers=1)
    vm = "compute-1-vm-0"
    w.compute.servers[vm]["metadata"] = {
        "instanceha:suspended_until": "1970-01-02T00:00:00Z"}
    real = w.compute.get_server
    renewed = {"instanceha:suspended_until": "forever"}

    def get_server(sid):
        # The operator renews the marker between the listing and the
        # re-read before the removal.
        w.compute.servers[vm]["metadata"] = dict(renewed)
        return real(sid)

    w.compute.get_server = get_server
    _recover(w)
    assert w.compute.servers[vm]["metadata"] == renewed


def test_markers_stay_when_removal_is_off():
    w = _world(servers=1, remove_expired_markers=False)
    vm = "compute-1-vm-0"
    marker = {"instanceha:suspended_until": "1970-01-02T00:00:00Z"}
    w.compute.servers[vm]["metadata"] = dict(marker)
    state, _ = _recover(w)
    assert state == "evacuated"
    assert w.compute.servers[vm]["metadata"] == marker


# -- service-owned servers (issue 25: [instance_repair] exclusions) ----------

def _owned_world():
    """compute-1's vm-0 is in the Octavia project, vm-1 carries the
    amphora tag, vm-2 boots from an image tagged amphora, vm-3 is a
    tenant's. Instance repair stays off: the exclusions apply all the
    same."""
    w = _world(servers=4)
    w.conf.set_override("excluded_projects", ["octavia-svc"],
                        "instance_repair")
    w.conf.set_override("excluded_tags", ["amphora"], "instance_repair")
    assert not w.conf.instance_repair.enabled
    vms = ["compute-1-vm-%d" % i for i in range(4)]
    w.compute.servers[vms[0]]["project"] = "octavia-svc"
    w.compute.servers[vms[1]]["tags"] = ["amphora"]
    w.compute.images = {"img-amp": {"name": "amphora-x64-haproxy",
                                    "tags": ["amphora"]},
                        "img-plain": {"name": "plain"}}
    w.compute.servers[vms[2]]["image"] = "img-amp"
    w.compute.servers[vms[3]]["image"] = "img-plain"
    w.compute.servers[vms[3]]["project"] = "tenant"
    return w, vms


def test_service_owned_servers_stay_on_the_lost_host_and_say_why():
    w, vms = _owned_world()
    state, reason = _recover(w)
    assert state == "evacuated", reason
    # Only the tenant's server was sent; the others were never asked for.
    assert _sent(w) == [vms[3]]
    assert set(w.compute.requested) == {vms[3]}
    assert "1/1 servers evacuated, 3 not evacuable" in reason, reason
    for vm in vms[:3]:
        assert w.compute.servers[vm]["host"] == "compute-1"
    skipped = {r["server_id"]: r["detail"] for r in w.journal.evacuations()
               if r["status"] == "skipped"}
    assert sorted(skipped) == vms[:3]
    assert "project octavia-svc is in [instance_repair] excluded_projects" \
        in skipped[vms[0]]
    assert "server tag amphora is in [instance_repair] excluded_tags" \
        in skipped[vms[1]]
    assert "image amphora-x64-haproxy has the tag amphora" in skipped[vms[2]]
    # Nothing but the lost host was powered off.
    assert w.fencer.powered_off == ["compute-1"]


def test_an_exclusion_wins_over_an_evacuable_tag():
    w, vms = _owned_world()
    w.conf.set_override("evacuable_tagging", True, "recovery")
    for vm in vms:
        w.compute.servers[vm]["metadata"] = {"evacuable": "true"}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert _sent(w) == [vms[3]]


def test_without_exclusions_no_image_is_read_and_all_go():
    w, vms = _owned_world()
    w.conf.set_override("excluded_projects", [], "instance_repair")
    w.conf.set_override("excluded_tags", [], "instance_repair")
    reads = []
    w.compute.get_image = lambda iid: reads.append(iid) or {}
    state, reason = _recover(w)
    assert state == "evacuated", reason
    assert sorted(_sent(w)) == vms and reads == []


def test_policy_explain_says_service_owned_and_the_restart_group():
    from instanceha.engine import selection
    w, vms = _owned_world()
    w.compute.servers[vms[3]]["metadata"] = {
        "instanceha:restart_group": "2"}
    w.compute.servers[vms[1]]["metadata"] = {
        "instanceha:restart_group": "db"}
    lines = selection.explain(w.conf, w.compute, vms[2], w.clock())
    assert "service-owned: image amphora-x64-haproxy has the tag " \
        "amphora" in "\n".join(lines)
    assert lines[-1].startswith("decision: left on its host: image "
                                "amphora-x64-haproxy"), lines
    lines = selection.explain(w.conf, w.compute, vms[3], w.clock())
    assert "service-owned: no" in lines and "restart group: 2" in lines
    assert lines[-1] == "decision: evacuated if its host is lost"
    lines = selection.explain(w.conf, w.compute, vms[1], w.clock())
    assert any(line.startswith("restart group: none: ") and "'db'" in line
               for line in lines), lines
