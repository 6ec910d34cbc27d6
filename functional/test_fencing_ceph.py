"""The ceph_blocklist fencing method against a real Ceph monitor
(functional/peers/cephmon.py: Debian ceph-mon on loopback, its cluster
directory under the test's temporary directory, no OSD).

The driver talks to the monitor through librados (Debian python3-rados,
loaded from its directory by the driver itself: the venv does not see
Debian's packages). What the monitor holds is read independently with the
``ceph`` CLI. A missing ceph-mon, ceph CLI or python3-rados skips, or
fails naming it under INSTANCEHA_REQUIRE_SERVICES=1.
"""

import time

import pytest

from functional.events_fixtures import missing
from functional.peers import cephmon
from functional.peers.errors import PeerMissing
from functional.peers.procs import free_port
from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base, chain, inventory
from instanceha.drivers.fencing import ceph_blocklist

HOST = "compute-0"
ADDRESS = "127.0.0.5"
LISTED = "127.0.0.5:0/0"


@pytest.fixture(scope="module")
def mon(tmp_path_factory):
    peer = cephmon.CephMon(tmp_path_factory.mktemp("ceph"))
    try:
        peer.start()
    except PeerMissing as e:
        missing(str(e))
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def rados_module():
    try:
        return ceph_blocklist.load_rados(
            iha_conf.make({}).ceph_fencing.rados_path)
    except base.FenceError as e:
        missing("python3-rados is needed for this test (Debian package "
                "python3-rados; tools/test-packages.sh installs it): %s" % e)


def _driver(conf_file, rados_module, timeout=5):
    conf = iha_conf.make({"ceph_fencing": {"conf_file": str(conf_file),
                                           "timeout": timeout}})
    return ceph_blocklist.CephBlocklistDriver(conf, rados=rados_module)


@pytest.fixture
def driver(mon, rados_module):
    d = _driver(mon.conf, rados_module)
    yield d
    d.close()
    for addr in mon.blocklist():          # each test starts with none
        mon.ceph("osd", "blocklist", "rm", addr)


class DeadBMC(base.FencingDriver):
    """A power level whose BMC does not answer (the chassis lost power)."""
    name = "redfish"

    def power_off(self, bmc):
        raise base.BmcUnreachable("host %s: cannot reach BMC %s"
                                  % (bmc.host, bmc.address))

    def power_state(self, bmc):
        raise base.BmcUnreachable("unreachable")


def _entry():
    return inventory.parse({"hosts": {HOST: {"levels": [
        {"driver": "redfish", "address": "https://10.0.0.5",
         "password": "pw"},
        [{"driver": "ceph_blocklist", "addresses": [ADDRESS],
          "protects": ["volumes"]}],
    ]}}}, fencing.FIELDS)[HOST]


def test_the_storage_level_blocklists_in_the_mon_and_unfence_removes_it(
        mon, driver):
    bmc = _entry()
    drivers = {"redfish": DeadBMC(), "ceph_blocklist": driver}
    assert LISTED not in mon.blocklist()

    outcome = chain.fence(bmc, drivers.__getitem__)

    # The level after power fenced, by storage only, and says so.
    assert (outcome.level, outcome.scope, outcome.protects) == \
        (2, base.STORAGE, ("volumes",))
    assert "fenced by level 2 (ceph_blocklist)" in outcome.describe()
    assert "level 1 (redfish https://10.0.0.5) failed" in outcome.describe()
    # The monitor holds the entry (read with the ceph CLI, not the driver).
    assert LISTED in mon.blocklist()
    # ... for long, not Ceph's default hour.
    until = {e["addr"]: e["until"]
             for e in mon.ceph("osd", "blocklist", "ls")}[LISTED]
    assert int(until[:4]) >= time.gmtime().tm_year + 5
    assert chain.still_fenced(bmc, 2, drivers.__getitem__) is None

    chain.unfence(bmc, drivers.__getitem__)

    assert LISTED not in mon.blocklist()
    assert "no longer blocklisted" in chain.still_fenced(
        bmc, 2, drivers.__getitem__)


