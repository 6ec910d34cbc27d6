"""The simulated agents' watchdogs and peers (issue 37): the real
Guardian and Peers of each simulated host on a test device (a FIFO under
the test's temp dir) whose chip resets the host when unfed; a host that
loses power with its BMC; the invariant's watchdog deadline. Fake clock
and sockets: nothing sleeps, nothing reaches an engine (there is none:
the peers answer that they hear no engine either, so every host may
live)."""

import os

import pytest

from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.sim import SimCloud
from instanceha.sim import invariant
from instanceha.sim import redfish
from instanceha.sim import watchdog_hw
from instanceha.sim import web
from instanceha.sim.agents import SimAgents
from tests.unit.sim.agent_fakes import KEYRING, SocketFactory

ENGINE = "127.0.0.1:7411"
ISO, WDT, CHECK = 3.0, 3, 0.5


def make(clock, tmp_path, count=5, **kw):
    cloud = SimCloud(hosts=count, servers_per_host=1, boot_time=1.0,
                     clock=clock)
    agents = SimAgents(cloud, [ENGINE], KEYRING,
                       socket_factory=SocketFactory(),
                       watchdog_dir=str(tmp_path / "wd"),
                       watchdog_timeout=WDT, isolation_timeout=ISO,
                       watchdog_check_interval=CHECK, peer_count=3, **kw)
    cloud.watchdog_proof = agents.watchdog_proven
    return cloud, agents


def run(agents, clock, seconds, step=0.1):
    end = clock.t + seconds
    while clock.t < end - 1e-9:
        agents.run_due(clock.t)
        clock.advance(step)


@pytest.fixture
def bed(clock, tmp_path):
    cloud, agents = make(clock, tmp_path)
    yield cloud, agents
    agents.stop()


def test_devices_are_fifos_under_the_run_dir_and_never_real(bed, tmp_path):
    _, agents = bed
    for agent in agents.agents.values():
        path = agent.hardware.path
        assert path.startswith(str(tmp_path))
        assert os.path.basename(path).startswith("wdt-")
    with pytest.raises(ValueError):
        watchdog_hw.device_path("/dev", "compute-0")
    with pytest.raises(ValueError):
        watchdog_hw.Hardware("x", "/dev/watchdog0", 3)


def test_peers_are_a_static_ring(bed):
    _, agents = bed
    assert agents.agent("compute-0").peer_names == (
        "compute-1", "compute-2", "compute-3")
    assert agents.agent("compute-4").peer_names == (
        "compute-0", "compute-1", "compute-2")


def test_live_hosts_arm_and_are_never_reset(bed, clock):
    cloud, agents = bed
    run(agents, clock, 20.0)
    for agent in agents.agents.values():
        assert agent.hardware.armed, agent.name
        assert agent.guardian.device.feeds > 20
        assert agent.guardian.fence.last.reason == "engines_gone"
    assert agents.resets == [] and cloud.watchdog_resets == []
    assert agents.peer_net.counts["delivered"] > 100
    # The beats say which peers answer (the engines' peer witnesses).
    report = agents.agent("compute-0").guardian.report(clock.t)
    assert report.hearing == (True, True, True)
    cloud.lose_power("compute-1")
    run(agents, clock, 5.0)
    report = agents.agent("compute-0").guardian.report(clock.t)
    assert report.hearing == (False, True, True)


def test_a_hung_host_is_reset_by_its_watchdog(bed, clock):
    cloud, agents = bed
    run(agents, clock, 5.0)
    t0 = clock.t
    cloud.kill("compute-2")          # hangs: its agent stops feeding
    boots = cloud.hosts["compute-2"].boots
    run(agents, clock, WDT + 2.0)
    assert [n for _, n in agents.resets] == ["compute-2"]
    at = agents.resets[0][0]
    # Unfed since its last check before the hang, for its timeout.
    assert t0 - CHECK + WDT < at <= t0 + WDT + 0.2
    h = cloud.hosts["compute-2"]
    assert h.power_on and not h.hung and h.boots == boots + 1
    assert cloud.watchdog_resets[0][1:] == ("compute-2", "reboot")
    run(agents, clock, 10.0)        # it boots, arms again; nobody resets
    assert len(agents.resets) == 1
    assert agents.agent("compute-2").hardware.armed


