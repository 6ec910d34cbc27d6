"""The simulated hosts' agents (the real Sender and Control on the
simulator): the scheduler, the facts, what a host's life does to its
agent, faults. Fake clock and sockets: nothing sleeps, nothing is sent."""

import collections

import pytest

from instanceha.heartbeat import challenge
from instanceha.sim import SimCloud
from instanceha.sim.agents import SimAgents
from tests.unit.sim.agent_fakes import KEYRING, SocketFactory

PATHS = {"mgmt": "127.0.0.1", "storage": "127.0.0.2"}
ENGINE = "127.0.0.1:7411"


def make(clock, count=3, **kw):
    cloud = SimCloud(hosts=count, servers_per_host=2, boot_time=2.0,
                     clock=clock)
    factory = SocketFactory()
    kw.setdefault("paths", PATHS)
    agents = SimAgents(cloud, [ENGINE], KEYRING, socket_factory=factory,
                       **kw)
    return cloud, agents, factory


def run(agents, clock, seconds, step=0.05):
    """Rounds every ``step`` seconds for ``seconds`` of the fake clock."""
    end = clock.t + seconds
    while clock.t < end - 1e-9:
        agents.run_due(clock.t)
        clock.advance(step)


def per_host(beats, path=None):
    out = collections.defaultdict(list)
    for b in beats:
        if path is None or b.path == path:
            out[b.host].append(b)
    return out


def test_each_host_beats_once_per_interval_on_each_path(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 3.0)
    beats = factory.beats()
    for path in PATHS:
        got = per_host(beats, path)
        assert sorted(got) == sorted(cloud.hosts)
        for host, hb in got.items():
            assert len(hb) == 3, host
            seqs = [b.seq for b in hb]
            assert seqs == list(range(seqs[0], seqs[0] + 3))
            gaps = [b.sent_at - a.sent_at for a, b in zip(hb, hb[1:])]
            assert gaps == pytest.approx([1.0, 1.0], abs=0.051)
    # Independent agents: the hosts' beats are spread over the interval.
    firsts = sorted(hb[0].sent_at for hb in per_host(beats, "mgmt").values())
    assert firsts[-1] - firsts[0] >= 0.3


def test_beats_come_from_each_paths_address(clock):
    _, agents, factory = make(clock)
    run(agents, clock, 1.0)
    assert {b.path for b in factory.beats("127.0.0.1")} == {"mgmt"}
    assert {b.path for b in factory.beats("127.0.0.2")} == {"storage"}
    # one shared socket per path for every host
    assert len(factory.made) == 2


def test_the_interval_is_an_option(clock):
    _, agents, factory = make(clock, interval=0.5)
    run(agents, clock, 2.0)
    assert all(len(hb) == 4 for hb in per_host(factory.beats(),
                                               "mgmt").values())


def test_run_due_says_when_to_come_back_and_skips_missed_beats(clock):
    _, agents, factory = make(clock, count=1)
    nxt = agents.run_due(clock.t)
    assert nxt == clock.t + 1.0         # the only host beat at once
    assert len(factory.beats()) == 2
    assert agents.run_due(clock.t + 0.5) == nxt        # nothing due
    clock.advance(5.3)                  # the thread was held up
    agents.run_due(clock.t)
    agents.run_due(clock.t)
    assert len(factory.beats()) == 4    # one beat, not five
    assert agents.run_due(clock.t) == clock.t + 1.0


def test_facts_follow_the_host(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 1.0)
    facts = per_host(factory.beats(), "mgmt")["compute-1"][-1].facts
    assert (facts.compute, facts.libvirt, facts.guests) == (True, True, 2)
    cloud.stop_server(cloud.list_servers(host="compute-1")[0].id)
    cloud.kill_compute("compute-1")
    run(agents, clock, 1.0)
    facts = per_host(factory.beats(), "mgmt")["compute-1"][-1].facts
    assert (facts.compute, facts.libvirt, facts.guests) == (False, True, 1)


def test_a_killed_compute_keeps_beating_a_hung_host_stops(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 1.0)
    cloud.kill_compute("compute-1")
    cloud.kill("compute-2")
    before = per_host(factory.beats())
    run(agents, clock, 3.0)
    after = per_host(factory.beats())
    assert len(after["compute-1"]) - len(before["compute-1"]) in (6, 8)
    last = max(b.seq for b in before["compute-1"])
    assert all(b.facts.compute is False
               for b in after["compute-1"] if b.seq > last)
    assert len(after["compute-2"]) == len(before["compute-2"])
    assert len(after["compute-0"]) - len(before["compute-0"]) in (6, 8)


