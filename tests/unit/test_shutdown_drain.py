"""Orderly shutdown drains first (issue 38), the engine's side: an
agent's signed "drain me" becomes the operator's drain on the acting
engine, answered with where the drain is; replays, the shared key and a
standby ask nothing; a host drained to maintenance that goes silent is
not fenced."""

import dataclasses

from structlog.testing import capture_logs

from instanceha import conf as ih_conf
from instanceha.engine import shutdown_drain
from instanceha.events import (AgentSilence, DrainRequest, Event,
                               EventKind as E)
from instanceha.fsm import machine
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import Action, State as S
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.sources.helpers import FakeClock, Sink
from tests.unit.test_heartbeat_source import HOSTS, SENDER, T0, Wire

MASTER = keys.Key.from_secret(b"M" * 40)
SHARED = keys.Key.from_secret(b"s" * 40)


class Engine:
    """The host records and the events submitted."""

    def __init__(self, state=S.ACTIVE):
        self.rec = HostRecord(id="id-1", name="compute-1", state=state)
        self.events = []

    def find(self, name):
        return self.rec if name in ("compute-1", "id-1") else None

    def submit(self, event):
        self.events.append(event)


def test_the_first_ask_is_the_operators_drain_then_the_answers_follow():
    eng = Engine()
    drains = shutdown_drain.ShutdownDrains(eng.find, eng.submit)
    with capture_logs() as logs:
        assert drains.ask("compute-1", "reboot", 100.0) == (
            protocol.DRAINING, "drain asked")
    (event,) = eng.events
    assert event.kind is E.OPERATOR_DRAIN and event.host == "id-1"
    assert event.payload == DrainRequest(then="maintenance")
    assert "orderly shutdown" in event.reason and "reboot" in event.reason
    assert [entry["event"] for entry in logs] == ["shutdown_drain_asked"]
    # The repeats ask nothing new.
    assert drains.ask("compute-1", "reboot", 101.0)[0] == protocol.DRAINING
    eng.rec = dataclasses.replace(eng.rec, state=S.DRAINING)
    assert drains.ask("compute-1", "reboot", 160.0)[0] == protocol.DRAINING
    eng.rec = dataclasses.replace(eng.rec, state=S.MAINTENANCE)
    assert drains.ask("compute-1", "reboot", 200.0) == (
        protocol.DRAINED, "in maintenance")
    assert len(eng.events) == 1


def test_a_drain_that_did_not_proceed_is_refused_not_asked_again():
    eng = Engine()
    drains = shutdown_drain.ShutdownDrains(eng.find, eng.submit)
    drains.ask("compute-1", "poweroff", 100.0)
    # Its preflight refused: the host is back to active.
    status, detail = drains.ask("compute-1", "poweroff",
                                100.0 + shutdown_drain.SETTLE)
    assert status == protocol.DRAIN_REFUSED and "history" in detail
    assert len(eng.events) == 1
    # A later shutdown asks again.
    assert drains.ask("compute-1", "poweroff",
                      100.0 + shutdown_drain.FORGET)[0] == protocol.DRAINING
    assert len(eng.events) == 2


def test_no_drain_starts_from_a_host_being_recovered():
    for state in (S.SUSPECT, S.FENCING, S.EVACUATING, S.SUSPENDED,
                  S.FAILED):
        eng = Engine(state)
        drains = shutdown_drain.ShutdownDrains(eng.find, eng.submit)
        status, detail = drains.ask("compute-1", "reboot", 100.0)
        assert status == protocol.DRAIN_REFUSED, state
        assert state.value in detail and not eng.events
    assert shutdown_drain.ShutdownDrains(
        Engine().find, Engine().submit).ask("nope", "r", 1.0)[0] == \
        protocol.DRAIN_REFUSED


# -- the listener -------------------------------------------------------------

def make(acting=True, drain_answers=None, shared=None):
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    asked = []

    def sink(host, reason, now):
        asked.append((host, reason, now))
        return drain_answers or (protocol.DRAINING, "drain asked")
    wire = Wire()
    ring = keys.HostKeyring(MASTER, shared=keys.Keyring(shared)
                            if shared else None)
    src = heartbeat.HeartbeatSource(
        conf, Sink(), FakeClock(T0), lambda: list(HOSTS), keyring=ring,
        sendto=wire, acting=lambda: acting, drain_sink=sink)
    src.refresh(T0)
    return src, wire, asked


