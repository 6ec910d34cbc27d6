"""Every public write method of the Journal, with a call that makes it and
a check that its effect is in the journal exactly once: shared by the
unit test of the deadlock retry (SQLite) and the functional one that
forces real deadlocks on MariaDB.

WRITES is derived from the class (a public method whose code runs a
write transaction, or calls a method that does), never listed by hand:
a new write method without an entry in CALLS fails the tests."""

import dis
import inspect

from instanceha.events import Event, EventKind as E
from instanceha.fsm import HostRecord, State
from instanceha.fsm.states import Action
from instanceha.journal import Journal

#: A current epoch time with microseconds: read back exactly or not at all.
T = 1795925561.812345


def _self_calls(func):
    """Names of the methods ``func`` reaches as ``self.<name>``."""
    names = set()
    previous = None
    for ins in dis.get_instructions(func):
        if previous is not None and previous.opname.startswith("LOAD_") \
                and previous.argval == "self" \
                and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            names.add(ins.argval)
        previous = ins
    return names


def _write_methods():
    funcs = {n: inspect.unwrap(f) for n, f in vars(Journal).items()
             if inspect.isfunction(f) and not n.startswith("_")}
    calls = {n: _self_calls(f) for n, f in funcs.items()}
    writes = {n for n in funcs if "_write" in calls[n]}
    grown = True
    while grown:
        more = {n for n in funcs if n not in writes
                and writes.intersection(calls[n])}
        grown = bool(more)
        writes |= more
    return frozenset(writes)


WRITES = _write_methods()


def _lost(host_id):
    """(old, new, event) of a host's heartbeat loss at T."""
    return (HostRecord(id=host_id, name=host_id, since=1.0),
            HostRecord(id=host_id, name=host_id, state=State.SUSPECT,
                       since=T, reason="heartbeat lost", heartbeat_ok=False,
                       lost_at=T),
            Event(E.HEARTBEAT_LOST, host_id, T, source="reconciler"))


B = _lost("u-1")[1]


def _one(rows, **match):
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


def _none(j):
    return None


# name -> (prepare(j) -> p, call(j, p), check(j, p)): prepare writes what
# the call needs (not under test), check asserts the call's effect once.
CALLS = {
    "record": (
        _none,
        lambda j, p: j.record(*_lost("u-r"), start=[Action.FENCE]),
        lambda j, p: (_one(j.transitions("u-r"), at=T, dst="suspect"),
                      _one(j.actions("u-r"), kind="fence", started_at=T))),
    "record_transition": (
        _none,
        lambda j, p: j.record_transition(*_lost("u-t")),
        lambda j, p: _one(j.transitions("u-t"), at=T, dst="suspect")),
    "action_started": (
        _none,
        lambda j, p: j.action_started(B, Action.ISOLATE, T),
        lambda j, p: _one(j.actions(), kind="isolate", started_at=T)),
    "close_open_actions": (
        lambda j: j.action_started(B, Action.FENCE, 1.0),
        lambda j, p: j.close_open_actions(T, "restart"),
        lambda j, p: _one(j.actions(), id=p, finished_at=T,
                          outcome="interrupted")),
    "action_finished": (
        lambda j: j.action_started(B, Action.FENCE, 1.0),
        lambda j, p: j.action_finished(p, T, "fence_ok", "off"),
        lambda j, p: _one(j.actions(), id=p, finished_at=T,
                          outcome="fence_ok")),
    "evacuation_requested": (
        _none,
        lambda j, p: j.evacuation_requested("u-1", "compute-1", "srv-1", T),
        lambda j, p: _one(j.evacuations(), server_id="srv-1",
                          requested_at=T)),
    "evacuation_finished": (
        lambda j: j.evacuation_requested("u-1", "compute-1", "srv-2", 1.0),
        lambda j, p: j.evacuation_finished(p, T, "done", "compute-0"),
        lambda j, p: _one(j.evacuations(), id=p, finished_at=T,
                          status="done")),
    "stale_rebuild_suspected": (
        _none,
        lambda j, p: j.stale_rebuild_suspected("srv-3", "u-1", "compute-1",
                                               ["compute-2"], T),
        lambda j, p: _one(j.stale_rebuilds(), server_id="srv-3",
                          recorded_at=T)),
    "stale_rebuild_resolved": (
        lambda j: (j.stale_rebuild_suspected("srv-4", "u-1", "compute-1",
                                             ["compute-3"], 1.0),
                   j.stale_rebuilds("compute-3")[0]["id"])[1],
        lambda j, p: j.stale_rebuild_resolved(p, T, "cleaned"),
        lambda j, p: _one(j.stale_rebuilds(unresolved=False), id=p,
                          resolved_at=T)),
    "reserved_taken": (
        _none,
        lambda j, p: j.reserved_taken("spare-1", "u-1", "compute-1",
                                      "reserved", T),
        lambda j, p: _one(j.reserved_history(), reserved_host="spare-1",
                          taken_at=T)),
    "reserved_returned": (
        lambda j: j.reserved_taken("spare-2", "u-1", "compute-1", "r", 1.0),
        lambda j, p: j.reserved_returned("spare-2", T, "returned"),
        lambda j, p: _one(j.reserved_history(), reserved_host="spare-2",
                          returned_at=T)),
    "evidence_saved": (
        lambda j: j.evidence_saved("compute-1", "redfish:a", 1.0, {}),
        lambda j, p: j.evidence_saved("compute-1", "redfish:a", T,
                                      {"on_at": T}),
        lambda j, p: (_one([{"k": k, "v": v} for k, v in
                            j.evidence().items()],
                           k=("compute-1", "redfish:a"),
                           v={"on_at": T}))),
    "repair_started": (
        _none,
        lambda j, p: j.repair_started("srv-5", "compute-1", "start", T,
                                      step=1),
        lambda j, p: _one(j.repairs("srv-5"), started_at=T,
                          outcome="running")),
    "drain_saved": (
        lambda j: j.drain_saved("u-d", "compute-d", T, 1.0, 1.0, {}),
        lambda j, p: j.drain_saved("u-d", "compute-d", T, T, 1.0,
                                   {"attempts": {"srv-7": 2}},
                                   next_pass_at=T + 5),
        lambda j, p: _one(j.drain_runs("u-d"), since=T, updated_at=T,
                          next_pass_at=T + 5,
                          state={"attempts": {"srv-7": 2}})),
    "drain_ended": (
        lambda j: j.drain_saved("u-e", "compute-e", T, 1.0, 1.0, {}),
        lambda j, p: j.drain_ended("u-e", T),
        lambda j, p: _one(j.drain_runs("u-e"), ended_at=T)),
    "repair_finished": (
        lambda j: j.repair_started("srv-6", "compute-1", "start", 1.0),
        lambda j, p: j.repair_finished(p, T, "success"),
        lambda j, p: _one(j.repairs("srv-6"), id=p, finished_at=T,
                          outcome="success")),
}
