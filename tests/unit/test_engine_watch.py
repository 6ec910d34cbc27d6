"""Which hosts the engine wants every Nova row of (engine.hosts
wants_every_report): the reconciler hands over the others' rows only when
their verdict changes, so a host missing here would miss heartbeats."""

from instanceha.events import AgentReport, Event, EventKind as E
from instanceha.fsm.machine import HostRecord, wants_every_report
from instanceha.fsm.states import State
from tests.unit.test_engine import World


def test_only_a_quiet_active_host_is_left_out():
    quiet = HostRecord(id="u", name="h", state=State.ACTIVE,
                       heartbeat_ok=True)
    assert not wants_every_report(quiet)
    for loud in (quiet.__class__(**{**quiet.to_dict(), "state": s})
                 for s in (State.SUSPECT, State.SUSPENDED, State.EVACUATED)):
        assert wants_every_report(loud)
    import dataclasses
    for change in ({"heartbeat_ok": False}, {"agent": "beating"},
                   {"power_off_at": 5.0}, {"kdump_at": 5.0}):
        assert wants_every_report(dataclasses.replace(quiet, **change))


def test_the_engine_follows_its_records():
    w = World(hosts=3, servers=1)
    w.pass_()
    assert w.engine.wants_every_report() == (set(), set())
    w.compute.kill("compute-1")
    w.until("compute-1", "suspect")
    uid = w.compute.services["compute-1"]["id"]
    assert w.engine.wants_every_report()[0] == {uid}
    # A host whose agent speaks: its Nova rows feed the corroboration.
    u0 = w.compute.services["compute-0"]["id"]
    w.engine.submit(Event(E.AGENT_BEATING, u0, w.clock(), name="compute-0",
                          source="agent", payload=AgentReport(
                              paths=("mgmt",), boot_id="b1",
                              last_beat_at=w.clock(), compute=True)))
    w.drain()
    assert u0 in w.engine.wants_every_report()[0]
    w.until("compute-1", "evacuated")
    w.compute.boot("compute-1")
    w.until("compute-1", "active")
    assert uid not in w.engine.wants_every_report()[0]
