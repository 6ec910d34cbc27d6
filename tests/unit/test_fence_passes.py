"""The fencing levels run in passes (issue 37): a method that can only
be waited for (base.Pending) makes chain.fence return Waiting instead of
waiting; the next pass goes on with that method from its mark, without
its check or the methods before it again."""

from instanceha.drivers.fencing import base as fb
from instanceha.drivers.fencing import chain
from instanceha.drivers.fencing.inventory_entry import BMC


class Storage(fb.FencingDriver):
    name = "ceph_blocklist"
    proves = fb.STORAGE

    def __init__(self):
        self.calls = 0

    def fence(self, bmc):
        self.calls += 1

    def power_off(self, bmc):
        raise AssertionError

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


class Waited(fb.FencingDriver):
    """Pending twice (marks 1, 2), then fenced."""
    name = "watchdog"

    def __init__(self, fail=False):
        self.marks = []
        self.fail = fail

    def fence_pass(self, bmc, mark=None):
        self.marks.append(mark)
        if mark is None:
            return fb.Pending(30.0, 1, "in 30 s")
        if mark == 1:
            return fb.Pending(5.0, 2, "in 5 s")
        if self.fail:
            raise fb.FenceError("not proven within 600 s")
        return None

    def fenced_text(self, bmc):
        return "self-fenced"

    def power_off(self, bmc):
        raise AssertionError("a pass never waits")

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


def _entry():
    return BMC(host="h", driver="redfish", address="10.0.0.1",
               fallbacks=(BMC(host="h", driver="ceph_blocklist"),
                          BMC(host="h", driver="watchdog")),
               grouping=(1, 2))


class Refused(fb.FencingDriver):
    name = "redfish"

    def power_off(self, bmc):
        raise fb.FenceError("h: BMC refused power off")

    def power_state(self, bmc):
        return fb.PowerState.ON


def test_a_waited_method_is_resumed_from_its_mark():
    storage, waited = Storage(), Waited()
    drivers = {"redfish": Refused(), "ceph_blocklist": storage,
               "watchdog": waited}
    checked = []

    def check(method):
        checked.append(method.driver)
        return None
    progress = chain.Progress()
    first = chain.fence(_entry(), drivers.__getitem__, check=check,
                        progress=progress)
    assert isinstance(first, chain.Waiting) and first.after == 30.0
    second = chain.fence(_entry(), drivers.__getitem__, check=check,
                         progress=first.progress)
    assert isinstance(second, chain.Waiting) and second.after == 5.0
    outcome = chain.fence(_entry(), drivers.__getitem__, check=check,
                          progress=second.progress)
    assert isinstance(outcome, chain.FenceOutcome)
    assert (outcome.level, outcome.how) == (2, ("self-fenced",))
    assert [a.reason for a in outcome.failures] == [
        "h: BMC refused power off"]
    # each method checked once, the storage fenced once, the waited one
    # resumed from its marks
    assert checked == ["redfish", "ceph_blocklist", "watchdog"]
    assert storage.calls == 1 and waited.marks == [None, 1, 2]


def test_a_waited_method_that_fails_fails_its_level():
    drivers = {"redfish": Refused(), "ceph_blocklist": Storage(),
               "watchdog": Waited(fail=True)}
    done = chain.fence(_entry(), drivers.__getitem__,
                       progress=chain.Progress())
    while isinstance(done, chain.Waiting):
        try:
            done = chain.fence(_entry(), drivers.__getitem__,
                               progress=done.progress)
        except chain.FenceChainError as e:
            assert "not proven within 600 s" in str(e)
            assert [a.index for a in e.attempts] == [1, 2]
            return
    raise AssertionError("the level did not fail: %r" % (done,))


def test_without_progress_each_method_runs_to_its_end():
    """The old form (no passes): a driver's fence() as before."""
    class Blocking(Waited):
        def fence(self, bmc):
            self.marks.append("fence")
    blocking = Blocking()
    drivers = {"redfish": Refused(), "ceph_blocklist": Storage(),
               "watchdog": blocking}
    outcome = chain.fence(_entry(), drivers.__getitem__)
    assert outcome.level == 2 and blocking.marks == ["fence"]
