"""util.single_flight: callers asking while a read runs share it; none is
given an answer whose read ended before it asked."""

import threading
import time

from instanceha.util.single_flight import SingleFlight


def _until(pred, budget=30.0):
    # A condition reached by another thread; the budget only bounds a hang.
    end = time.monotonic() + budget
    while not pred():
        assert time.monotonic() < end, "condition not reached"
        threading.Event().wait(0.001)


def _in_thread(fn, out, key):
    def run():
        try:
            out[key] = fn()
        except Exception as e:   # noqa: BLE001 - the test inspects it
            out[key] = e
    t = threading.Thread(target=run)
    t.start()
    return t


def test_callers_during_a_read_share_its_answer_each_with_a_copy():
    release = threading.Event()
    calls = []

    def read():
        calls.append(1)
        release.wait(30)
        return ["row-%d" % len(calls)]
    sf = SingleFlight(read, copy=list)
    out = {}
    first = _in_thread(sf, out, "a")
    _until(lambda: len(calls) == 1)
    second = _in_thread(sf, out, "b")
    _until(lambda: sf.shared == 1)
    release.set()
    first.join(30)
    second.join(30)
    assert len(calls) == 1
    assert out["a"] == out["b"] == ["row-1"]
    assert out["a"] is not out["b"]      # one caller's change is its own


def test_a_caller_after_the_read_ended_reads_afresh():
    calls = []

    def read():
        calls.append(1)
        return len(calls)
    sf = SingleFlight(read)
    assert [sf(), sf(), sf()] == [1, 2, 3]
    assert (sf.reads, sf.shared) == (3, 0)


def test_the_reads_error_reaches_every_caller_that_waited_and_is_not_kept():
    release = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            release.wait(30)
            raise RuntimeError("Nova answered 503")
        return "fine"
    sf = SingleFlight(read)
    out = {}
    first = _in_thread(sf, out, "a")
    _until(lambda: len(calls) == 1)
    second = _in_thread(sf, out, "b")
    _until(lambda: sf.shared == 1)
    release.set()
    first.join(30)
    second.join(30)
    assert isinstance(out["a"], RuntimeError)
    assert isinstance(out["b"], RuntimeError)
    assert sf() == "fine"                 # the failure is not remembered
