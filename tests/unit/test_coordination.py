"""Coordination of several replicas: the leadership rule and the guards,
with a fake tooz coordinator and a hand-driven clock."""

import pytest
from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha import coordination as co
from instanceha.cmd.main import format_status
from instanceha.drivers.compute.base import ComputeError
from instanceha.drivers.fencing.base import FenceError


class _Result:
    def __init__(self, value=None):
        self.value = value

    def get(self):
        return self.value


class FakeLock:
    def __init__(self, backend):
        self.backend = backend

    def acquire(self, blocking=False):
        if self.backend.holder is None:
            self.backend.holder = self
            return True
        return False

    def heartbeat(self):
        if self.backend.down:
            raise OSError("backend down")
        if self.backend.holder is not self:
            raise RuntimeError("LockNotOwnedError")
        return True

    def release(self):
        self.backend.holder = None


class FakeCoordinator:
    def __init__(self, backend):
        self.backend = backend
        self.lock = FakeLock(backend)

    def start(self, start_heart=False):
        pass

    def stop(self):
        pass

    def create_group(self, group):
        return _Result()

    def join_group(self, group, caps):
        return _Result()

    def leave_group(self, group):
        return _Result()

    def update_capabilities(self, group, caps):
        return _Result()

    def get_members(self, group):
        return _Result([])

    def get_member_capabilities(self, group, member):
        return _Result({})

    def get_lock(self, name):
        return self.lock

    def heartbeat(self):
        if self.backend.down:
            raise OSError("backend down")


class Backend:
    holder = None
    down = False


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def member(backend, clock, lost):
    m = co.Membership("redis://x", lease=10, margin=3, interval=1,
                      on_lost=lost.append, mono=clock,
                      coordinator=FakeCoordinator(backend), member="m")
    m.connect()

    def sleep(seconds):            # the heartbeat thread keeps running
        clock.now += seconds
        m.beat()
    m.sleep = sleep
    m.spawn = lambda target: None  # the tests call wait_out themselves
    return m


def elect(m):
    """Take the free lock and wait out the election's lease."""
    m.beat()
    assert m.status()["role"] == "elected"
    m.wait_out()
    assert m.may_act() is None


def test_standby_until_elected_then_acts_until_lease_minus_margin():
    backend, clock, lost = Backend(), Clock(), []
    a, b = member(backend, clock, lost), member(backend, clock, lost)
    assert "standby" in a.may_act()
    elect(a)
    b.beat()
    assert a.may_act() is None and "standby" in b.may_act()
    clock.now += 6.9
    assert a.may_act() is None
    clock.now += 0.2             # 7.1 s >= lease 10 - margin 3
    why = a.may_act()
    assert why.startswith("leadership lost") and lost == [why[len(
        "leadership lost: "):]]
    # Never again, even if the backend answers.
    a.beat()
    assert a.may_act() is not None and len(lost) == 1


def test_renewal_counts_from_its_start_and_failures_lapse():
    backend, clock, lost = Backend(), Clock(), []
    a = member(backend, clock, lost)
    elect(a)                     # renewed at 110
    clock.now += 5
    a.beat()                     # renewed at 115
    clock.now += 6
    assert a.may_act() is None
    backend.down = True
    a.beat()                     # failed: the lease runs on
    assert a.status()["backend_error"]
    clock.now += 1.5
    assert a.may_act().startswith("leadership lost")


def test_lock_taken_by_another_is_lost_at_the_next_renewal():
    backend, clock, lost = Backend(), Clock(), []
    a = member(backend, clock, lost)
    a.beat()
    backend.holder = "someone else"     # e.g. Redis restarted
    a.beat()
    assert len(lost) == 1 and "no longer holds" in lost[0]


def test_guards_refuse_writes_and_pass_reads():
    calls = []

    class Compute:
        def evacuate(self, server_id):
            calls.append(("evacuate", server_id))

        def list_services(self):
            return ["svc"]

    class Fence:
        def power_off(self, bmc):
            calls.append(("off", bmc))

        def power_state(self, bmc):
            return "on"

    why = ["standby"]
    compute = co.guard_compute(Compute(), lambda: why[0])
    fencer = co.guard_fencer(lambda name: Fence(), lambda: why[0])("redfish")
    assert compute.list_services() == ["svc"]
    assert fencer.power_state("b") == "on"
    with pytest.raises(ComputeError, match="evacuate refused: standby"):
        compute.evacuate("s1")
    with pytest.raises(FenceError, match="power_off refused"):
        fencer.power_off("b")
    assert calls == []
    why[0] = None
    compute.evacuate("s1")
    fencer.power_off("b")
    assert calls == [("evacuate", "s1"), ("off", "b")]


