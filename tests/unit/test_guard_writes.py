"""Issue 34 item 1: every write a replica makes is under its lease.

The guard's list of writes is derived from the interfaces' markers
(instanceha.util.writes), not kept by hand: each public method of each
interface is either a marked write or named here as a read, and every
marked write is refused, without reaching its target, once the member's
lease has lapsed (the real Membership rule on a hand-driven clock)."""

import importlib

import pytest

from instanceha import coordination as co
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute.base import ComputeDriver
from instanceha.drivers.compute.nova import NovaDriver
from instanceha.drivers.fencing.base import FencingDriver
from instanceha.journal import Journal
from instanceha.sources.heartbeat import HeartbeatSource
from instanceha.util.writes import public_methods, write, writes_of
from tests.unit.test_coordination import Backend, Clock, elect, member

#: The compute driver's reads (Nova, Placement, Glance): the other half.
COMPUTE_READS = {
    "api_record", "check_placement", "find_servers", "get_aggregate",
    "get_image",
    "get_server", "host_capacities", "instance_actions", "list_aggregates",
    "list_control_services", "list_evacuations", "list_host_migrations",
    "list_servers", "list_all_servers", "list_servers_by_status",
    "list_services", "nova_clock",
    "rebuild_events", "server_migrations", "service_of"}
#: The fencing drivers' reads, and what they expose of their settings
#: and connections (no request to a BMC that changes anything).
FENCE_READS = {"power_state", "system_identity", "read_machine", "close", "settings",
               "argv", "password_via", "stdin", "still_fenced",
               "addresses", "blocklist", "fenced_text", "ready", "health",
               "early_refusal"}
JOURNAL_READS = {
    "actions", "close", "evacuations", "evacuations_finished", "evidence",
    "history", "latest", "repairs", "reserved_history", "reserved_in_use",
    "drain_run", "drain_runs",
    "stale_rebuilds", "transitions"}
#: The heartbeat source: what it receives and reports; it sends only
#: its requests to agents (marked). Its challenges change nothing on an
#: agent (a nonce the agent echoes): every replica sends its own.
AGENT_READS = {"challenge", "check", "cliff", "handle_batch",
               "handle_datagram", "health", "heard", "refresh",
               "silent_since", "start", "stop", "view",
               # the watchdog method's reads (its condemn is a write)
               "monotonic", "watchdog_state"}


