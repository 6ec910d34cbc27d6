"""Fencing through an entry's methods in order (drivers.fencing.chain),
with fake drivers that record what they were asked."""

import pytest
from structlog.testing import capture_logs

from instanceha.drivers.fencing import FIELDS as KNOWN
from instanceha.drivers.fencing import chain, inventory
from instanceha.drivers.fencing.base import (FenceError, FencingDriver,
                                             PowerState)


class FakeDriver(FencingDriver):
    """Answers per BMC address: an exception to raise, or a power state."""

    def __init__(self, name, answers=None, calls=None):
        self.name = name
        self.answers = answers or {}
        self.calls = calls if calls is not None else []

    def _answer(self, bmc, op):
        self.calls.append((op, self.name, bmc.address))
        answer = self.answers.get(bmc.address, PowerState.OFF)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def power_off(self, bmc):
        assert bmc.fallbacks == ()         # drivers get one method each
        self._answer(bmc, "off")

    def power_state(self, bmc):
        return self._answer(bmc, "state")


def _fencer(answers, refuse=()):
    calls = []
    drivers = {}

    def fencer(name):
        if name in refuse:
            raise ValueError("driver %s refused to load" % name)
        if name not in drivers:
            drivers[name] = FakeDriver(name, answers, calls)
        return drivers[name]
    return fencer, calls


def _entry(*methods, password="pw-SECRET"):
    return inventory.parse({"hosts": {"compute-0": {
        "password": password, "methods": list(methods)}}}, KNOWN)["compute-0"]


REDFISH = {"driver": "redfish", "address": "https://10.0.0.5"}
IPMI = {"driver": "ipmi", "address": "10.0.0.6"}
AGENT = {"driver": "fence_agent", "address": "10.0.0.7"}


def test_first_method_that_confirms_off_wins():
    fencer, calls = _fencer({})
    out = chain.fence(_entry(REDFISH, IPMI), fencer)
    assert calls == [("off", "redfish", "https://10.0.0.5")]
    assert (out.index, out.driver, out.address, out.failures, out.methods) \
        == (1, "redfish", "https://10.0.0.5", (), 2)
    assert out.describe() == "redfish BMC https://10.0.0.5 reports power off"


def test_a_failing_method_hands_over_to_the_next():
    fencer, calls = _fencer({
        "https://10.0.0.5": FenceError("host compute-0: BMC timed out")})
    with capture_logs() as logs:
        out = chain.fence(_entry(REDFISH, IPMI), fencer)
    assert calls == [("off", "redfish", "https://10.0.0.5"),
                     ("off", "ipmi", "10.0.0.6")]
    assert (out.index, out.driver, out.address) == (2, "ipmi", "10.0.0.6")
    assert out.failures == (chain.Attempt(
        1, "redfish", "https://10.0.0.5", "host compute-0: BMC timed out"),)
    assert out.describe() == (
        "fenced by method 2 (ipmi 10.0.0.6) after method 1 (redfish "
        "https://10.0.0.5) failed: host compute-0: BMC timed out")
    assert out.detail() == {
        "method": 2, "method_driver": "ipmi", "method_address": "10.0.0.6",
        "methods": 2, "failed_methods": [{
            "index": 1, "driver": "redfish", "address": "https://10.0.0.5",
            "reason": "host compute-0: BMC timed out"}]}
    events = [(e["event"], e["method"]) for e in logs]
    assert events == [("fence_method_failed", 1), ("fenced_by_fallback", 2)]


def test_a_driver_that_refuses_to_load_is_a_failed_method():
    fencer, calls = _fencer({}, refuse={"redfish"})
    out = chain.fence(_entry(REDFISH, IPMI), fencer)
    assert out.index == 2
    assert out.failures[0].reason == "driver redfish refused to load"


def test_all_methods_failing_names_host_and_every_reason_never_a_secret():
    fencer, calls = _fencer({
        "https://10.0.0.5": FenceError("host compute-0: 401 refused"),
        "10.0.0.6": FenceError("host compute-0: RAKP: pw-SECRET wrong"),
        "10.0.0.7": FenceError("host compute-0: agent timed out")})
    with pytest.raises(chain.FenceChainError) as e:
        chain.fence(_entry(REDFISH, IPMI, AGENT), fencer)
    assert isinstance(e.value, FenceError)
    text = str(e.value)
    assert text.startswith("host compute-0: no fencing method confirmed "
                           "power off: ")
    for part in ("method 1 (redfish https://10.0.0.5): host compute-0: 401",
                 "method 2 (ipmi 10.0.0.6): host compute-0: RAKP: *** wrong",
                 "method 3 (fence_agent 10.0.0.7): host compute-0: agent"):
        assert part in text
    assert "pw-SECRET" not in text
    assert [a.index for a in e.value.attempts] == [1, 2, 3]
    assert e.value.host == "compute-0"
    assert len(calls) == 3