def test_a_host_cut_off_from_everyone_resets_the_others_do_not(bed, clock):
    cloud, agents = bed
    run(agents, clock, 5.0)
    agents.set_fault(host="compute-3", down=True)
    run(agents, clock, ISO + WDT + CHECK + 2.0)
    assert [n for _, n in agents.resets] == ["compute-3"]


def test_an_orderly_agent_stop_disarms_no_reset(bed, clock):
    cloud, agents = bed
    run(agents, clock, 5.0)
    agents.stop_agent("compute-1")
    run(agents, clock, WDT + 3.0)
    hw = agents.agent("compute-1").hardware
    assert hw.disarmed and not hw.armed
    assert agents.resets == []


def test_power_lost_with_the_bmc(bed, clock):
    cloud, agents = bed
    run(agents, clock, 5.0)
    cloud.lose_power("compute-1")
    h = cloud.hosts["compute-1"]
    assert not h.power_on and not h.bmc_reachable
    assert cloud.power_lost == {"compute-1": clock.t}
    run(agents, clock, 10.0)
    # Nothing of it runs: no agent, no chip, no reset.
    assert agents.agent("compute-1").sender is None
    assert not agents.agent("compute-1").hardware.armed
    assert agents.resets == []
    # Its BMC answers nothing.
    req = web.Request("GET", redfish.PREFIX + "/Systems/compute-1", {},
                      {}, b"", "http://x")
    assert redfish.Redfish(cloud).handle(req) is web.DROP
    cloud.restore_power("compute-1")
    assert h.bmc_reachable and not h.power_on


def _relay(agents, target, peer_name):
    """An engine's relay of ``target``'s pill to ``peer_name``."""
    data = peer.encode_relay(peer.Relay(target, b"pill-of-" +
                                        target.encode()), KEYRING.current)
    return agents.challenge(data, "mgmt", "127.0.0.1:7411")


def test_the_invariant_waits_for_the_watchdog_deadline(bed, clock):
    cloud, agents = bed
    run(agents, clock, 5.0)
    victim = cloud.hosts["compute-1"]
    sid = next(s.id for s in cloud.servers.values()
               if s.host == "compute-1")
    cloud.lose_power("compute-1")
    last = agents.agent("compute-1").armed_beat_at
    assert last is not None and clock.t - last <= 1.0
    # Not condemned (no pill held): never proven off.
    run(agents, clock, ISO + WDT + 1.0)
    r = cloud.note_evacuate_request(sid)
    assert r.power == invariant.UNKNOWN and r.unsafe
    assert "watchdog deadline" in r.describe()
    # The engine relays the pill; its peers hold it.
    assert _relay(agents, "compute-1", None) == "relayed"
    held_at = clock.t
    run(agents, clock, 1.0)
    r = cloud.note_evacuate_request(sid)
    assert r.unsafe                    # deadline counts from the pill
    run(agents, clock, ISO + WDT - 1.0)
    assert clock.t >= held_at + ISO + WDT
    r = cloud.note_evacuate_request(sid)
    assert r.power == "Off" and not r.unsafe
    # Without the hook (no watchdogs) a host whose BMC is dead is never
    # proven off.
    cloud.watchdog_proof = None
    assert cloud.note_evacuate_request(sid).unsafe
    assert not victim.power_on


def test_relays_reach_the_targets_peers_only(bed, clock):
    cloud, agents = bed
    run(agents, clock, 3.0)
    _relay(agents, "compute-0", None)
    holders = {n for n, a in agents.agents.items()
               if a.peers is not None and a.peers.relaying()}
    assert holders == {"compute-2", "compute-3", "compute-4"}
    # Their next beats say they hold it (the engine's publication).
    run(agents, clock, 1.5)
    beat = agents.agent("compute-2").guardian.report(clock.t)
    assert beat.pills and beat.state == protocol.WATCHDOG_ARMED