def _fencing_drivers():
    out = [FencingDriver]
    for target in fencing_pkg.DRIVERS.values():
        module, name = target.split(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


INTERFACES = ([(ComputeDriver, COMPUTE_READS), (NovaDriver, COMPUTE_READS)]
              + [(d, FENCE_READS) for d in _fencing_drivers()]
              + [(Journal, JOURNAL_READS), (HeartbeatSource, AGENT_READS)])


@pytest.mark.parametrize("cls,reads", INTERFACES,
                         ids=[c.__name__ for c, _ in INTERFACES])
def test_every_public_method_is_a_read_or_a_marked_write(cls, reads):
    """A method added without the marker (and not named a read here)
    fails: a write that would go out unguarded."""
    writes = writes_of(cls)
    unclassified = public_methods(cls) - writes - reads
    assert unclassified == set(), (
        "%s: mark each write with @instanceha.util.writes.write, or add a "
        "read to this test: %s" % (cls.__name__, sorted(unclassified)))
    assert writes & reads == set()
    assert writes, cls


def test_the_guards_take_their_writes_from_the_markers():
    assert co.COMPUTE_WRITES == writes_of(ComputeDriver) \
        == writes_of(NovaDriver)
    assert co.FENCE_WRITES == writes_of(FencingDriver) == {
        "power_off", "power_on", "fence", "fence_pass", "unfence"}
    assert co.JOURNAL_WRITES == writes_of(Journal)
    assert writes_of(HeartbeatSource) == {"send_request", "condemn",
                                          "lift"}


def test_a_marker_on_a_subclass_or_a_base_counts():
    class Base:
        @write
        def change(self):
            pass

        def look(self):
            pass

    class Impl(Base):
        def change(self):           # overridden without the marker
            pass

        @write
        def extra(self):
            pass

    assert writes_of(Impl) == {"change", "extra"}
    assert public_methods(Impl) == {"change", "extra", "look"}


# -- refused under a lapsed lease ------------------------------------------

class Target:
    """Records every call that reaches it."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: self.calls.append(name)


def _lapsed():
    """A member elected, then frozen past lease - margin: may_act says
    no (and the leadership ends) at the next call."""
    backend, clock, lost = Backend(), Clock(), []
    m = member(backend, clock, lost)
    elect(m)
    return m, clock, lost


def _each_write_refused(guarded, names, error, target):
    for name in sorted(names):
        with pytest.raises(error, match="%s refused: leadership lost"
                           % name):
            getattr(guarded, name)("x", "y")
    assert target.calls == []


#: The writes the issue found outside the hand-kept list (drains,
#: instance repair, put-back and retirement): each fails on that list.
ISSUE_COMPUTE = {"live_migrate", "cold_migrate", "confirm_resize",
                 "abort_migration", "force_complete_migration",
                 "create_server", "delete_server", "start_server",
                 "reboot_server", "rebuild_server", "set_server_metadata",
                 "delete_service", "remove_host_from_aggregate"}


def test_the_writes_of_drains_and_repairs_are_refused_after_the_lease():
    m, clock, lost = _lapsed()
    target = Target()
    compute = co.guard_compute(target, m.may_act)
    # While the lease holds, each reaches Nova (the fake) ...
    for name in sorted(ISSUE_COMPUTE):
        getattr(compute, name)("s1")
    assert sorted(target.calls) == sorted(ISSUE_COMPUTE)
    target.calls.clear()
    # ... frozen past lease - margin (10 - 3 s), none does.
    clock.now += 7.5
    _each_write_refused(compute, ISSUE_COMPUTE, co.NotActingCompute, target)
    assert len(lost) == 1
    # Reads still answer (status, the standby's view).
    compute.list_servers("compute-1")
    assert target.calls == ["list_servers"]


def test_the_repair_rows_are_refused_after_the_lease():
    m, clock, _ = _lapsed()
    journal = Journal("sqlite://")
    guarded = co.guard_journal(journal, m.may_act)
    row = guarded.repair_started("s1", "compute-1", "start", 100.0)
    clock.now += 7.5
    with pytest.raises(co.NotActingJournal, match="repair_finished refused"):
        guarded.repair_finished(row, 101.0, "success")
    with pytest.raises(co.NotActingJournal, match="repair_started refused"):
        guarded.repair_started("s2", "compute-1", "start", 102.0)
    with pytest.raises(co.NotActingJournal,
                       match="close_open_actions refused"):
        guarded.close_open_actions(103.0, "interrupted")
    assert [(r["server_id"], r["outcome"]) for r in journal.repairs()] \
        == [("s1", "running")]


def test_a_request_to_an_agent_is_refused_after_the_lease():
    m, clock, _ = _lapsed()

    class Sender(HeartbeatSource):
        def __init__(self):
            self.sent = []

        def send_request(self, host_name, reason, now=None):
            self.sent.append(host_name)
            return "sent"

    sender = Sender()
    guarded = co.guard_agent_requests(sender, m.may_act)
    assert guarded.send_request("compute-1", "veto") == "sent"
    clock.now += 7.5
    with pytest.raises(co.NotActingAgent, match="send_request refused"):
        guarded.send_request("compute-2", "veto")
    assert sender.sent == ["compute-1"]


@pytest.mark.parametrize("cls,_reads", INTERFACES,
                         ids=[c.__name__ for c, _ in INTERFACES])
def test_every_marked_write_is_refused_after_the_lease(cls, _reads):
    m, clock, _ = _lapsed()
    clock.now += 7.5
    target = Target()
    guard, error = {
        Journal: (co.guard_journal, co.NotActingJournal),
        HeartbeatSource: (lambda t, may: co.Guard(t, may, writes_of(
            HeartbeatSource), co.NotActingAgent), co.NotActingAgent),
    }.get(cls, (None, None))
    if issubclass(cls, ComputeDriver):
        guard, error = co.guard_compute, co.NotActingCompute
    elif issubclass(cls, FencingDriver):
        guard, error = (lambda t, may: co.guard_fencer(lambda n: t, may)(
            "x"), co.NotActingFence)
    _each_write_refused(guard(target, m.may_act), writes_of(cls), error,
                        target)


def test_the_service_guards_its_agent_requests_when_coordinated():
    from instanceha.service.group import guard_agent_requests

    sender = object()
    assert guard_agent_requests(None, sender) is sender
    m, clock, _ = _lapsed()
    guarded = guard_agent_requests(m,
                                   HeartbeatSource.__new__(HeartbeatSource))
    assert isinstance(guarded, co.Guard)
    clock.now += 7.5
    with pytest.raises(co.NotActingAgent):
        guarded.send_request("compute-1", "veto")


# -- each request of a write made of several --------------------------------

def test_the_nova_driver_asks_the_gate_before_each_write_request():
    """A member frozen between the DELETE and the POST of one marker
    write (both past the guard at the method's entry) sends no POST when
    it wakes: the Nova driver asks its write_gate before each request
    that changes something; reads still go out."""
    from tests.unit.test_nova_migrate import Resp, driver
    from instanceha.drivers.compute.base import ComputeError

    d, c = driver([Resp(204), Resp(200, {"metadata": {}}),
                   Resp(200, {"server": {}})])
    m, clock, _ = _lapsed()
    d.write_gate = m.may_act

    real_delete = c.delete

    def delete_then_freeze(path, **kwargs):
        answer = real_delete(path, **kwargs)
        clock.now += 7.5                  # frozen right after the DELETE
        return answer
    c.delete = delete_then_freeze
    guarded = co.guard_compute(d, m.may_act)
    with pytest.raises(ComputeError, match="POST .* not sent: leadership "
                       "lost"):
        guarded.set_server_metadata("s1", {"k:running": None,
                                           "k:result": "start success"})
    assert [(m_, p) for m_, p, *_ in c.calls] == [
        ("DELETE", "/servers/s1/metadata/k%3Arunning")]
    assert d.api_record.view()[2] is None     # not a failure of Nova's


def test_the_service_gates_each_nova_write_request_when_coordinated():
    from instanceha import conf as conf_pkg
    from instanceha.service.group import Group
    from instanceha.service.startup import AwaitedNova

    m, clock, _ = _lapsed()
    group = Group(conf_pkg.make({}), clock, on_elected=lambda: None,
                  on_lost=lambda reason: None,
                  membership=lambda on_elected, on_lost: m)

    nova = AwaitedNova()
    compute, _, _ = group.guard(nova, lambda name: None, None)
    driver = Target()
    nova.bind(driver)                       # Nova answered later
    assert driver.write_gate == m.may_act
    assert isinstance(compute, co.Guard)
