"""Hole 4 of issue 21, follow-up: the control-plane gate is checked again
by the fence action right before the power-off, not only when the fencing
decision is taken. A fence action that waited (in the queue, behind a
slow BMC read) while a Nova call failed powers nothing off: the host stays
fencing, held with the reason in status, and is fenced once the gate
opens again."""

from tests.unit.test_engine import World

OUTAGE = "Nova API: a call failed 0s ago (GET /os-services: HTTP 503)"


def _world():
    w = World(hosts=4)
    # The gate is open when the decision is taken (suspect -> fencing)
    # and closes once the fence action has started (its first step looks
    # up the host's BMC), before it reaches the power-off.
    closed = {"on": False, "armed": True}
    w.ctx.readiness.control_plane = lambda: (False, OUTAGE) if closed["on"] \
        else (True, "")
    bmc_for = w.ctx.bmc_for

    def looked_up(host):
        if closed["armed"] and host == "compute-1" \
                and w.state(host)[0] == "fencing":
            closed["on"] = True
        return bmc_for(host)
    w.ctx.bmc_for = looked_up
    return w, closed


def _host(w, name):
    return next(h for h in w.engine.snapshot()["hosts"] if h["name"] == name)


def test_gate_closing_between_decision_and_action_powers_nothing_off():
    w, closed = _world()
    w.pass_()
    w.compute.kill("compute-1")
    for _ in range(30):
        w.pass_()
        if closed["on"]:
            break
    assert closed["on"], w.state("compute-1")
    for _ in range(10):
        w.pass_(5.0)
        assert w.fencer.powered_off == []
        assert w.state("compute-1")[0] == "fencing", w.state("compute-1")
    retrying = _host(w, "compute-1")["retrying"]
    assert "control plane not ready for a recovery" in retrying
    assert "HTTP 503" in retrying
    assert not w.compute.services["compute-1"]["forced_down"]
    # Held, not failed: however long the outage, no retry budget is used
    # up; once the gate opens the host is fenced and evacuated.
    closed.update(on=False, armed=False)
    w.until("compute-1", "evacuated")
    assert w.fencer.powered_off == ["compute-1"]
    kinds = [(a["kind"], a["outcome"]) for a in w.journal.actions()]
    assert ("fence", "held") in kinds and ("fence", "fence_ok") in kinds


def test_the_proof_of_death_records_the_last_evacuation_row_before_it():
    """Hole 7 of issue 21: which evacuation rows belong to a recovery is
    decided by row id (the journal's order), not by comparing a stamp
    with fenced_at (two replicas' clocks). An earlier recovery's row is
    below the floor the FENCED transition records; the rows of this
    recovery are above it."""
    w = World(hosts=4)
    w.pass_()
    rec = w.engine.find("compute-1")
    old = w.journal.evacuation_requested(rec.id, "compute-1", "vm-old",
                                         w.clock())
    w.journal.evacuation_finished(old, w.clock(), "retry")
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    rec = w.engine.find("compute-1")
    assert rec.evac_floor == old
    mine = [r["id"] for r in w.journal.evacuations(rec.id)
            if r["server_id"] != "vm-old"]
    assert mine and min(mine) > rec.evac_floor
    fenced = [t for t in w.journal.transitions()
              if t["host_name"] == "compute-1" and t["dst"] == "fenced"]
    assert fenced[-1]["record"]["evac_floor"] == old
