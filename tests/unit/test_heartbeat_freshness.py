"""A beat proves the present, not the past (issue 34, part 7): the
engine's heartbeat source takes a beat as a veto only when it echoes one
of the engine's latest challenges. Driven with a fake clock: the engine's
challenges go to a list, the agent (the real
:class:`~instanceha.heartbeat.challenge.Echoes`) reads them from there,
and an attacker on the path holds back or records its beats.

The window: challenge_interval (2 s) x challenge_window (3) = 6 s; the
veto of a dead host may last at most that, plus the silence timeout
(3 s) after its last proven beat."""

from structlog.testing import capture_logs

from instanceha.events import EventKind
from instanceha.heartbeat import challenge
from tests.unit.heartbeat import helpers
from tests.unit.test_heartbeat_source import (SENDER, STORAGE, T0, Host,
                                              Wire, make)

STEP = 0.5
WINDOW = 2.0 * 3
SILENCE = 3.0


class Agent:
    """One host's agent: its signed beats (Host) echoing the newest
    challenge of each engine that reached it."""

    def __init__(self, name="compute-1", address=SENDER):
        self.host = Host(name)
        self.name = name
        self.address = address
        self.echoes = challenge.Echoes()
        self._read = {}

    def hear(self, wire, now):
        """The challenges sent to this agent's address since last time."""
        start = self._read.get(id(wire), 0)
        for _, data, address in wire.sent[start:]:
            if address != self.address:
                continue
            message, _ = challenge.decode_signed(data, helpers.KEYRING)
            if message.host == self.name:
                self.echoes.heard(message, now)
        self._read[id(wire)] = len(wire.sent)

    def beat(self, now, path="mgmt"):
        return self.host.beat(now, path=path,
                              echoes=self.echoes.current(now))


class Engine:
    """The heartbeat source with its challenges on a list."""

    def __init__(self, **agent_opts):
        agent_opts.setdefault("challenge_interval", 2.0)
        agent_opts.setdefault("challenge_window", 3)
        agent_opts.setdefault("silence_timeout", SILENCE)
        self.wire = Wire()
        self.src, self.sink, _, _ = make(wire=self.wire, **agent_opts)
        self.interval = agent_opts["challenge_interval"]
        self.next_challenge = T0 + self.interval

    def step(self, now):
        """What the engine's loops do at ``now``: a challenge when due,
        the silence check."""
        if now >= self.next_challenge - 1e-9:
            self.src.challenge(now)
            self.next_challenge += self.interval
        self.src.check(now)

    def vetoes(self, now, host="compute-1"):
        return self.src.heard(host, now) is not None

    def beating_events(self, after=float("-inf")):
        return [e for e in self.sink.events
                if e.kind is EventKind.AGENT_BEATING and e.at >= after]


def times(start, end):
    """start, start + STEP, ... up to end (excluded)."""
    count = int(round((end - start) / STEP))
    return [start + i * STEP for i in range(count)]


def is_beat_time(now):
    return abs(now - round(now)) < 1e-9


def live(engine, agent, start, end, deliver=None):
    """The host lives from ``start`` to ``end``: it hears the engine's
    challenges and beats every second; ``deliver(data, now)`` is the
    network (default: to the engine at once)."""
    for now in times(start, end):
        engine.step(now)
        agent.hear(engine.wire, now)
        if is_beat_time(now):
            data = agent.beat(now)
            if deliver is None:
                engine.src.handle_datagram(data, agent.address, now=now)
            else:
                deliver(data, now)


def last_veto(engine, start, end, feed=None):
    """The host is dead from ``start``; ``feed(now)`` gives what the
    attacker sends at ``now``. The last time the engine held a veto for
    it, or None."""
    last = None
    for now in times(start, end):
        engine.step(now)
        for data in (feed(now) if feed else ()):
            engine.src.handle_datagram(data, SENDER, now=now)
        if engine.vetoes(now):
            last = now
    return last


# -- the normal path ----------------------------------------------------------

def test_a_live_host_answering_challenges_vetoes_without_a_break():
    engine, agent = Engine(), Agent()
    live(engine, agent, T0, T0 + 3)
    assert engine.vetoes(T0 + 3)        # proven from the first challenge
    broken = []

    def check(data, now):
        engine.src.handle_datagram(data, SENDER, now=now)
        if not engine.vetoes(now):
            broken.append(now)
    live(engine, agent, T0 + 3, T0 + 120, deliver=check)
    assert broken == []
    assert len(engine.beating_events()) == 1
    health = engine.src.health()
    assert health["hosts_beating"] == 1 and health["hosts_unproven"] == 0
    assert health["challenges_sent"] >= 55