def test_conf_margin_below_lease():
    conf = conf_pkg.make({"coordination": {"lease": 4, "margin": 4}})
    from instanceha.conf import coordination
    with pytest.raises(cfg.Error, match="margin"):
        coordination.validate(conf)
    conf = conf_pkg.make({"coordination": {"lease": 4, "margin": 1.5,
                                           "heartbeat_interval": 0.5}})
    coordination.validate(conf)
    assert conf.coordination.backend_url is None


def test_status_names_the_acting_member():
    backend, clock, lost = Backend(), Clock(), []
    a = member(backend, clock, lost)
    elect(a)
    text = format_status({"generated_at": 1000, "started_at": 900,
                          "hosts": [], "coordination": a.status()},
                         now=1000)
    assert "ACTS for all hosts" in text
    assert "acting for all hosts: m" in text


def test_new_leader_waits_out_a_lease_the_backend_may_have_lost():
    """A backend that loses its keys (Redis restarted without persistence)
    frees the lock early: the old leader may still act until its own
    lease - margin, and a request it sent has up to margin to land. The
    new leader acts only one whole lease after it took the lock."""
    backend, clock, lost, elected = Backend(), Clock(), [], []
    a, b = member(backend, clock, lost), member(backend, clock, lost)
    b.on_elected = lambda: elected.append(clock.now)
    elect(a)
    backend.holder = None          # the backend lost every key
    b.beat()                       # b takes the lock at once
    assert a.may_act() is None     # a does not know yet
    why = b.may_act()
    assert why is not None and "waiting" in why
    assert b.status()["role"] == "elected"
    b.wait_out()                   # what the election thread runs
    assert b.may_act() is None and elected == [120.0]
    # By then a's own rule had stopped it long ago.
    assert a.may_act().startswith("leadership lost")


def test_a_leader_that_lapses_while_waiting_never_acts():
    backend, clock, lost, elected = Backend(), Clock(), [], []
    b = member(backend, clock, lost)
    b.on_elected = lambda: elected.append(clock.now)
    b.beat()
    backend.down = True            # no renewal from now on
    b.wait_out()
    assert elected == [] and b.may_act().startswith("leadership lost")
    assert len(lost) == 1


def test_the_acting_member_is_the_latest_elected_not_the_latest_clock():
    """Issue 21 hole 7: each member's acting_since is its own host's wall
    clock. A standby lists a member elected earlier on a host whose clock
    runs an hour fast (its lease lapsed; not yet dropped from the group)
    and the member elected after it: the election term names the one that
    acts. Before: the fast clock's member."""
    backend, clock, lost = Backend(), Clock(), []
    caps = {b"old": {"host": "ctl-1", "acting_since": clock.now + 3600,
                     "term": 1},
            b"new": {"host": "ctl-2", "acting_since": clock.now, "term": 2},
            b"s": {"host": "ctl-3", "acting_since": None, "term": None}}
    coord = FakeCoordinator(backend)
    coord.get_members = lambda group: _Result(list(caps))
    coord.get_member_capabilities = lambda group, m: _Result(caps[m])
    backend.holder = object()          # "new" holds the lock
    s = co.Membership("redis://x", lease=10, margin=3, interval=1,
                      mono=clock, coordinator=coord, member="s")
    s.connect()
    st = s.status()
    assert st["role"] == "standby"
    assert st["acting_member"] == "new"


def test_a_newly_elected_member_takes_the_next_term():
    backend, clock, lost = Backend(), Clock(), []
    caps = {b"old": {"host": "ctl-1", "acting_since": 5.0, "term": 7}}
    coord = FakeCoordinator(backend)
    coord.get_members = lambda group: _Result(list(caps))
    coord.get_member_capabilities = lambda group, m: _Result(caps[m])
    m = co.Membership("redis://x", lease=10, margin=3, interval=1,
                      mono=clock, coordinator=coord, member="m",
                      spawn=lambda target: None)
    m.connect()
    m.beat()
    assert m.term == 8 and m.status()["acting_member"] == "m"
