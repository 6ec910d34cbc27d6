"""The one periodic loop (instanceha.util.periodic), driven without
sleeping: a stop event whose wait returns at once and a fake clock."""

import threading

from structlog.testing import capture_logs

from instanceha.util import periodic


class Stop:
    """A threading.Event stand-in: wait() advances the fake clock by its
    timeout and returns at once; set after ``waits`` waits."""

    def __init__(self, clock, waits, oversleep=0.0):
        self.clock, self.left, self.oversleep = clock, waits, oversleep
        self.waits = []
        self.flag = False

    def wait(self, timeout):
        self.waits.append(timeout)
        self.clock.now += timeout + self.oversleep
        self.left -= 1
        if self.left <= 0:
            self.flag = True
        return self.flag

    def is_set(self):
        return self.flag

    def set(self):
        self.flag = True


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def loop(fn, interval, waits, first=0.0, oversleep=0.0, **kw):
    clock = Clock()
    stop = Stop(clock, waits, oversleep)
    p = periodic.Periodic("test-loop", fn, interval, first=first, stop=stop,
                          monotonic=clock, **kw)
    return p, stop, clock


def test_runs_at_once_then_every_interval_until_stopped():
    calls = []
    p, stop, _ = loop(lambda: calls.append(1), 5.0, waits=3)
    p.run()
    assert len(calls) == 3 and p.runs == 3
    assert stop.waits == [5.0, 5.0, 5.0]


def test_first_delay_and_an_interval_that_changes():
    calls = []
    pace = iter([1.0, 2.0, 3.0])
    p, stop, _ = loop(lambda: calls.append(1), lambda: next(pace), waits=3,
                      first=7.0)
    p.run()
    assert stop.waits == [7.0, 1.0, 2.0] and len(calls) == 2


def test_an_exception_is_logged_and_the_loop_goes_on():
    def boom():
        raise RuntimeError("no answer")
    p, _, _ = loop(boom, 5.0, waits=2, error_event="thing_failed")
    with capture_logs() as logs:
        p.run()
    failed = [x for x in logs if x["event"] == "thing_failed"]
    assert len(failed) == 2 and failed[0]["reason"] == "no answer"
    assert failed[0]["loop"] == "test-loop"


def test_on_error_replaces_the_log():
    seen = []

    def boom():
        raise ValueError("x")
    p, _, _ = loop(boom, 5.0, waits=1, on_error=seen.append)
    with capture_logs() as logs:
        p.run()
    assert [type(e) for e in seen] == [ValueError] and logs == []


def test_a_run_longer_than_its_interval_is_late():
    clock_box = {}

    def slow():
        clock_box["clock"].now += 12.0
    p, _, clock = loop(slow, 10.0, waits=2)
    clock_box["clock"] = clock
    with capture_logs() as logs:
        p.run()
    late = [x for x in logs if x["event"] == "periodic_late"]
    assert len(late) == 2 and "took 12.0s" in late[0]["reason"]
    assert p.late == 2


def test_a_wake_up_well_after_it_was_due_is_late_a_punctual_one_not():
    p, _, _ = loop(lambda: None, 2.0, waits=2, oversleep=5.0)
    with capture_logs() as logs:
        p.run()
    late = [x for x in logs if x["event"] == "periodic_late"]
    assert len(late) == 1 and "after it was due" in late[0]["reason"]
    p, _, _ = loop(lambda: None, 2.0, waits=3, oversleep=0.5)
    with capture_logs() as logs:
        p.run()
    assert not [x for x in logs if x["event"] == "periodic_late"]


def test_start_and_stop_a_real_thread():
    ran = threading.Event()
    p = periodic.Periodic("test-thread", ran.set, 3600.0)
    assert p.thread is None and not p.is_alive()
    p.start()
    assert ran.wait(5)
    p.stop(5)
    assert not p.is_alive() and p.thread.name == "test-thread"