def test_a_lost_challenge_or_two_cost_no_veto():
    engine, agent = Engine(), Agent()
    sent = engine.wire.sent
    live(engine, agent, T0, T0 + 5)
    for now in times(T0 + 5, T0 + 60):
        count = len(sent)
        engine.step(now)
        # Two of every three challenges are lost on the way.
        if len(sent) > count and int(now) % 6 != 0:
            del sent[count:]
        agent.hear(engine.wire, now)
        if is_beat_time(now):
            engine.src.handle_datagram(agent.beat(now), SENDER, now=now)
        assert engine.vetoes(now), now


def test_an_agent_that_echoes_nothing_is_shown_but_never_vetoes():
    """An agent older than challenges: its beats are authentic and
    unproven: no event, the host shows as alive, unproven."""
    engine = Engine()
    old = Host()
    with capture_logs() as logs:
        for now in times(T0, T0 + 30):
            engine.step(now)
            if is_beat_time(now):
                engine.src.handle_datagram(old.beat(now), SENDER, now=now)
            assert not engine.vetoes(now)
    assert engine.beating_events() == []
    view = engine.src.view(now=T0 + 30)
    assert view["compute-1"]["state"] == "alive_unproven"
    health = engine.src.health()
    assert health["hosts_unproven"] == 1 and health["beats_unproven"] == 30
    assert health["hosts_unproven_names"] == ["compute-1"]
    assert health["accepted"] == 30 and health["hosts_beating"] == 0
    # It is still challenged (an upgraded agent proves at once).
    assert engine.wire.sent and all(
        address == SENDER for _, _, address in engine.wire.sent)
    unproven = [e for e in logs if e["event"] == "agent_beat_unproven"]
    assert len(unproven) == 1 and unproven[0]["host"] == "compute-1"


# -- attacks ------------------------------------------------------------------

def test_beats_held_back_and_released_after_the_death_do_not_veto():
    """The delay attack: a live host's genuine beats are held back for
    20 s (the engine sees a silence), then released at their pace once
    the host died. Each echoes a challenge 20 s old: none vetoes."""
    engine, agent = Engine(), Agent()
    live(engine, agent, T0, T0 + 20)
    assert engine.vetoes(T0 + 20)
    held = []
    live(engine, agent, T0 + 20, T0 + 40,
         deliver=lambda data, now: held.append((now, data)))
    death = T0 + 40
    before = engine.src.health()
    release = {round(sent + 20.0, 3): data for sent, data in held}
    last = last_veto(engine, death, death + 30,
                     lambda now: [release[round(now, 3)]]
                     if round(now, 3) in release else [])
    assert last is None
    assert engine.beating_events(after=death) == []
    health = engine.src.health()
    # Authentic and new to the replay guard: accepted, unproven.
    assert health["accepted"] - before["accepted"] == len(held) == 20
    assert health["beats_unproven"] - before["beats_unproven"] == 20


def test_beats_held_back_briefly_veto_no_longer_than_the_window():
    """Held back 4 s (less than the window) and released after the death:
    the veto ends at most a window (plus the silence timeout) after it."""
    engine, agent = Engine(), Agent()
    live(engine, agent, T0, T0 + 20)
    held = []
    live(engine, agent, T0 + 20, T0 + 24,
         deliver=lambda data, now: held.append((now, data)))
    death = T0 + 24
    release = {round(sent + 4.0, 3): data for sent, data in held}
    last = last_veto(engine, death, death + 30,
                     lambda now: [release[round(now, 3)]]
                     if round(now, 3) in release else [])
    assert last is not None and last <= death + WINDOW + SILENCE


def test_a_recording_replayed_after_an_engine_restart_does_not_veto():
    """The replay attack: an engine's restart empties the replay guard;
    beats recorded before it, replayed at their pace after the host
    died, echo the old engine's challenges: the new one vetoes nothing."""
    first, agent = Engine(), Agent()
    recording = []

    def record(data, now):
        recording.append((now, data))
        first.src.handle_datagram(data, SENDER, now=now)
    live(first, agent, T0, T0 + 30, deliver=record)
    assert first.vetoes(T0 + 30)
    death = T0 + 30
    restarted = Engine()                 # a new process: new nonces
    start = death + 5
    replay = {round(sent - T0 + start, 3): data for sent, data in recording}
    last = last_veto(restarted, start, start + 40,
                     lambda now: [replay[round(now, 3)]]
                     if round(now, 3) in replay else [])
    assert last is None
    assert restarted.beating_events() == []
    health = restarted.src.health()
    assert health["accepted"] == health["beats_unproven"] == \
        len(recording) == 30
    assert restarted.src.view(now=start + 10)["compute-1"]["state"] == \
        "alive_unproven"


