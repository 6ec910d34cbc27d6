"""Issue 37 on the real bed: a host that loses power with its BMC.

A fake compute of real Nova dies together with its BMC: its nova-compute
and its agent are killed and its sushy-tools emulator is stopped at the
same moment, so nothing of it answers. Its inventory entry has fencing
levels: ``redfish`` first (it cannot answer), then a level proving the
host dead without a BMC. Every host runs a real ``instanceha-agent``
process with a watchdog on a *test device* (a plain file of the test's
directory whose reader plays the hardware, functional/realnova/
watchdog_hw.py: never /dev/watchdog or softdog) and the other hosts as its
peers.

(1) levels ``[redfish]``, ``[watchdog]``: the engine condemns the host,
    its peers take the poison pill, and once its watchdog deadline has
    passed its servers are rebuilt ACTIVE on another host by real Nova.
    The history says level 2 (watchdog) fenced it. The bed's evacuate
    recorder (functional/peers/evacwatch.py, checked by the invariant
    fixture) reads the host's power at each request: its BMC is gone, so
    the host counts as off only once its watchdog hardware has reset it
    (``Unknown`` before: the fixture fails the test); and every request
    left after the engine's own deadline.
(2) levels ``[redfish]``, ``[watchdog + ceph_blocklist]`` with a real
    ``ceph-mon`` (functional/peers/cephmon.py): at the first evacuate
    request for the host's servers, before it is forwarded to nova-api,
    the recorder reads the monitor's blocklist with the ``ceph`` CLI: the
    host's address is in it. The host then gets its power back (BMC,
    nova-compute, agent after a fresh boot); once Nova confirms its cleanup
    the engine removes the entry (read again from the monitor) and puts
    the service back, and its agent, answered again, keeps feeding its
    watchdog.

In both, no live host is reset by its watchdog.
"""

import os
import time

import pytest
import yaml

from functional.events_fixtures import missing
from functional.peers import cephmon, procs
from functional.peers.errors import PeerMissing
from functional.realnova.agents import host_address
from functional.realnova.engine import VICTIM_SERVERS, boot_victims
from functional.realnova.test_agent import BEATING, agent_texts, journal_of
from functional.realnova.watchdog_hw import WatchdogHardware
from instanceha import conf as iha_conf
from instanceha.drivers.fencing import base, ceph_blocklist

#: The agents' watchdog (seconds): short for the test's time, long enough
#: that a live agent on a loaded 2-core machine always hears an engine
#: (challenges every 2 s) within its isolation timeout.
WATCHDOG = {"timeout": 5, "isolation": 6.0, "check_interval": 0.5}
MARGIN = 2.0
#: kill -> the deadline: last beat + isolation + watchdog + margin, the
#: pill's publication (a few seconds after the kill) pushing it later
DEADLINE_MIN = WATCHDOG["isolation"] + WATCHDOG["timeout"] + MARGIN - 1.0
#: kill -> last server ACTIVE elsewhere: detection ~5 s, the deadline
#: ~15 s after it, then Nova's rebuilds; held on a loaded machine
ACTIVE_BUDGET = 150.0


@pytest.fixture(scope="module")
def mon(tmp_path_factory):
    """A real ceph-mon, and the librados the engine loads to reach it;
    either missing skips (fails, naming it, under
    INSTANCEHA_REQUIRE_SERVICES=1)."""
    try:
        ceph_blocklist.load_rados(
            iha_conf.make({}).ceph_fencing.rados_path)
    except base.FenceError as e:
        missing("python3-rados is needed for this test (Debian package "
                "python3-rados; tools/test-packages.sh installs it): %s" % e)
    peer = cephmon.CephMon(tmp_path_factory.mktemp("ceph"))
    try:
        peer.start()
    except PeerMissing as e:
        missing(str(e))
    yield peer
    peer.stop()


