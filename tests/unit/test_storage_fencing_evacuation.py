"""A host fenced by a level of storage fencing only (it may still run):
which of its servers may be evacuated (policy.storage_fence), and the
engine's whole recovery through such a level (the power level fails, the
Ceph level fences; only servers whose disks are on Ceph leave; the
blocklist is removed once the host is back and cleaned up, before its
service is put back)."""

import pytest

from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.policy import storage_fence
from tests.unit import fakes
from tests.unit.test_engine import World

FLAVOR = {"ephemeral": 0, "swap": 0}


@pytest.mark.parametrize("body, protects, stays", [
    # booted from a volume, no local disk: on Ceph with volumes
    ({"image": "", "flavor": FLAVOR}, ["volumes"], None),
    ({"image": {}, "flavor": FLAVOR}, ["volumes"], None),
    # ... but not when Ceph holds only Nova's disks
    ({"image": "", "flavor": FLAVOR}, ["ephemeral"], "booted from a volume"),
    # image-backed: its root disk is local unless images_type = rbd
    ({"image": {"id": "i"}, "flavor": FLAVOR}, ["volumes"],
     "its root disk is local"),
    ({"image": {"id": "i"}, "flavor": FLAVOR}, ["ephemeral"], None),
    # a volume attached to an rbd-backed server needs volumes on Ceph too
    ({"image": {"id": "i"}, "flavor": FLAVOR,
      "os-extended-volumes:volumes_attached": [{"id": "v"}]},
     ["ephemeral"], "volumes attached"),
    # local ephemeral or swap disks of a volume-backed server
    ({"image": "", "flavor": {"ephemeral": 10, "swap": 0}}, ["volumes"],
     "an ephemeral disk local"),
    ({"image": "", "flavor": {"ephemeral": 0, "swap": 512}}, ["volumes"],
     "swap local"),
    ({"image": "", "flavor": {"ephemeral": 0, "swap": ""}}, ["volumes"],
     None),
    ({"image": "", "flavor": {"ephemeral": 0, "swap": 512}},
     ["volumes", "ephemeral"], None),
    # not knowing is staying
    ({"image": ""}, ["volumes"], "flavor (ephemeral and swap disks) is not"),
    ({"image": "", "flavor": {"ephemeral": 0}}, ["volumes"],
     "does not say its swap size"),
    ({"image": "", "flavor": FLAVOR}, [], "holds nothing of it"),
])
def test_only_servers_whose_disks_are_all_on_the_fenced_storage(
        body, protects, stays):
    why = storage_fence.why_not_evacuated(body, protects)
    if stays is None:
        assert why is None
    else:
        assert why is not None and stays in why, why


class CephFake(fb.FencingDriver):
    """A storage fencing method over a fake blocklist; records the order
    of its calls against Nova's forced_down flag."""
    name = "ceph_blocklist"
    proves = fb.STORAGE

    def __init__(self, compute):
        self.compute = compute
        self.listed = set()
        self.log = []

    def fence(self, bmc):
        self.listed.add(bmc.host)
        self.log.append("fence")

    def still_fenced(self, bmc):
        return None if bmc.host in self.listed else "not listed"

    def unfence(self, bmc):
        self.log.append(("unfence", self.compute.services[bmc.host]
                         ["forced_down"]))
        self.listed.discard(bmc.host)

    def power_off(self, bmc):
        raise AssertionError("powers nothing off")

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


def _world():
    w = World(refuse=("compute-1",))            # its BMC refuses
    ceph = CephFake(w.compute)
    drivers = {"fake": w.fencer, "ceph_blocklist": ceph}
    w.ctx.fencer = drivers.__getitem__
    w.ctx.inventory["compute-1"] = BMC(
        host="compute-1", driver="fake", address="bmc-compute-1",
        fallbacks=(BMC(host="compute-1", driver="ceph_blocklist",
                       options={"addresses": ["10.0.1.1"],
                                "protects": ["volumes"]}),),
        grouping=(1, 1))
    # vm-0 boots from a volume (on Ceph); vm-1 from an image (local disk).
    w.compute.servers["compute-1-vm-1"]["image"] = "image-1"
    return w, ceph