def test_a_challenge_of_another_engine_proves_nothing_here():
    """Two replicas: the agent echoes the newest challenge of each; each
    engine checks against its own nonces only."""
    a, b, agent = Engine(), Engine(), Agent()
    for now in times(T0, T0 + 20):
        a.step(now)
        b.step(now)
        agent.hear(a.wire, now)
        agent.hear(b.wire, now)
        if is_beat_time(now):
            data = agent.beat(now)
            a.src.handle_datagram(data, SENDER, now=now)
            b.src.handle_datagram(data, SENDER, now=now)
    assert a.vetoes(T0 + 20) and b.vetoes(T0 + 20)
    assert len(agent.echoes.current(T0 + 20)) == 2
    # A beat echoing only a's nonce is unproven at b.
    only_a = Host("compute-2").beat(T0 + 20,
                                    echoes=(a.src.challenges.newest,))
    b.src.handle_datagram(only_a, SENDER, now=T0 + 20)
    assert not b.vetoes(T0 + 20, "compute-2")
    a.src.handle_datagram(Host("compute-2").beat(
        T0 + 20, echoes=(a.src.challenges.newest,)), SENDER, now=T0 + 20)
    assert a.vetoes(T0 + 20, "compute-2")


# -- what is sent -------------------------------------------------------------

def test_each_path_is_challenged_where_its_beats_came_from():
    engine = Engine()
    host = Host()
    via_mgmt, via_storage = object(), object()
    engine.src.handle_datagram(host.beat(T0, path="mgmt"), SENDER, now=T0,
                               via=via_mgmt)
    engine.src.handle_datagram(host.beat(T0, path="storage"), STORAGE,
                               now=T0, via=via_storage)
    del engine.wire.sent[:]
    assert engine.src.challenge(T0 + 1) == 2
    sent = {address: (via, challenge.decode_signed(
        data, helpers.KEYRING)[0]) for via, data, address in
        engine.wire.sent}
    assert set(sent) == {SENDER, STORAGE}
    assert sent[SENDER][0] is via_mgmt and sent[STORAGE][0] is via_storage
    nonce = engine.src.challenges.newest
    # (acting: a single engine acts; no answer: no watchdog report)
    assert {ch for _, ch in sent.values()} == {challenge.Challenge(
        engine.src.challenges.issuer, nonce, "compute-1", acting=True)}


def test_a_path_silent_for_a_minute_is_no_longer_challenged():
    engine = Engine()
    engine.src.handle_datagram(Host().beat(T0), SENDER, now=T0)
    assert engine.src.challenge(T0 + 60) == 1
    assert engine.src.challenge(T0 + 61) == 0


def test_a_challenge_that_cannot_be_sent_is_counted_and_said_once():
    def refuse(via, data, address):
        raise OSError("network unreachable")
    engine = Engine()
    engine.src._sendto = refuse
    with capture_logs() as logs:
        # The unproven beat asks for a challenge at once; then two rounds.
        engine.src.handle_datagram(Host().beat(T0), SENDER, now=T0)
        assert engine.src.challenge(T0 + 1) == 0
        assert engine.src.challenge(T0 + 3) == 0
    assert engine.src.health()["challenge_errors"] == 3
    assert [e["event"] for e in logs if "challenge" in e["event"]] == [
        "agent_challenge_not_sent"]


def test_an_unproven_beat_is_answered_at_once_once_per_round():
    """A restarted agent (it echoes nothing yet) proves at its next beat,
    not a round later; its further unproven beats before the next round
    ask for nothing more."""
    engine, agent = Engine(), Agent()
    live(engine, agent, T0, T0 + 10)
    assert engine.vetoes(T0 + 10)
    agent.echoes = challenge.Echoes()          # the agent restarts
    before = len(engine.wire.sent)
    engine.src.handle_datagram(agent.beat(T0 + 10.2), SENDER, now=T0 + 10.2)
    engine.src.handle_datagram(agent.beat(T0 + 10.3), SENDER, now=T0 + 10.3)
    assert len(engine.wire.sent) == before + 1
    # (and the very first beat, answered at once too)
    assert engine.src.health()["beats_unproven"] == 1 + 2
    agent.hear(engine.wire, T0 + 10.3)
    engine.src.handle_datagram(agent.beat(T0 + 11.2), SENDER, now=T0 + 11.2)
    assert engine.src.health()["hosts_beating"] == 1
    # The veto held through the restart (no silence reported).
    assert [e for e in engine.sink.events
            if e.kind is EventKind.AGENT_SILENT] == []