class DeadHost:
    """The victim's power loss and return, and what the recorder reads.

    ``power_of`` replaces the bed recorder's for the test: the victim's
    power is its BMC's while the BMC answers; with the BMC gone, "off"
    only once its watchdog hardware reset it after the kill, else it
    cannot be read (Unknown to the invariant). ``at_first_evacuate`` is
    called once, when the first evacuate request for the victim's
    servers is on its way to nova-api."""

    def __init__(self, bed, host, agents, hardware, at_first_evacuate=None):
        self.bed, self.host = bed, host
        self.agents, self.hardware = agents, hardware
        self.at_first_evacuate = at_first_evacuate
        self.first_evacuate = None
        self.killed = None
        self.bmc_down = False
        self._recorder = bed.cloud.evacuations
        self._power_of = self._recorder.power_of

    def __enter__(self):
        self._recorder.power_of = self.power_of
        return self

    def __exit__(self, *exc):
        self._recorder.power_of = self._power_of
        self.power_back(agent=False)

    def power_of(self, host):
        if host == self.host and self.first_evacuate is None:
            self.first_evacuate = time.time()
            if self.at_first_evacuate is not None:
                self.at_first_evacuate()
        if host != self.host or not self.bmc_down:
            return self._power_of(host)
        if self.hardware.reset_since(host, self.killed) is not None:
            return "off"
        raise RuntimeError("%s: BMC gone and its watchdog has not reset "
                           "it yet" % host)

    def kill(self):
        """Host and BMC lose power together."""
        self.killed = time.monotonic()
        self.killed_wall = time.time()
        self.bmc_down = True
        self.agents.kill(self.host)
        self.bed.cloud.kill_compute(self.host)
        self.bed.redfish[self.host].stop()

    def power_back(self, agent=True):
        """Power returns: the BMC answers (its state kept: On), the host
        boots (nova-compute, then its agent with an empty /run)."""
        if not self.bmc_down:
            return
        self.bed.redfish[self.host].start()
        self.bmc_down = False
        if not self.bed.cloud.compute_running(self.host):
            self.bed.cloud.start_compute(self.host)
        if agent and not self.agents.running(self.host):
            self.agents.boot(self.host)


def _levels(bed, host, second):
    inv = bed.inventory()
    inv["hosts"][host] = {"levels": [bed.bmc(host).inventory_entry(),
                                     second]}
    return inv


def _start(bed, engine, agents, inventory, overrides):
    conf = agents.engine_overrides()
    conf.setdefault("fencing", {})["watchdog_margin"] = MARGIN
    for group, values in overrides.items():
        conf.setdefault(group, {}).update(values)
    eng = engine(conf)
    with open(os.path.join(str(eng.workdir), "bmc.yaml"), "w") as f:
        yaml.safe_dump(inventory, f)
    eng.start()
    agents.start()
    eng.wait(lambda: agent_texts(eng) == {h: BEATING for h in bed.hosts},
             60, "every host's agent heard beating (%s)" % agents.workdir)
    return eng


def _wait_armed(agents, hardware, host):
    """The victim's watchdog armed and fed a few times since: its beats
    have told the engine so."""
    procs.wait_until(lambda: all(hardware.armed(h) for h in
                                 agents.bed.hosts), 30,
                     "every watchdog armed", "instanceha-agent-%s" % host,
                     agents.log_of(host), procs=list(agents.procs.values()))
    fed = hardware.devices[host].read
    procs.wait_until(lambda: hardware.devices[host].read >= fed + 4, 15,
                     "fed since armed", "instanceha-agent-%s" % host,
                     agents.log_of(host))


def _all_active_elsewhere(bed, host, ids):
    servers = [bed.cloud.server(sid) for sid in ids]
    return all(s["status"] == "ACTIVE"
               and s.get("OS-EXT-STS:task_state") is None
               and s["OS-EXT-SRV-ATTR:host"] not in (host, None)
               for s in servers) and time.monotonic()


def _recovered_through_watchdog(bed, eng, agents, dead, ids, level_text):
    """Kill, then the world once the servers are ACTIVE elsewhere;
    returns kill -> last server ACTIVE."""
    host = dead.host
    dead.kill()
    active = procs.wait_until(
        lambda: _all_active_elsewhere(bed, host, ids), ACTIVE_BUDGET + 60,
        "servers ACTIVE on other hosts", "instanceha", eng.log_path,
        interval=0.25)
    to_active = active - dead.killed
    assert to_active <= ACTIVE_BUDGET, (to_active, ACTIVE_BUDGET)
    eng.wait_state(host, "evacuated", timeout=60)

    # Every evacuate request went out after the watchdog's deadline.
    sent = [r for r in bed.cloud.evacuations.records if r.server in ids]
    assert len(sent) >= len(ids) and {r.power for r in sent} == {"Off"}, \
        sent
    reset = dead.hardware.reset_since(host, dead.killed)
    assert reset is not None and min(r.time for r in sent) > reset
    assert min(r.time for r in sent) >= dead.killed_wall + DEADLINE_MIN, \
        (min(r.time for r in sent) - dead.killed_wall, DEADLINE_MIN)

    # The history: level 2, the watchdog, fenced it; one condemnation.
    actions, steps = journal_of(eng, host)
    fenced = [r for d, r in steps if d == "fenced"]
    assert fenced and fenced[-1].startswith(
        "proven dead, not by a power-off: fenced by level 2 (%s): "
        "self-fenced by watchdog, assumed at " % level_text), steps
    assert "after level 1 (redfish" in fenced[-1], fenced
    condemn = [a for a in actions if a["kind"] == "condemn"]
    assert [a["outcome"] for a in condemn] == ["sent"], condemn
    # No request before the engine's deadline: at the earliest the
    # condemnation (journalled before the pill left; wall times, one
    # machine) + isolation + watchdog timeout + margin.
    earliest = condemn[0]["started_at"] + WATCHDOG["isolation"] \
        + WATCHDOG["timeout"] + MARGIN
    assert min(r.time for r in sent) >= earliest - 0.1, \
        (min(r.time for r in sent) - earliest, condemn)
    entry = next(h for h in eng.status()["hosts"] if h["name"] == host)
    assert entry["fenced_by"]["level"] == 2, entry
    assert entry["fenced_by"]["how"].startswith(
        "self-fenced by watchdog, assumed at "), entry
    # Its peers hold the pill; nothing of theirs was reset.
    for other in bed.hosts:
        if other != host:
            assert bed.bmc(other).power_state() == "on"
            assert agents.running(other)
            assert dead.hardware.resets(other) == [], other
    print("\nbmc_down on the real bed (%s, %d servers, %s): kill -> first "
          "evacuate %.1f s, kill -> last server ACTIVE %.1f s"
          % (host, VICTIM_SERVERS, level_text,
             min(r.time for r in sent) - dead.killed_wall, to_active))
    return to_active