def test_an_entry_removed_behind_its_back_no_longer_proves(mon, driver):
    bmc = _entry()
    method = bmc.levels[1][0]
    driver.fence(method)
    assert driver.still_fenced(method) is None
    mon.ceph("osd", "blocklist", "rm", LISTED)
    assert "127.0.0.5:0/0 no longer blocklisted" in \
        driver.still_fenced(method)
    # Unfencing an entry already gone is no error.
    driver.unfence(method)
    assert LISTED not in mon.blocklist()


def test_a_mon_that_does_not_answer_is_unreachable(tmp_path, rados_module):
    conf_file = tmp_path / "ceph.conf"
    conf_file.write_text("[global]\nmon host = 127.0.0.1:%d\n"
                         "auth client required = none\n"
                         "ms bind msgr2 = false\nkeyring = /dev/null\n"
                         % free_port())
    d = _driver(conf_file, rados_module, timeout=1)
    with pytest.raises(base.BmcUnreachable, match="cannot connect"):
        d.fence(_entry().levels[1][0])
    d.close()


def test_the_audit_counts_the_ceph_level_ready_while_the_mon_answers(
        mon, driver, tmp_path, rados_module):
    """The readiness audit (issue 37): the power level's BMC does not
    answer, the Ceph level's monitor does: protected, by that level; with
    a monitor that does not answer either, unprotected, saying both."""
    from instanceha.sources import audit
    bmc = _entry()
    drivers = {"redfish": DeadBMC(), "ceph_blocklist": driver}
    (label, methods), = audit.powerless_levels(bmc)
    why = audit.read_ready(drivers.__getitem__, methods)
    readings = audit.readings(bmc, drivers.__getitem__)
    assert why is None
    reason, failed, by = audit.judge_levels(True, bmc, readings,
                                            [(label, why)])
    assert (reason, by) == (None, "level 2 (ceph_blocklist): ready")
    assert failed == ["redfish https://10.0.0.5: unreachable"]
    assert LISTED not in mon.blocklist()        # a read: nothing listed

    conf_file = tmp_path / "ceph.conf"
    conf_file.write_text("[global]\nmon host = 127.0.0.1:%d\n"
                         "auth client required = none\n"
                         "ms bind msgr2 = false\nkeyring = /dev/null\n"
                         % free_port())
    dead = _driver(conf_file, rados_module, timeout=1)
    try:
        why = audit.read_ready({"ceph_blocklist": dead}.__getitem__,
                               methods)
    finally:
        dead.close()
    assert "cannot connect" in why
    reason, _, by = audit.judge_levels(True, bmc, readings, [(label, why)])
    assert by is None and reason.startswith(
        "no fencing level can prove the host dead now: redfish "
        "https://10.0.0.5: unreachable; level 2 (ceph_blocklist): ")


def test_the_engine_blocklists_before_the_first_evacuation_and_unfences(
        mon, driver):
    """The engine's whole recovery (its fakes of Nova and of a BMC that
    refuses) through a Ceph level on the real monitor: the entry is in
    the monitor before the first evacuate request, only the server booted
    from a volume leaves, and the entry is gone once the host is back and
    put back."""
    from instanceha.drivers.fencing.inventory_entry import BMC
    from tests.unit.test_engine import World

    w = World(refuse=("compute-1",))
    drivers = {"fake": w.fencer, "ceph_blocklist": driver}
    w.ctx.fencer = drivers.__getitem__
    w.ctx.inventory["compute-1"] = BMC(
        host="compute-1", driver="fake", address="bmc-compute-1",
        fallbacks=(BMC(host="compute-1", driver="ceph_blocklist",
                       options={"addresses": [ADDRESS],
                                "protects": ["volumes"]}),),
        grouping=(1, 1))
    w.compute.servers["compute-1-vm-1"]["image"] = "image-1"
    seen = []
    w.compute.on_evacuate = lambda sid, dest: seen.append(
        (sid, LISTED in mon.blocklist()))
    w.pass_()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert seen == [("compute-1-vm-0", True)]
    assert w.compute.servers["compute-1-vm-1"]["host"] == "compute-1"
    w.compute.boot("compute-1")
    w.until("compute-1", "active")
    assert LISTED not in mon.blocklist()
    assert not w.compute.services["compute-1"]["forced_down"]
