"""Hole 7 of issue 21: a record resumed from the journal carries times
stamped on the clock of the process that wrote it (another replica after
a takeover). Its ``since`` is re-based on resume so that no wait or
window measured from it ends early or lasts beyond our clock: the stale
rebuild wait of a recovering host counts from the resume, and no state
is entered in our future."""

import dataclasses

from instanceha.events import Event, EventKind as E
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import State as S
from instanceha.engine.engine import Engine
from tests.unit.test_engine import World


def _journal(w, rec):
    old = dataclasses.replace(rec, state=S.ACTIVE)
    w.journal.record(old, rec, Event(E.TICK, rec.id, rec.since,
                                     name=rec.name, source="test"))


def _resume(w):
    engine = Engine(w.conf, w.ctx, w.journal, w.clock)
    assert engine.resume_from_journal() >= 1
    return engine


def test_a_recovering_hosts_wait_counts_from_the_resume():
    """The predecessor's clock ran 1000 s behind ours: on its stamp the
    host has been recovering for 1000 s, past [evacuation]
    stale_rebuild_wait; on ours it came back just now. The old rebuilds
    get their whole wait."""
    w = World(hosts=2)
    now = w.clock()
    _journal(w, HostRecord(id="uuid-1", name="compute-1",
                           state=S.RECOVERING, since=now - 1000,
                           isolated=True, fenced_at=now - 1200))
    rec = _resume(w).find("compute-1")
    assert rec.state is S.RECOVERING and rec.since == now


def test_no_state_resumes_entered_in_our_future():
    """The predecessor's clock ran ahead: an evacuated host's storm window
    (and any wait from 'since') cannot stretch past our clock's now."""
    w = World(hosts=2)
    now = w.clock()
    _journal(w, HostRecord(id="uuid-1", name="compute-1", state=S.EVACUATED,
                           since=now + 3600, isolated=True,
                           heartbeat_ok=False, fenced_at=now + 3500))
    rec = _resume(w).find("compute-1")
    assert rec.state is S.EVACUATED and rec.since == now


def test_an_evacuated_hosts_storm_window_keeps_its_stamp_when_in_the_past():
    # Re-based to now only when in our future: a host evacuated long ago
    # does not count as lost again for a whole window after a restart.
    w = World(hosts=2)
    now = w.clock()
    _journal(w, HostRecord(id="uuid-1", name="compute-1", state=S.EVACUATED,
                           since=now - 5000, isolated=True,
                           heartbeat_ok=False))
    rec = _resume(w).find("compute-1")
    assert rec.since == now - 5000