def host_key(name="compute-1"):
    return keys.derive_host_key(MASTER, name)


def ask(seq, at=T0, host="compute-1", key=None):
    return protocol.encode_request(protocol.Request(
        kind=protocol.DRAIN_HOST, host=host, seq=seq, sent_at=at,
        reason="orderly shutdown"), key or host_key(host))


def answers(wire, name="compute-1"):
    ring = keys.Keyring(host_key(name))
    return [(protocol.decode(data, ring), address)
            for _, data, address in wire.sent]


def test_a_verified_request_is_drained_and_answered_with_its_seq():
    src, wire, asked = make()
    src.handle_datagram(ask(7000), SENDER, now=T0)
    assert asked == [("compute-1", "orderly shutdown", T0)]
    ((answer, address),) = answers(wire)
    assert address == SENDER
    assert (answer.kind, answer.host, answer.seq) == (
        protocol.DRAIN_STATUS, "compute-1", 7000)
    assert answer.reason == "draining: drain asked"


def test_a_replayed_or_stale_request_asks_nothing():
    src, wire, asked = make()
    data = ask(7000)
    src.handle_datagram(data, SENDER, now=T0)
    with capture_logs() as logs:
        src.handle_datagram(data, SENDER, now=T0 + 1)       # replayed
        src.handle_datagram(ask(6000), SENDER, now=T0 + 1)  # older
    assert len(asked) == 1 and len(wire.sent) == 1
    assert {e.get("reason") for e in logs} == {"replayed"}
    # Recorded long ago, never delivered: stale for a fresh engine too.
    src2, wire2, asked2 = make()
    src2.handle_datagram(ask(9000, at=T0 - 3600), SENDER, now=T0)
    assert not asked2 and not wire2.sent
    assert src2.health()["dropped"]["stale"] == 1


def test_another_hosts_key_the_shared_key_and_unknown_hosts_ask_nothing():
    src, wire, asked = make(shared=SHARED)
    # Root on compute-2 names compute-1.
    src.handle_datagram(ask(1, host="compute-1", key=host_key("compute-2")),
                        SENDER, now=T0)
    src.handle_datagram(ask(2, key=SHARED), SENDER, now=T0)
    # A host Nova does not list has no key here.
    src.handle_datagram(ask(3, host="compute-99"), SENDER, now=T0)
    assert not asked and not wire.sent
    dropped = src.health()["dropped"]
    assert (dropped["wrong_host"], dropped["shared_key"],
            dropped["unknown_key"]) == (1, 1, 1)


def test_a_standby_does_not_act_nor_answer():
    src, wire, asked = make(acting=False)
    with capture_logs() as logs:
        src.handle_datagram(ask(7000), SENDER, now=T0)
    assert not asked and not wire.sent
    assert any(e["event"] == "agent_drain_request_ignored" for e in logs)


def test_without_a_drain_sink_requests_are_dropped():
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    wire = Wire()
    src = heartbeat.HeartbeatSource(
        conf, Sink(), FakeClock(T0), lambda: list(HOSTS),
        keyring=keys.HostKeyring(MASTER), sendto=wire)
    src.refresh(T0)
    src.handle_datagram(ask(1), SENDER, now=T0)
    assert not wire.sent
    assert src.health()["dropped"][heartbeat.NO_DRAIN_SINK] == 1


# -- a drained host going silent ----------------------------------------------

def test_a_host_in_maintenance_that_goes_silent_is_not_fenced():
    policy = machine.Policy.from_conf(ih_conf.make({}))
    rec = HostRecord(id="h", name="h", state=S.MAINTENANCE)
    for kind, payload in (
            (E.AGENT_SILENT, AgentSilence(last_beat_at=5.0,
                                          paths=("mgmt",))),
            (E.HEARTBEAT_LOST, None), (E.POWER_OFF, None), (E.TICK, None)):
        new, actions = machine.step(
            rec, Event(kind, "h", 10.0, name="h", source="agent",
                       payload=payload), policy)
        assert new.state is S.MAINTENANCE, kind
        assert Action.FENCE not in actions and \
            Action.EVACUATE not in actions, kind
