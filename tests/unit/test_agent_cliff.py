"""A cliff (a large share of the agents fell silent within seconds: this
engine may be cut off from them) holds the fencing of hosts suspect on
their agent's silence alone, as the storm hold does; Nova's own word
(heartbeat lost) is not held by it."""

import dataclasses

from instanceha.engine.fencing_gate import Readiness
from instanceha.events import AgentReport, AgentSilence, Event, EventKind as E
from tests.unit.test_engine import World


def _agent(w, kind, host, at):
    rec = w.engine.find(host)
    payload = (AgentReport(paths=("mgmt",), boot_id="b", last_beat_at=at,
                           compute=True) if kind is E.AGENT_BEATING
               else AgentSilence(last_beat_at=at - 3, paths=("mgmt",)))
    w.engine.submit(Event(kind, rec.id, at, name=host, source="agent",
                          payload=payload))
    w.drain()


def test_a_cliff_holds_fencing_on_silence_until_it_passes():
    w = World(hosts=3, servers=1)
    cliff = ["4 of 10 agents fell silent within 10s: this engine may be "
             "cut off from them"]
    w.engine.fencing.readiness = Readiness(agent_cliff=lambda: cliff[0])
    # Nova reports every 2 s here; the fake Nova calls a host down 8 s
    # after its last heartbeat: the silence is corroborated (a read after
    # the owed heartbeat finds none) while Nova still says up.
    w.engine.policy = dataclasses.replace(w.engine.policy,
                                          nova_report_interval=2.0)
    w.pass_()
    _agent(w, E.AGENT_BEATING, "compute-1", w.clock())
    # The host hangs: Nova's row stops advancing, its agent falls silent.
    w.compute.kill("compute-1")
    _agent(w, E.AGENT_SILENT, "compute-1", w.clock())
    assert w.state("compute-1")[0] == "suspect"
    for _ in range(6):                # Nova owes a heartbeat by now and
        w.clock.advance(1.0)          # the engine's own read found none
        w.engine.tick()
        w.drain()
    rec = w.engine.find("compute-1")
    assert rec.heartbeat_ok and rec.agent == "silent"
    assert rec.nova_read_at is not None
    state, reason = w.state("compute-1")
    assert state == "suspect" and "cut off" in reason, reason
    assert w.fencer.powered_off == []
    cliff[0] = None
    w.clock.advance(1.0)
    w.engine.tick()
    w.drain()
    assert w.state("compute-1")[0] in ("fencing", "fenced", "evacuating",
                                       "evacuated")
    assert w.fencer.powered_off == ["compute-1"]
