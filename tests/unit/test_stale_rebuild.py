"""The decision about a rebuild a dead destination kept in its queue and
runs when it comes back (failures.stale_rebuild): pure, no I/O."""

import pytest

from instanceha.drivers.compute.base import Migration, Server
from instanceha.engine import failures as f

H, D, OTHER = "compute-1", "compute-2", "compute-3"


def server(host=D, vm_state="error", task_state="rebuilding"):
    return Server(id="s1", name="s1", status="ERROR", host=host,
                  vm_state=vm_state, task_state=task_state)


def mig(status, dest, n=1):
    return Migration(id="m%d" % n, server_id="s1", source_host="compute-0",
                     dest_host=dest, status=status,
                     migration_type="evacuation")


# The old rebuild ran on H: the reused migration is failed with H as its
# destination; the retry's own migration stays accepted for ever.
RAN_HERE = [mig("failed", H, 1), mig("accepted", None, 2)]
NOT_YET = [mig("done", D, 1), mig("accepted", None, 2)]


def test_error_left_by_the_old_rebuild_is_repaired():
    decision, reason = f.stale_rebuild(server(), RAN_HERE, H, D, 5, 120)
    assert decision == f.STALE_REPAIR
    assert H in reason and D in reason


def test_waits_for_the_old_rebuild_to_run():
    decision, reason = f.stale_rebuild(server(vm_state="active",
                                              task_state=None),
                                       NOT_YET, H, D, 5, 120)
    assert decision == f.STALE_WAIT and H in reason


def test_rebuild_running_now_on_the_returning_host_is_waited_for():
    running = [mig("pre-migrating", H, 1), mig("accepted", None, 2)]
    decision, _ = f.stale_rebuild(server(vm_state="active", task_state=None),
                                  running, H, D, 5, 120)
    assert decision == f.STALE_WAIT


def test_wait_is_bounded():
    decision, reason = f.stale_rebuild(server(vm_state="active",
                                              task_state=None),
                                       NOT_YET, H, D, 121, 120)
    assert decision == f.STALE_CLEAR and "did not run within 120s" in reason


def test_ran_on_another_suspect_clears_this_one():
    ran_there = [mig("failed", OTHER, 1), mig("accepted", None, 2)]
    decision, reason = f.stale_rebuild(server(), ran_there, H, D, 5, 120,
                                       other_suspects={OTHER})
    assert decision == f.STALE_CLEAR and OTHER in reason


def test_a_failure_elsewhere_that_is_no_suspect_does_not_clear():
    failed_before = [mig("failed", OTHER, 1), mig("done", D, 2),
                     mig("accepted", None, 3)]
    decision, _ = f.stale_rebuild(server(vm_state="active", task_state=None),
                                  failed_before, H, D, 5, 120)
    assert decision == f.STALE_WAIT


def test_server_running_on_the_returning_host_while_rebuilt_elsewhere_is_a_conflict():
    decision, reason = f.stale_rebuild(server(host=H, vm_state="active"),
                                       [mig("done", H, 1)], H, D, 5, 120)
    assert decision == f.STALE_CONFLICT
    assert "second copy" in reason


def test_rebuilt_by_the_returning_host_only_is_fine():
    decision, _ = f.stale_rebuild(server(host=H, vm_state="active"),
                                  [mig("done", H, 1)], H, None, 5, 120)
    assert decision == f.STALE_CLEAR


@pytest.mark.parametrize("srv,done_host", [
    (None, D),                                   # deleted
    (server(host=OTHER), D),                     # moved since by someone
    (server(), None),                            # never rebuilt by us
])
def test_never_resets_a_server_it_cannot_vouch_for(srv, done_host):
    decision, _ = f.stale_rebuild(srv, RAN_HERE, H, done_host, 5, 120)
    assert decision == f.STALE_CLEAR


def test_healthy_server_after_the_old_rebuild_ran_is_left_alone():
    decision, reason = f.stale_rebuild(server(vm_state="active",
                                              task_state=None),
                                       RAN_HERE, H, D, 5, 120)
    assert decision == f.STALE_CLEAR and "no harm" in reason


def test_unknown_destination_suspects_every_dead_candidate():
    """The verdict that sends a server again names the hosts whose queue
    may keep the old rebuild: a destination known only from the
    conductor's notification, or every dead candidate (H was schedulable
    when it was sent: not among the unschedulable hosts)."""
    from instanceha.drivers.compute.base import ActionEvent, ComputeService
    dead = ComputeService(id="x", host=H, state="down", status="enabled",
                          forced_down=True, disabled_reason=None,
                          updated_at=0)
    verdict, _ = f.in_flight("compute-0", H, "notification", {H: dead},
                             frozenset(), None, 1, 60)
    assert verdict.retryable and verdict.suspects == (H,)
    verdict, _ = f.in_flight("compute-0", H, "migration", {H: dead},
                             frozenset(), None, 1, 60)
    assert verdict.retryable and verdict.suspects == ()   # it took it
    sent = [ActionEvent("rebuild_server", "conductor", True, "Success")]
    verdict, _ = f.in_flight("compute-0", None, None, {H: dead},
                             frozenset(), sent, 61, 60)
    assert verdict.retryable and verdict.suspects == (H,)
