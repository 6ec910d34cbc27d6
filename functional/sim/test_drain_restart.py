"""A drain continued across a restart of instanceha (issue 34, part 4),
on the simulator: the real ``instanceha run`` stopped after the stuck
server's first live migration was aborted, started again on the same
journal. [drain] stuck_retries 1 allows two migrations of that server in
all, and two is what the simulator records: the restart continued the
drain's counting instead of starting afresh (which allowed two more)."""

from functional.sim.conftest import wait_for
from functional.sim.test_drain import (FAST_DRAIN, _api, _assert_safe,
                                       _by_name, _moves, _servers, _settle)


def test_a_restart_mid_drain_keeps_the_attempts(make_cloud):
    c = make_cloud({"drain": dict(FAST_DRAIN, stuck_timeout=2,
                                  stuck_retries=1)},
                   hosts=4, servers_per_host=3)
    names = _by_name(c, "compute-1")
    stuck = names["compute-1-vm-0"]
    c.sim.stall_migrations(server_id=stuck)
    c.start_engine()
    status, answer = _api(c, "POST", "/hosts/compute-1/drain",
                          {"reason": "firmware"})
    assert status == 202, answer
    wait_for(lambda: [m["status"] for m in _moves(c, stuck)]
             == ["cancelled"], 120,
             "the stuck server's first migration aborted")
    c.stop_engine()
    c.start_engine()
    state, reason = _settle(c, "compute-1", "maintenance", 180)
    assert "not migratable: %s" % stuck in reason, reason
    assert "2/3 servers moved" in reason, reason
    # The try before the restart and the one retry after it, no more.
    assert [m["status"] for m in _moves(c, stuck)] == ["cancelled",
                                                       "cancelled"]
    assert _servers(c)[stuck]["host"] == "compute-1"
    _assert_safe(c)
