"""Control-plane faults on the simulator with 20 hosts and real timing: the
real ``instanceha run`` over HTTP. With no scheduler, or no Placement, an
evacuation cannot be placed: a dead host is not fenced (its BMC stays on,
nothing is forced down) and ``instanceha status`` says why; once the
control plane is back the host is recovered."""

import time

import pytest

HOSTS = 20
VICTIM = "compute-7"


def _faults(cloud):
    """(break it, mend it, what the status then says)."""
    return {
        "scheduler": (lambda: cloud.sim.kill_service("nova-scheduler"),
                      lambda: cloud.sim.start_service("nova-scheduler"),
                      "nova-scheduler: 0 of 1 up"),
        "placement": (lambda: cloud.sim.set_placement(False),
                      lambda: cloud.sim.set_placement(True),
                      "placement: unreachable: "),
    }


def _cluster(cloud):
    return cloud.status().get("cluster") or {}


@pytest.mark.parametrize("fault", ["scheduler", "placement"])
def test_no_fencing_while_the_control_plane_is_down(make_cloud, fault):
    c = make_cloud({"control_plane": {"poll_interval": 0.5}}, hosts=HOSTS,
                   servers_per_host=2)
    c.start_engine()
    c.engine.wait(lambda: (c.status().get("sources") or {}).get(
        "control_plane", {}).get("ok"), 30, "the control plane seen ready")
    break_it, mend_it, says = _faults(c)[fault]
    break_it()
    c.engine.wait(lambda: says in _cluster(c).get("reason", ""), 30,
                  "the status to say %r" % says)

    c.sim.kill(VICTIM)
    c.engine.wait(lambda: "control plane not ready" in
                  c.states().get(VICTIM, ("", ""))[1], 30,
                  "%s held in suspect" % VICTIM)
    time.sleep(4)          # delta 3 s and grace 1 s passed several times
    state, reason = c.states()[VICTIM]
    assert state == "suspect", (state, reason)
    assert says in reason
    snap = c.sim.snapshot()
    assert snap["hosts"][VICTIM]["power"] == "on"
    assert all(h["power"] == "on" for h in snap["hosts"].values())
    assert not any(s["forced_down"] for s in snap["services"].values())
    assert snap["migrations"] == []
    out = c.cli("status")
    assert out.returncode == 0, out.stderr
    assert "HOLD: control plane not ready for a recovery: " + says \
        in out.stdout, out.stdout
    assert "fence" not in [a["kind"] for a in c.journal().actions()]

    mend_it()
    c.wait_state(VICTIM, "evacuated", timeout=60)
    snap = c.sim.snapshot()
    assert snap["hosts"][VICTIM]["power"] == "off"
    victims = [s for s in snap["servers"].values()
               if s["name"].startswith(VICTIM + "-")]
    assert len(victims) == 2
    assert all(s["status"] == "ACTIVE" and s["host"] != VICTIM
               for s in victims), victims
    assert _cluster(c).get("ok") is True