def _bed_parts(bed, agents, engine, second, overrides=None):
    host = bed.hosts[1]
    ids = boot_victims(bed, host)
    hosts = agents(watchdog=WATCHDOG)
    hardware = WatchdogHardware(hosts).start()
    eng = _start(bed, engine, hosts, _levels(bed, host, second),
                 overrides or {})
    _wait_armed(hosts, hardware, host)
    return host, ids, hosts, hardware, eng


# -- (1) the watchdog level -------------------------------------------------


def test_host_and_bmc_dead_recovered_through_the_watchdog_level(
        clean_bed, agents, engine):
    bed = clean_bed
    host, ids, hosts, hardware, eng = _bed_parts(
        bed, agents, engine, {"driver": "watchdog"})
    try:
        with DeadHost(bed, host, hosts, hardware) as dead:
            _recovered_through_watchdog(bed, eng, hosts, dead, ids,
                                        "watchdog")
    finally:
        hardware.stop()
    assert not hardware.errors, hardware.errors


# -- (2) the Ceph level --------------------------------------------------


def test_ceph_blocklist_holds_before_the_first_evacuate_and_goes_at_putback(
        clean_bed, agents, engine, mon):
    bed = clean_bed
    address = host_address(1)       # the victim's, bed.hosts[1]
    listed = "%s:0/0" % address
    second = [{"driver": "watchdog"},
              {"driver": "ceph_blocklist", "addresses": [address],
               "protects": ["volumes", "ephemeral"]}]
    host, ids, hosts, hardware, eng = _bed_parts(
        bed, agents, engine, second,
        {"ceph_fencing": {"conf_file": mon.conf, "timeout": 10}})
    assert listed not in mon.blocklist()
    seen = {}

    def read_mon():
        seen["at_first_evacuate"] = mon.blocklist()
    try:
        with DeadHost(bed, host, hosts, hardware, read_mon) as dead:
            _recovered_through_watchdog(bed, eng, hosts, dead, ids,
                                        "watchdog + ceph_blocklist")
            assert listed in seen["at_first_evacuate"], seen
            assert listed in mon.blocklist()
            # Power returns: the host boots, Nova cleans up, the engine
            # unfences (the entry goes) and puts the service back.
            down = bed.cloud.service(host)
            assert down["forced_down"], down
            dead.power_back()
            back = time.monotonic()
            eng.wait_state(host, "active", timeout=120)
            put_back = time.monotonic() - back
        assert listed not in mon.blocklist()
        svc = bed.cloud.service(host)
        assert not svc["forced_down"] and svc["status"] == "enabled", svc
        _, steps = journal_of(eng, host)
        assert any("its watchdog condemnation lifted" in r
                   for d, r in steps), steps
        # The returned agent is answered again: fed, never reset, beating.
        fed = hardware.devices[host].read
        eng.wait(lambda: agent_texts(eng)[host] == BEATING, 30,
                 "%s's agent beating again" % host)
        procs.wait_until(lambda: hardware.devices[host].read >= fed + 6, 20,
                         "the returned host's watchdog fed",
                         "instanceha-agent-%s" % host, hosts.log_of(host))
        assert hardware.armed(host)
        assert len(hardware.resets(host)) == 1, hardware.resets(host)
        print("power back -> put back (blocklist entry removed) %.1f s"
              % put_back)
    finally:
        hardware.stop()
        for addr in mon.blocklist():
            mon.ceph("osd", "blocklist", "rm", addr)
    assert not hardware.errors, hardware.errors
