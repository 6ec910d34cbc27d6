"""The journal on MariaDB and PostgreSQL, not only SQLite.

Each test makes a database of its own and drops it afterwards. A server
that is not there skips, or fails under INSTANCEHA_REQUIRE_SERVICES=1.
"""

import pytest

from functional import journal_dbs
from instanceha.events import Event, EventKind as E
from instanceha.fsm import HostRecord, State
from instanceha.fsm.states import Action
from instanceha.journal import Journal


@pytest.fixture(params=sorted(journal_dbs.SERVERS))
def url(request, tmp_path):
    with journal_dbs.database(request.param, tmp_path) as made:
        yield made


def test_journal_round_trip(url):
    j = Journal(url)
    a = HostRecord(id="u-1", name="compute-1", since=1.0)
    b = HostRecord(id="u-1", name="compute-1", state=State.SUSPECT, since=2.0,
                   reason="heartbeat lost: ünïcode ok", heartbeat_ok=False,
                   lost_at=2.0)
    c = HostRecord(id="u-2", name="compute-2", state=State.FAILED, since=3.0,
                   reason="fencing failed")
    j.record_transition(a, b, Event(E.HEARTBEAT_LOST, "u-1", 2.0,
                                    source="reconciler"))
    j.record_transition(a, c, Event(E.FENCE_FAILED, "u-2", 3.0,
                                    source="action"))
    aid = j.action_started(b, Action.FENCE, 2.5)
    j.action_finished(aid, 2.7, "fence_ok", "BMC says off")
    eid = j.evacuation_requested("u-1", "compute-1", "srv-1", 4.0)
    j.evacuation_finished(eid, 5.0, "done", "compute-0")
    latest = j.latest()
    assert latest["u-1"]["state"] == "suspect"
    assert latest["u-1"]["reason"] == "heartbeat lost: ünïcode ok"
    assert latest["u-2"]["state"] == "failed"
    assert [a["outcome"] for a in j.actions()] == ["fence_ok"]
    assert j.evacuations("u-1")[0]["dest_host"] == "compute-0"
    j.close()
    # A second process (the engine after a restart) reads the same back.
    again = Journal(url)
    assert again.latest()["u-1"]["lost_at"] == 2.0
    again.close()