def test_one_method_fails_with_the_driver_s_own_message():
    bmc = inventory.parse({"hosts": {"c0": dict(IPMI, password="pw")}},
                          KNOWN)["c0"]
    fencer, _ = _fencer({"10.0.0.6": FenceError("host c0: BMC refused")})
    with capture_logs() as logs:
        with pytest.raises(FenceError, match=r"^host c0: BMC refused$"):
            chain.fence(bmc, fencer)
    assert logs == []           # nothing more to say than the error itself
    fencer, _ = _fencer({})
    out = chain.fence(bmc, fencer)
    assert (out.index, out.methods) == (1, 1)
    assert out.describe() == "ipmi BMC 10.0.0.6 reports power off"


def test_a_plain_bmc_without_address_is_described_by_host():
    fencer, _ = _fencer({})
    out = chain.fence(inventory.BMC(host="h", driver="fake"), fencer)
    assert out.describe() == "fake BMC h reports power off"


def test_an_unexpected_error_tries_the_rest_then_is_raised_for_a_retry():
    boom = RuntimeError("socket closed")
    fencer, calls = _fencer({"https://10.0.0.5": boom})
    out = chain.fence(_entry(REDFISH, IPMI), fencer)
    assert out.index == 2
    assert out.failures[0].reason == \
        "unexpected RuntimeError from driver redfish"
    fencer, calls = _fencer({"https://10.0.0.5": boom,
                             "10.0.0.6": FenceError("refused")})
    with pytest.raises(RuntimeError) as e:
        chain.fence(_entry(REDFISH, IPMI), fencer)
    assert e.value is boom and len(calls) == 2


def test_power_state_is_the_first_method_that_answers():
    fencer, calls = _fencer({"https://10.0.0.5": FenceError("no route"),
                             "10.0.0.6": PowerState.ON})
    assert chain.power_state(_entry(REDFISH, IPMI), fencer) == PowerState.ON
    assert [c[0] for c in calls] == ["state", "state"]
    fencer, calls = _fencer({"https://10.0.0.5": PowerState.OFF})
    assert chain.power_state(_entry(REDFISH, IPMI), fencer) == PowerState.OFF
    assert len(calls) == 1


def test_power_state_unknown_only_when_nothing_better_answers():
    fencer, _ = _fencer({"https://10.0.0.5": PowerState.UNKNOWN,
                         "10.0.0.6": PowerState.OFF})
    assert chain.power_state(_entry(REDFISH, IPMI), fencer) == PowerState.OFF
    fencer, _ = _fencer({"https://10.0.0.5": PowerState.UNKNOWN,
                         "10.0.0.6": FenceError("down")})
    assert chain.power_state(_entry(REDFISH, IPMI), fencer) == \
        PowerState.UNKNOWN


def test_power_state_with_no_answer_names_every_method():
    fencer, _ = _fencer({"https://10.0.0.5": FenceError("no route"),
                         "10.0.0.6": FenceError("pw-SECRET refused")})
    with pytest.raises(chain.FenceChainError) as e:
        chain.power_state(_entry(REDFISH, IPMI), fencer)
    assert str(e.value) == (
        "host compute-0: no fencing method reports the power state: "
        "method 1 (redfish https://10.0.0.5): no route; "
        "method 2 (ipmi 10.0.0.6): *** refused")


def test_every_bmc_silent_is_unreachable_and_retried_by_the_engine():
    """No method's BMC answered: BmcUnreachable (the fence action is
    retried); one method that refused makes it a definitive failure."""
    from instanceha.drivers.fencing.base import BmcUnreachable
    silent = {"https://10.0.0.5": BmcUnreachable("redfish: no answer"),
              "10.0.0.6": BmcUnreachable("ipmi: no answer")}
    fencer, _ = _fencer(silent)
    with pytest.raises(BmcUnreachable):
        chain.fence(_entry(REDFISH, IPMI), fencer)
    refused = dict(silent, **{"10.0.0.6": FenceError("ipmi: bad password")})
    fencer, _ = _fencer(refused)
    with pytest.raises(FenceError) as err:
        chain.fence(_entry(REDFISH, IPMI), fencer)
    assert not isinstance(err.value, BmcUnreachable)


def test_fence_action_raises_on_silent_bmcs_so_it_is_retried():
    from instanceha.drivers.fencing.base import BmcUnreachable
    from instanceha.engine import actions
    from tests.unit.test_engine import World
    w = World()
    w.pass_()

    def silent(bmc):
        raise BmcUnreachable("%s: no answer" % bmc.host)

    w.fencer.power_off = silent
    rec = w.engine.find("compute-1")
    with pytest.raises(BmcUnreachable):
        actions.fence(w.ctx, rec)
