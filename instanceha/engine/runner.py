"""The engine's threads: ``[DEFAULT] workers`` workers taking host keys
from the work queue, the queue's delayer (keys due later), and the ticker
that sends TICK to every host whose timer is due. Nothing else runs on a
thread of the engine's own: an evacuation is passes on the workers, and a
BMC read after a heartbeat loss runs on the engine's small probe pool."""

import threading
import time

import structlog

from instanceha.engine.workqueue import ShutDown

LOG = structlog.get_logger("instanceha.engine")


class Runner:

    def __init__(self, engine, conf):
        self._engine = engine
        self._conf = conf
        self._threads = []
        self._stop = threading.Event()

    def start(self):
        engine = self._engine
        for i in range(self._conf.workers):
            self._spawn(self._worker, "worker-%d" % i)
        self._spawn(engine.queue.run_delayer, "delayer")
        self._spawn(self._ticker, "ticker")

    def stop(self, timeout=5.0):
        self._stop.set()
        self._engine.queue.shut_down()
        for t in self._threads:
            t.join(timeout)

    def threads(self):
        return list(self._threads)

    def _spawn(self, fn, name):
        t = threading.Thread(target=fn, name="instanceha-" + name,
                             daemon=True)
        t.start()
        self._threads.append(t)

    def _worker(self):
        queue = self._engine.queue
        while True:
            try:
                key = queue.get()
            except ShutDown:
                return
            self._engine.work(key)

    def _ticker(self):
        interval = self._conf.detection.tick_interval
        last = time.monotonic()
        while not self._stop.wait(interval):
            started = time.monotonic()
            try:
                self._engine.tick()
            except Exception:
                LOG.exception("ticker_error")
            ended = time.monotonic()
            # Timers (grace periods, retries) are decided here: say when
            # they ran late, and whether tick() itself or the wait for
            # this thread to run took the time.
            if ended - last > max(5 * interval, 2.0):
                LOG.warning("tick_late", seconds=round(ended - last, 2),
                            in_tick=round(ended - started, 2),
                            reason="timers were decided late: the ticker "
                                   "thread did not run for this long")
            last = ended