def test_a_rebooted_host_beats_with_a_new_boot_id(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 1.0)
    old = per_host(factory.beats(), "mgmt")["compute-1"][-1]
    cloud.kill("compute-1")
    run(agents, clock, 2.0)
    cloud.power("compute-1", on=False)      # fenced
    run(agents, clock, 2.0)
    count = len(per_host(factory.beats())["compute-1"])
    cloud.power("compute-1", on=True)
    run(agents, clock, 3.0)
    new = per_host(factory.beats(), "mgmt")["compute-1"][count // 2:]
    assert len(new) == 3
    assert {b.boot_id for b in new} == {cloud.boot_id(
        cloud.hosts["compute-1"])} != {old.boot_id}
    # numbers start at the milliseconds since that boot
    booted_at = cloud.hosts["compute-1"].booted_at
    assert new[0].seq - 1 == pytest.approx(
        (new[0].sent_at - booted_at) * 1000, abs=1)
    # the agent starts before nova-compute (boot_time 2 s)
    assert new[0].facts.compute is False and new[-1].facts.compute is True


def test_a_stopped_agent_is_silent_while_its_host_lives(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 1.0)
    agents.stop_agent("compute-1")
    count = len(per_host(factory.beats())["compute-1"])
    run(agents, clock, 3.0)
    assert len(per_host(factory.beats())["compute-1"]) == count
    assert cloud.snapshot()["services"]["compute-1"]["state"] == "up"
    last = per_host(factory.beats(), "mgmt")["compute-1"][-1]
    agents.start_agent("compute-1")
    run(agents, clock, 1.0)
    again = per_host(factory.beats(), "mgmt")["compute-1"][-1]
    assert again.boot_id == last.boot_id and again.seq > last.seq


def test_a_restarted_agent_numbers_above_its_predecessor(clock):
    _, agents, factory = make(clock, count=1)
    run(agents, clock, 2.0)
    last = factory.beats()[-1]
    agents.restart_agent("compute-0")
    run(agents, clock, 1.0)
    assert factory.beats()[-1].seq > last.seq


def test_a_host_clock_offset_skews_sent_at(clock):
    _, agents, factory = make(clock)
    agents.set_clock_offset(90.0, host="compute-1")
    start = clock.t
    run(agents, clock, 1.0)
    beats = per_host(factory.beats(), "mgmt")
    assert beats["compute-1"][0].sent_at - beats["compute-0"][0].sent_at \
        == pytest.approx(90.0, abs=1.0)
    assert beats["compute-0"][0].sent_at == pytest.approx(start, abs=1.0)


def test_agents_on_some_hosts_only(clock):
    cloud, agents, factory = make(clock, hosts=["compute-0"])
    run(agents, clock, 2.0)
    assert set(per_host(factory.beats())) == {"compute-0"}
    with pytest.raises(ValueError):
        make(clock, hosts=["nope"])


def test_one_path_down_the_other_goes_on(clock):
    _, agents, factory = make(clock)
    agents.set_fault(host="compute-1", path="storage", down=True)
    run(agents, clock, 2.0)
    beats = factory.beats()
    assert len(per_host(beats, "storage")["compute-1"]) == 0
    assert len(per_host(beats, "mgmt")["compute-1"]) == 2
    assert len(per_host(beats, "storage")["compute-0"]) == 2
    # the real Sender saw the failure, as on a host whose network is down
    paths = {p.name: p for p in agents.agent("compute-1").sender.paths}
    assert paths["storage"].failing and paths["storage"].errors == 2
    agents.clear_faults(host="compute-1", path="storage")
    run(agents, clock, 1.0)
    assert len(per_host(factory.beats(), "storage")["compute-1"]) == 1
    assert not paths["storage"].failing


def test_loss_for_every_host(clock):
    _, agents, factory = make(clock, count=10, seed=3)
    agents.set_fault(loss=0.3)
    run(agents, clock, 20.0)
    sent = len(factory.beats())
    assert 0.6 * 400 <= sent <= 0.8 * 400


def test_delay_holds_beats_back(clock):
    _, agents, factory = make(clock, count=1)
    agents.set_fault(delay=1.5)
    agents.run_due(clock.t)
    assert factory.beats() == []
    assert agents.run_due(clock.t) == clock.t + 1.0
    clock.advance(1.0)
    assert agents.run_due(clock.t) == clock.t + 0.5   # the delayed ones
    clock.advance(0.5)
    agents.run_due(clock.t)
    beats = factory.beats()
    assert len(beats) == 2 and beats[0].sent_at == clock.t - 1.5


def test_fault_names_are_checked(clock):
    _, agents, _ = make(clock)
    with pytest.raises(ValueError):
        agents.set_fault(host="nope", loss=0.1)
    with pytest.raises(ValueError):
        agents.set_fault(path="backup", down=True)


def test_the_agents_options_are_the_real_agents(clock):
    _, agents, _ = make(clock, request_port=0, restart_compute=False)
    group = agents.conf.agent
    assert group.engines == [ENGINE]
    assert group.paths == ["mgmt=127.0.0.1", "storage=127.0.0.2"]
    assert group.restart_compute is False
    assert group.replay_window == 30.0      # the agent's default


def test_stop_closes_everything(clock):
    _, agents, factory = make(clock)
    run(agents, clock, 1.0)
    agents.stop()
    assert all(not a.running for a in agents.agents.values())
    assert all(s.closed for s in factory.made)


def _challenge(host, nonce=b"N" * 16):
    return challenge.encode(challenge.Challenge(b"E" * 8, nonce, host),
                            KEYRING.current)


def test_a_challenge_reaches_the_host_it_names_and_its_beats_echo_it(clock):
    cloud, agents, factory = make(clock)
    run(agents, clock, 1.0)
    assert agents.challenge(_challenge("compute-1"), "mgmt") == "echoed"
    run(agents, clock, 1.0)
    last = {h: b[-1] for h, b in per_host(factory.beats()).items()}
    assert last["compute-1"].echoes == (b"N" * 16,)
    assert last["compute-0"].echoes == ()
    # A hung host's agent hears nothing; a path down delivers nothing;
    # what is not a challenge is dropped.
    cloud.kill("compute-2")
    run(agents, clock, 1.0)
    assert agents.challenge(_challenge("compute-2"), "mgmt") == "no_agent"
    agents.set_fault(host="compute-0", path="storage", down=True)
    assert agents.challenge(_challenge("compute-0"), "storage") == \
        "undelivered"
    assert agents.challenge(b"junk", "mgmt") == "bad_magic"
    assert agents.challenges == {"echoed": 1, "no_agent": 1,
                                 "undelivered": 1, "bad_magic": 1}
