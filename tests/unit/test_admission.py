"""The gate shared by every host's evacuation: per-host limit, the cap
across hosts ([recovery] max_inflight) and priority over all hosts."""

from instanceha.engine import admission, evacuator
from instanceha.policy import order
from tests.unit.test_engine import World
from tests.unit import fakes  # noqa: E402


def _item(sid, host, priority, age=0.0):
    return admission.Item(sid, host, priority, (-priority, False, age, sid))


def _gate(per_host=10, total=None, strict=False):
    return admission.Gate(lambda: order.Limits(per_host, total, strict))


def test_the_cap_across_hosts_counts_every_host_in_flight():
    gate = _gate(total=3)
    send, held = gate.request("a", [_item("a1", "a", 0), _item("a2", "a", 0)],
                              busy=0)
    assert send == ["a1", "a2"] and held == {}
    send, held = gate.request("b", [_item("b1", "b", 0), _item("b2", "b", 0)],
                              busy=0)
    assert send == ["b1"]
    assert "3 evacuation(s) in flight across hosts (limit 3)" in held["b2"]
    # a's two finished: its next request reports none in flight.
    gate.request("a", [], busy=0)
    send, _ = gate.request("b", [_item("b2", "b", 0)], busy=1)
    assert send == ["b2"]


def test_higher_priority_of_another_host_goes_first_under_the_cap():
    gate = _gate(total=1)
    # b has a priority-10 server ready but asks second; a's low one must
    # leave the only slot to it.
    gate.request("b", [_item("b-top", "b", 10)], busy=1)   # b is at the cap
    send, held = gate.request("a", [_item("a-low", "a", 0)], busy=0)
    assert send == [] and "across hosts" in held["a-low"]
    send, _ = gate.request("b", [_item("b-top", "b", 10)], busy=0)
    assert send == ["b-top"]


def test_strict_priority_holds_lower_servers_behind_a_waiting_one():
    gate = _gate(per_host=1, strict=True)
    gate.request("b", [_item("b-top", "b", 10)], busy=1)   # b at its limit
    send, held = gate.request("a", [_item("a-low", "a", 0)], busy=0)
    assert send == [] and "b-top" in held["a-low"]
    gate.release("b")                  # b's run is over
    send, held = gate.request("a", [_item("a-low", "a", 0)], busy=0)
    assert send == ["a-low"] and held == {}


def test_without_a_cap_hosts_do_not_wait_for_each_other():
    gate = _gate(per_host=2)
    gate.request("b", [_item("b1", "b", 9), _item("b2", "b", 9)], busy=2)
    send, held = gate.request("a", [_item("a%d" % i, "a", 0)
                                    for i in range(3)], busy=0)
    assert send == ["a0", "a1"] and list(held) == ["a2"]
    assert gate.snapshot()["a"] == (2, 1)


def test_an_evacuation_waits_for_a_slot_another_host_holds():
    """max_inflight 1, another host's evacuation holds the slot: nothing
    of this host is sent until that run releases it."""
    w = World(servers=2)
    w.conf.set_override("max_inflight", 1, "recovery")
    w.pass_()
    w.fencer.power_off(w.ctx.inventory["compute-1"])   # BMC: Off
    w.compute.force_down("uuid-1", "instanceha: evacuating x")
    rec = w.engine.find("compute-1")
    w.ctx.gate.request("compute-2", [], busy=1)     # compute-2's run
    looks, sent_at = [], []
    real_list, real_evacuate = w.compute.list_services, w.compute.evacuate

    def list_services():
        looks.append(1)
        if len(looks) == 4:
            w.ctx.gate.release("compute-2")
        return real_list()

    def evacuate(sid, microversion=None, host=None):
        sent_at.append(len(looks))
        return real_evacuate(sid, microversion)

    w.compute.list_services = list_services
    w.compute.evacuate = evacuate
    out = fakes.evacuate_to_end(w.ctx, rec)
    assert len(out.done) == 2 and not out.failed
    assert sent_at and min(sent_at) >= 4, sent_at
    # one at a time under the cap
    assert sent_at[1] > sent_at[0], sent_at
    assert w.ctx.gate.snapshot() == {}      # released at the end


def test_a_finished_evacuation_gives_its_slot_back_before_its_run_ends():
    """Host a sent 2 (cap 2) and one finished: its next pass, with nothing
    left to send, reports 1 in flight, and b gets the freed slot."""
    gate = _gate(total=2)
    gate.request("a", [_item("a1", "a", 0), _item("a2", "a", 0)], busy=0)
    send, _ = gate.request("b", [_item("b1", "b", 0)], busy=0)
    assert send == []
    gate.request("a", [], busy=1)           # a1 done, a2 still running
    send, _ = gate.request("b", [_item("b1", "b", 0)], busy=0)
    assert send == ["b1"]
