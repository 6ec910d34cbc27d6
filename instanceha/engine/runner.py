"""The engine's threads: ``[DEFAULT] workers`` workers taking host keys
from the work queue, the queue's delayer (keys due later), and the ticker
that sends TICK to every host whose timer is due. Nothing else runs on a
thread of the engine's own: an evacuation is passes on the workers, and a
BMC read after a heartbeat loss runs on the engine's small probe pool."""

import threading
import time
from typing import Any, Callable, Hashable, List, Protocol

import structlog

from instanceha.engine.workqueue import ShutDown, WorkQueue

LOG = structlog.get_logger("instanceha.engine")


class Engine(Protocol):
    """What the threads run of the engine (engine.Engine)."""
    @property
    def queue(self) -> WorkQueue: ...

    def work(self, key: Hashable) -> None: ...

    def tick(self) -> object: ...


class Runner:

    def __init__(self, engine: Engine, conf: Any) -> None:
        self._engine = engine
        self._conf = conf
        self._threads: List[threading.Thread] = []
        self._stop = threading.Event()

    def start(self) -> None:
        engine = self._engine
        for i in range(self._conf.workers):
            self._spawn(self._worker, "worker-%d" % i)
        self._spawn(engine.queue.run_delayer, "delayer")
        self._spawn(self._ticker, "ticker")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._engine.queue.shut_down()
        for t in self._threads:
            t.join(timeout)

    def threads(self) -> List[threading.Thread]:
        return list(self._threads)

    def _spawn(self, fn: Callable[[], object], name: str) -> None:
        t = threading.Thread(target=fn, name="instanceha-" + name,
                             daemon=True)
        t.start()
        self._threads.append(t)

    def _worker(self) -> None:
        queue = self._engine.queue
        while True:
            try:
                key = queue.get()
            except ShutDown:
                return
            self._engine.work(key)

    def _ticker(self) -> None:
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
