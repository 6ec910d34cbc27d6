"""One periodic loop: a daemon thread calling a function every interval.

The reconciler, the control-plane watch, the fencing audit and its power
watch, and the systemd watchdog each run one. The wait is measured from the
end of one run to the start of the next (a slow run never makes runs pile
up), and may change from run to run (jitter, a faster pace until ready).

What the loop itself says: an exception from the function is logged (or
handed to ``on_error``) and the loop goes on; a run that took longer than
its interval, or one that started well after it was due (the process was
starved or suspended), is logged as ``periodic_late``.

Tests drive it without sleeping: pass ``stop``, an object with the
``wait(timeout)`` / ``is_set()`` / ``set()`` of a ``threading.Event`` whose
wait returns at once, and call :meth:`Periodic.run` in the test's thread.
"""

import threading
import time

import structlog

LOG = structlog.get_logger("instanceha.periodic")

#: A run is reported late only when it is late by more than this many
#: seconds as well as by more than its interval.
LATE_FLOOR = 1.0


class Periodic:
    """Call ``fn()`` every ``interval`` seconds on a daemon thread.

    ``interval``: seconds, or a function returning the seconds to wait
    after the run that just ended. ``first``: seconds before the first run
    (0: at once). ``stop``: the event that ends the loop (several loops may
    share one). ``on_error(exc)``: what to do with an exception from
    ``fn``; by default it is logged as ``error_event`` with its traceback.
    """

    def __init__(self, name, fn, interval, *, first=0.0, stop=None,
                 on_error=None, error_event="periodic_failed", log=LOG,
                 monotonic=time.monotonic):
        self.name = name
        self._fn = fn
        self._interval = interval if callable(interval) \
            else (lambda: interval)
        self._first = first
        self._stop = stop if stop is not None else threading.Event()
        self._on_error = on_error
        self._error_event = error_event
        self._log = log
        self._monotonic = monotonic
        self.thread = None
        self.runs = 0
        self.late = 0

    # -- the loop -------------------------------------------------------------
    def run(self):
        """The loop itself, in the calling thread, until ``stop`` is set."""
        delay = self._first
        while True:
            due = self._monotonic() + delay
            if (self._stop.wait(delay) if delay > 0
                    else self._stop.is_set()):
                return
            started = self._monotonic()
            self._run_once()
            ended = self._monotonic()
            planned, delay = delay, self._interval()
            self._check_late(started - due, planned, ended - started, delay)

    def _run_once(self):
        try:
            self._fn()
        except Exception as e:   # noqa: BLE001 - the loop must live
            if self._on_error is not None:
                self._on_error(e)
            else:
                self._log.exception(self._error_event, loop=self.name,
                                    reason=str(e) or type(e).__name__)
        finally:
            self.runs += 1

    def _check_late(self, slept_over, planned, took, interval):
        if slept_over > max(LATE_FLOOR, planned):
            why = "started %.1fs after it was due" % slept_over
        elif took > max(LATE_FLOOR, interval):
            why = "took %.1fs, longer than its %.1fs interval" % (
                took, interval)
        else:
            return
        self.late += 1
        self._log.warning("periodic_late", loop=self.name, reason=why,
                          effect="runs are further apart than configured")

    # -- the thread -----------------------------------------------------------
    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name=self.name)
        self.thread.start()
        return self

    def stop(self, timeout=5.0):
        """Set ``stop`` and wait up to ``timeout`` seconds for the run in
        progress to end."""
        self._stop.set()
        self.join(timeout)

    def join(self, timeout=5.0):
        if self.thread is not None:
            self.thread.join(timeout)

    def is_alive(self):
        return self.thread is not None and self.thread.is_alive()
