"""Soft fencing (issue 23 item 5): a host entering the agent's veto gets
one signed restart request (when [agent] restart_compute), journalled
with what was sent; nothing without the option, nothing while already
vetoed, nothing for a host Nova still calls up.

Soft fencing is the RESTART_COMPUTE action (issue 36 part 4): these tests
drive the engine (moved from the engine listener soft_fence.listener to
the action the state machine starts and the executor runs)."""

from instanceha import conf as conf_pkg
from instanceha.engine.engine import Context, Engine
from instanceha.engine.progress import ProgressBoard
from instanceha.events import (AgentReport, AgentSilence, Event,
                               EventKind as E, ServiceReport)
from instanceha.journal.store import Journal
from tests.unit.fakes import Clock, FakeCompute, FakeFencer


class Source:
    def __init__(self, answer="sent restart_compute to 10.0.0.2:7412"):
        self.answer = answer
        self.asked = []

    def send_request(self, host, reason):
        self.asked.append((host, reason))
        return self.answer


class Host:
    """One host, compute-2 (service id h), in an engine on a fake clock;
    what its agent and Nova say is submitted and applied at once."""

    def __init__(self, on=True, answer=None, may_act=None):
        conf = conf_pkg.make({"agent": {"restart_compute": on}})
        self.clock = Clock()
        self.journal = Journal("sqlite://")
        self.source = Source(*(answer,) if answer else ())
        compute = FakeCompute(self.clock, 0, 0)
        ctx = Context(conf, compute, self.journal, {},
                      lambda name: FakeFencer(compute), self.clock,
                      ProgressBoard(), may_act=may_act,
                      agent_request=self.source.send_request)
        self.engine = Engine(conf, ctx, self.journal, self.clock)

    def _submit(self, kind, **kw):
        self.clock.advance(1.0)
        self.engine.submit(Event(kind, "h", self.clock(), name="compute-2",
                                 **kw))
        for _ in range(100):
            self.engine.queue.pump()
            key = self.engine.queue.get(timeout=0)
            if key is None:
                return self.engine.find("h")
            self.engine.work(key)
        raise AssertionError("engine did not settle")

    def beating(self):
        return self._submit(E.AGENT_BEATING, source="agent",
                            payload=AgentReport(
                                paths=("mgmt",), boot_id="b1",
                                last_beat_at=self.clock(), compute=False))

    def silent(self):
        return self._submit(E.AGENT_SILENT, source="agent",
                            payload=AgentSilence(
                                last_beat_at=self.clock() - 5,
                                paths=("mgmt",)))

    def nova(self, ok):
        return self._submit(E.HEARTBEAT_OK if ok else E.HEARTBEAT_LOST,
                            source="reconciler", payload=ServiceReport(
                                updated_at=5000.0, read_at=self.clock()))


def test_entering_the_veto_sends_one_request_and_journals_it():
    h = Host()
    h.nova(True)
    h.silent()                      # suspect on the agent's silence
    h.nova(False)                   # Nova too
    vetoed = h.beating()            # the agent beats again: the veto
    assert vetoed.state.value == "suspect" and not vetoed.heartbeat_ok
    h.beating()                     # still vetoed: nothing more
    h.nova(False)
    journal, source = h.journal, h.source
    assert [h for h, _ in source.asked] == ["compute-2"]
    assert "host alive (agent)" in source.asked[0][1]
    rows = journal.actions("h")
    assert [(r["kind"], r["outcome"]) for r in rows] == [
        ("restart_compute", "sent")]
    assert "10.0.0.2" in rows[0]["detail"]


def test_a_refused_request_is_journalled_as_not_sent():
    h = Host(answer="not sent: 3 requests in the last 3600s ([agent] "
                    "restart_max)")
    h.nova(True)
    h.beating()
    h.nova(False)
    row = h.journal.actions("h")[0]
    assert row["outcome"] == "not_sent" and "restart_max" in row["detail"]


def test_nothing_without_the_option_or_outside_the_veto():
    off = Host(on=False)
    off.nova(True)
    off.beating()
    off.nova(False)                 # vetoed, the option off
    silent, up = Host(), Host()
    silent.nova(True)
    silent.silent()                 # a dead host: its agent silent
    silent.nova(False)
    up.nova(True)
    up.beating()                    # Nova says up
    up.nova(True)
    for h in (off, silent, up):
        assert h.source.asked == []
        assert h.journal.actions("h") == []


def test_a_member_that_may_not_act_sends_nothing():
    """The may-act check every action passes (issue 36 part 4): a member
    that is not the acting one journals the veto but asks no agent."""
    h = Host(may_act=lambda: "another member acts")
    h.nova(True)
    h.silent()
    h.nova(False)
    assert h.beating().state.value == "suspect"
    assert h.source.asked == []
    assert [r["outcome"] for r in h.journal.actions("h")] == [None]