def test_storage_level_evacuates_only_ceph_servers_and_unfences_at_putback():
    w, ceph = _world()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    rec = w.engine.find("compute-1")
    assert (rec.proven_by, rec.fenced_level, rec.storage_protects) == \
        ("storage", 2, ("volumes",))
    assert ceph.listed == {"compute-1"} and w.fencer.powered_off == []
    # Which level fenced, in the journal's record of the fence.
    fenced = [t for t in w.journal.transitions()
              if t["host_name"] == "compute-1" and t["dst"] == "fenced"][-1]
    assert fenced["reason"].startswith(
        "cut off its storage, not powered off: fenced by level 2 (ceph_blocklist) after level 1 (fake "
        "bmc-compute-1) failed: compute-1: BMC refused power off; storage "
        "fencing only"), fenced["reason"]
    # ... and in status, while its recovery lasts.
    host = next(h for h in w.engine.snapshot()["hosts"]
                if h["name"] == "compute-1")
    assert host["fenced_by"] == {"level": 2, "proof": "storage",
                                 "protects": ["volumes"]}
    from instanceha.cmd import status as status_cmd
    text = status_cmd.format_status(w.engine.snapshot(), now=w.clock())
    line = next(x for x in text.splitlines() if x.startswith("compute-1"))
    assert line.endswith("[fenced by level 2, storage only: only servers "
                         "on it (volumes) are evacuated]"), line
    # Only the volume-backed server left; the other stays, with why.
    servers = w.compute.servers
    assert servers["compute-1-vm-0"]["host"] != "compute-1"
    assert servers["compute-1-vm-1"]["host"] == "compute-1"
    state, reason = w.state("compute-1")
    assert reason.startswith("1/1 servers evacuated, 1 not evacuable "
                             "(compute-1-vm-1: its root disk is local"), \
        reason
    assert {(e["server_id"], e["status"]) for e in w.journal.evacuations()} \
        == {("compute-1-vm-0", "done"), ("compute-1-vm-1", "skipped")}
    # The host comes back and cleans up: the blocklist goes first, while
    # the service is still forced down; then the service is put back.
    w.compute.boot("compute-1")
    for _ in range(10):
        w.pass_()
    assert w.state("compute-1")[0] == "active"
    assert ceph.log == ["fence", ("unfence", True)]
    assert ceph.listed == set()
    assert not w.compute.services["compute-1"]["forced_down"]
    host = next(h for h in w.engine.snapshot()["hosts"]
                if h["name"] == "compute-1")
    assert "fenced_by" not in host


def test_no_evacuation_when_the_blocklist_no_longer_holds():
    w, ceph = _world()
    real = ceph.fence

    def fence_then_expire(bmc):
        real(bmc)
        ceph.listed.clear()          # expired, or removed by hand, at once
    ceph.fence = fence_then_expire
    w.pass_()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
    assert [e for e in w.journal.evacuations() if e["status"] != "skipped"] \
        == []
    assert all(v["host"] == "compute-1" for sid, v in
               w.compute.servers.items() if sid.startswith("compute-1"))
    reasons = [t["reason"] for t in w.journal.transitions()
               if t["host_name"] == "compute-1"]
    assert any("its fencing does not hold now: not listed" in r
               for r in reasons), reasons


def test_unfence_failing_keeps_the_service_forced_down():
    w, ceph = _world()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")

    def broken(bmc):
        raise fb.FenceError("monitor refused osd blocklist rm")
    ceph.unfence = broken
    w.compute.boot("compute-1")
    for _ in range(5):
        w.pass_()
    state, reason = w.state("compute-1")
    assert state == "recovering"
    assert "storage fencing could not be undone yet" in reason
    assert "monitor refused osd blocklist rm" in reason
    assert w.compute.services["compute-1"]["forced_down"]


def test_a_refused_force_down_leaves_the_blocklist_and_says_so():
    from instanceha.drivers.compute import base as cb
    w, ceph = _world()
    w.compute.fail["force_down"] = [cb.Conflict("HTTP 409: refused", 409)]
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "failed")
    state, reason = w.state("compute-1")
    assert "HTTP 409: refused; its storage fencing (Ceph blocklist) stays" \
        in reason, reason
    assert ceph.listed == {"compute-1"}
    assert isinstance(w.fencer, fakes.FakeFencer)


class TimeFake(fb.FencingDriver):
    """A method proving the host down by time (a watchdog's deadline):
    no power, no storage; the host is down once it says so."""
    name = "watchdog"

    def __init__(self):
        self.holds = None            # still_fenced's answer
        self.reads = 0

    def fence(self, bmc):
        return None

    def still_fenced(self, bmc):
        self.reads += 1
        return self.holds

    def power_off(self, bmc):
        raise AssertionError("powers nothing off")

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


def _time_world():
    w = World(refuse=("compute-1",))
    timed = TimeFake()
    drivers = {"fake": w.fencer, "watchdog": timed}
    w.ctx.fencer = drivers.__getitem__
    w.ctx.inventory["compute-1"] = BMC(
        host="compute-1", driver="fake", address="bmc-compute-1",
        fallbacks=(BMC(host="compute-1", driver="watchdog"),),
        grouping=(1, 1))
    w.compute.servers["compute-1-vm-1"]["image"] = "image-1"
    return w, timed


def test_a_level_proving_death_without_power_is_reproven_by_its_method():
    """A level with no power method that proves the host down (not
    storage only): every server goes, and the re-proof asks that method,
    not the BMC (which does not answer)."""
    w, timed = _time_world()
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    rec = w.engine.find("compute-1")
    assert (rec.proven_by, rec.fenced_level) == ("power", 2)
    assert timed.reads >= 1
    assert all(w.compute.servers["compute-1-vm-%d" % i]["host"]
               != "compute-1" for i in (0, 1))


def test_a_powerless_level_that_no_longer_holds_evacuates_nothing():
    w, timed = _time_world()
    timed.holds = "the host beat again"
    w.pass_()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
    assert [e for e in w.journal.evacuations()] == []
    reasons = [t["reason"] for t in w.journal.transitions()
               if t["host_name"] == "compute-1"]
    assert any("its fencing does not hold now: the host beat again" in r
               for r in reasons), reasons
