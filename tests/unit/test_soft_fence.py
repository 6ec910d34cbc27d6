"""Soft fencing (issue 23 item 5): a host entering the agent's veto gets
one signed restart request (when [agent] restart_compute), journalled
with what was sent; nothing without the option, nothing while already
vetoed, nothing for a host Nova still calls up."""

import dataclasses

from instanceha import conf as conf_pkg
from instanceha.engine import soft_fence
from instanceha.fsm import HostRecord
from instanceha.fsm.states import State
from instanceha.journal.store import Journal

ACTIVE = HostRecord(id="h", name="compute-2", agent="beating")
VETOED = dataclasses.replace(ACTIVE, state=State.SUSPECT, heartbeat_ok=False,
                             reason="nova-compute down, host alive (agent)")


class Source:
    def __init__(self, answer="sent restart_compute to 10.0.0.2:7412"):
        self.answer = answer
        self.asked = []

    def send_request(self, host, reason):
        self.asked.append((host, reason))
        return self.answer


def _listener(on=True, answer=None):
    conf = conf_pkg.make({"agent": {"restart_compute": on}})
    journal = Journal("sqlite://")
    source = Source(*(answer,) if answer else ())
    return soft_fence.listener(conf, journal, source, lambda: 100.0), \
        journal, source


def test_entering_the_veto_sends_one_request_and_journals_it():
    fn, journal, source = _listener()
    fn(ACTIVE, VETOED, None)
    fn(VETOED, dataclasses.replace(VETOED, reason="again"), None)
    assert [h for h, _ in source.asked] == ["compute-2"]
    assert "host alive (agent)" in source.asked[0][1]
    rows = journal.actions("h")
    assert [(r["kind"], r["outcome"]) for r in rows] == [
        ("restart_compute", "sent")]
    assert "10.0.0.2" in rows[0]["detail"]


def test_a_refused_request_is_journalled_as_not_sent():
    fn, journal, _ = _listener(answer="not sent: 3 requests in the last "
                                      "3600s ([agent] restart_max)")
    fn(ACTIVE, VETOED, None)
    row = journal.actions("h")[0]
    assert row["outcome"] == "not_sent" and "restart_max" in row["detail"]


def test_nothing_without_the_option_or_outside_the_veto():
    fn, journal, source = _listener(on=False)
    fn(ACTIVE, VETOED, None)
    fn2, journal2, source2 = _listener()
    silent = dataclasses.replace(VETOED, agent="silent")   # a dead host
    up = dataclasses.replace(VETOED, heartbeat_ok=True)    # Nova says up
    fn2(ACTIVE, silent, None)
    fn2(ACTIVE, up, None)
    assert source.asked == [] == source2.asked
    assert journal.actions("h") == [] == journal2.actions("h")
