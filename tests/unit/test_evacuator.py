"""Evacuation tracking: notifications first, Nova's migrations as fallback."""

from instanceha.engine import evac_judge, evacuator
from tests.unit.test_engine import World
from tests.unit import fakes  # noqa: E402


def _isolated_world(**kw):
    w = World(**kw)
    w.pass_()
    w.fencer.power_off(w.ctx.inventory["compute-1"])   # BMC: Off
    w.compute.force_down("uuid-1", "instanceha: evacuating x")
    return w, w.engine.find("compute-1")


def test_done_from_notifications_without_reading_migrations_again():
    w, rec = _isolated_world()
    w.compute.complete = False        # Nova's migrations never say done
    w.ctx.events_healthy = lambda: True
    w.conf.set_override("event_fallback_interval", 3600, "evacuation")
    w.compute.on_evacuate = lambda sid, dest: w.ctx.board.record(
        sid, at=w.clock(), host=dest, state="active", task_state=None,
        event="instance.update")
    calls = []
    real = w.compute.list_evacuations
    w.compute.list_evacuations = lambda host: calls.append(host) or real(host)
    out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and not out.failed
    assert set(out.done.values()) <= {"compute-0", "compute-2"}
    assert calls == ["compute-1"]     # only the initial listing
    assert {e["status"] for e in w.journal.evacuations()} == {"done"}


def test_stale_or_incomplete_events_do_not_count():
    w, rec = _isolated_world()
    w.compute.complete = False
    board = w.ctx.board
    # Recorded before the request, or still rebuilding, or on the old host.
    board.record("compute-1-vm-0", at=w.clock() - 10, host="compute-0",
                 state="active", task_state=None)
    board.record("compute-1-vm-1", at=w.clock(), host="compute-0",
                 state="active", task_state="rebuilding")
    inflight = {"compute-1-vm-0": (w.clock(), None),
                "compute-1-vm-1": (w.clock(), None)}
    assert evac_judge.rebuilt_by_event(w.ctx, "compute-1", inflight) == {}
    board.record("compute-1-vm-1", at=w.clock(), host="compute-1",
                 state="active", task_state=None)
    assert evac_judge.rebuilt_by_event(w.ctx, "compute-1", inflight) == {}


def test_without_events_migrations_decide():
    w, rec = _isolated_world()
    out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2


def test_summary_counts_servers_rebuilt_by_an_earlier_attempt():
    """The action fails after sending (Nova's migration list errors), is
    retried, and finds the servers already gone from the host: the host's
    reason still says 2/2, not 0/0."""
    from instanceha.drivers.compute import base as cb
    w = World(servers=2)
    w.pass_()
    calls = []
    real = w.compute.list_evacuations

    def flaky(host):
        calls.append(host)
        if len(calls) == 2:
            raise cb.ComputeError("HTTP 503: injected", 503)
        return real(host)

    w.compute.list_evacuations = flaky
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    state, reason = w.state("compute-1")
    assert reason.startswith("2/2 servers evacuated"), reason
    rows = w.journal.evacuations()
    assert sorted(r["status"] for r in rows) == ["done", "done"], rows
