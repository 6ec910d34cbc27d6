"""Notification listener worker processes (``[notifications] workers`` > 1).

One oslo.messaging rabbit listener costs a few hundred microseconds of CPU
per notification in kombu and py-amqp, all of it under one interpreter
lock, so one process drains a few thousand notifications per second however
many threads it runs. Beyond that the listeners run in child processes:
each is an ordinary oslo.messaging batch notification listener on the same
exchange, topics and pool (RabbitMQ hands each message to one of them),
parses what it receives with :func:`~instanceha.sources.notifications.
parse_message` and sends the records, a batch at a time, over a pipe to the
instanceha process, where :meth:`NotificationSource.apply` makes every
decision (own writes, ordering, events, progress). A child holds no state
that matters: one that dies is logged and started again after a back-off,
and the messages it had not acknowledged are redelivered by the broker.

Children are started with the ``spawn`` method (a fork of a process that
already runs threads can inherit held locks). They receive the oslo.config
values of ``[notifications]`` and of oslo.messaging's own groups, not the
config files, so a conf built in memory works the same. A child stops when
asked, and by itself when its parent is gone.
"""

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Dict, Iterable, List, NoReturn, Optional, \
    Tuple, cast

import oslo_messaging
import oslo_messaging.opts
import structlog

from instanceha import conf as ha_conf
from instanceha import log
from instanceha import runtime
from instanceha.sources import listener
from instanceha.util import backoff

LOG = structlog.get_logger("instanceha.sources.listener_workers")

STATUS = "status"              # record kind a child sends about itself
STATUS_INTERVAL = 1.0          # seconds between a child's status records
RESTART_BACKOFF = (1.0, 30.0)  # first and longest wait before a restart
STOP_TIMEOUT = 10.0


# -- configuration handed to a child ------------------------------------------

#: {group: {option: value}}, as a child receives its configuration
ConfValues = Dict[str, Dict[str, Any]]


def _messaging_groups() -> List[Tuple[str, Any]]:
    return [(group or "DEFAULT", opts)
            for group, opts in oslo_messaging.opts.list_opts()]


def conf_values(conf: Any) -> ConfValues:
    """{group: {option: value}} of ``[notifications]`` and oslo.messaging's
    groups (registered here if the transport has not done so yet)."""
    values: ConfValues = {}
    for group, opts in _messaging_groups():
        conf.register_opts(opts, group=None if group == "DEFAULT" else group)
        section = conf if group == "DEFAULT" else conf[group]
        values[group] = {opt.dest: getattr(section, opt.dest)
                         for opt in opts}
    values["notifications"] = {key: conf.notifications[key]
                               for key in conf.notifications}
    return values


def conf_from_values(values: ConfValues) -> Any:
    conf = ha_conf.new_conf()
    for group, opts in _messaging_groups():
        conf.register_opts(opts, group=None if group == "DEFAULT" else group)
    conf([], project="instanceha", default_config_files=[])
    for group, options in values.items():
        for key, value in options.items():
            conf.set_override(key, value,
                              None if group == "DEFAULT" else group)
    return conf


# -- the child ----------------------------------------------------------------

STOP = "stop"                  # what the parent sends down the control pipe


def _parent_gone(logger: Any, why: str) -> NoReturn:
    """Exit at once, before oslo.messaging acknowledges anything more: what
    this worker holds unacknowledged is redelivered to the other consumers
    of the pool instead of being acked and lost."""
    logger.error("listener_worker_exiting", reason=why)
    os._exit(3)


class _Sender:
    """Sends the records of one oslo.messaging batch in one pipe write;
    executor threads and the status loop may call it at the same time. If
    the parent cannot be written to, the batch must not be acknowledged:
    the worker exits on the spot."""

    def __init__(self, conn: Connection, logger: Any) -> None:
        self._conn = conn
        self._logger = logger
        self._lock = threading.Lock()

    def send(self, records: List[Tuple[Any, ...]]) -> None:
        with self._lock:
            try:
                self._conn.send(records)
            except (BrokenPipeError, EOFError, OSError) as exc:
                _parent_gone(self._logger, "cannot reach the instanceha "
                             "process (%s)" % type(exc).__name__)


def _watch_control(control: Connection, stop: threading.Event,
                   logger: Any) -> None:
    """A STOP message asks for a clean stop; end of file without one means
    the parent died (even while the broker connection is still being
    retried, which can take for ever)."""
    try:
        message = control.recv()
    except (EOFError, OSError):
        _parent_gone(logger, "the instanceha process is gone")
    if message == STOP:
        stop.set()
    else:
        _parent_gone(logger, "unexpected control message %r" % (message,))


def child_main(values: ConfValues, conn: Connection, control: Connection,
               index: int, log_format: str, debug: bool) -> None:
    """Entry point of a listener worker process. ``conn`` carries records
    to the parent; ``control`` brings STOP, or end of file if the parent
    dies. SIGTERM and SIGINT are ignored: a service manager signals the
    whole group, and the parent stops its workers itself."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log.setup(log_format, debug)
    logger = LOG.bind(worker=index, pid=os.getpid())
    stop = threading.Event()
    threading.Thread(target=_watch_control, args=(control, stop, logger),
                     daemon=True, name="control").start()
    conf = conf_from_values(values)
    group = conf.notifications
    sender = _Sender(conn, logger)

    def handle_batch(priority: str, messages: List[Dict[str, Any]]) -> None:
        sender.send([listener.parse_message(
            priority, m.get("publisher_id"), m.get("event_type"),
            m.get("payload"), m.get("metadata")) for m in messages])

    transport = oslo_messaging.get_notification_transport(
        conf, url=group.transport_url)
    server, _ = listener.make_batch_listener(conf, transport, handle_batch)
    server.start()
    runtime.freeze_startup_heap("listener-worker-%d" % index)
    logger.info("listener_worker_started", pool=group.pool,
                reason="consuming notifications for the instanceha process")
    try:
        while True:
            sender.send([(STATUS, index, None, None,
                          listener.listener_connected(server))])
            if stop.wait(STATUS_INTERVAL):
                break
    finally:
        server.stop()     # what is in hand is handled and sent first
        server.wait()
        transport.cleanup()
        logger.info("listener_worker_stopped", reason="asked to stop")


# -- the parent ---------------------------------------------------------------

class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Optional[BaseProcess] = None
        self.conn: Optional[Connection] = None
        self.control: Optional[Connection] = None
        self.connected = False
        self.started_at: Optional[float] = None
        self.restart_at: Optional[float] = None
        self.restarts = 0
        self.last_exit: Optional[int] = None


class ListenerWorkers:
    """Starts, watches and stops the worker processes. One reader thread
    owns every pipe: it applies what the workers send with
    ``apply(record)``, notices a worker's exit (end of file) and starts it
    again; on stop it reads on until every worker has exited, so what a
    worker handled before stopping is applied."""

    def __init__(self, conf: Any, apply: Callable[[listener.Record], None],
                 *, workers: Optional[int] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._conf = conf
        self._apply = apply
        self._count = workers or conf.notifications.workers
        self._clock = clock
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(i) for i in range(self._count)]
        self._values: Optional[ConfValues] = None
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._lock = threading.Lock()

    def start(self) -> None:
        listener.event_filter(self._conf.notifications.event_types)
        self._values = conf_values(self._conf)
        for worker in self._workers:
            self._spawn(worker)
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="instanceha-listener-workers")
        self._thread.start()

    def _spawn(self, worker: _Worker) -> None:
        reader, writer = self._ctx.Pipe(duplex=False)
        control_r, control_w = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=child_main, daemon=True,
            name="instanceha-listener-%d" % worker.index,
            args=(self._values, writer, control_r, worker.index,
                  self._conf.log_format, self._conf.debug))
        try:
            process.start()
        except Exception as exc:   # noqa: BLE001 - EMFILE, EAGAIN, ...
            for end in (reader, control_w):
                end.close()
            self._schedule_restart(worker, "cannot start: %s" % exc)
            return
        finally:
            # The child holds the only writer (EOF here when it exits) and
            # the only reader of its control pipe (EOF there when we die).
            writer.close()
            control_r.close()
        with self._lock:
            worker.process, worker.conn = process, reader
            worker.control = control_w
            worker.connected = False
            worker.started_at = self._clock()
            worker.restart_at = None
        LOG.info("listener_worker_spawned", worker=worker.index,
                 pid=process.pid, reason="restart after exit %s"
                 % worker.last_exit if worker.restarts else "start")

    def _loop(self) -> None:
        deadline: Optional[float] = None
        while True:
            if self._stopping:
                deadline = deadline or time.monotonic() + STOP_TIMEOUT
                if not any(w.conn for w in self._workers) \
                        or time.monotonic() > deadline:
                    return
            try:
                self._once()
            except Exception:   # noqa: BLE001 - this thread must not die
                LOG.exception("listener_workers_loop_failed",
                              reason="records from the workers keep being "
                                     "read; the reconciler covers a loss")
                time.sleep(0.1)   # a persistent fault must not spin

    def _once(self) -> None:
        conns = {w.conn: w for w in self._workers if w.conn is not None}
        # wait() answers with some of the connections it was given
        ready = cast(List[Connection], multiprocessing.connection.wait(
            list(conns), timeout=0.2))
        for conn in ready:
            worker = conns[conn]
            try:
                records = conn.recv()
            except (EOFError, OSError):
                self._exited(worker)
                continue
            self._deliver(worker, records)
        if not self._stopping:
            self._restart_due()

    def _deliver(self, worker: _Worker, records: Iterable[object]) -> None:
        for record in records:
            if not isinstance(record, tuple) or len(record) != 5:
                LOG.error("listener_worker_record_invalid",
                          worker=worker.index, record=repr(record)[:200],
                          reason="not a notification record; dropped")
            elif record[0] == STATUS:
                worker.connected = bool(record[4])
            else:
                self._apply(cast(listener.Record, record))

    def _exited(self, worker: _Worker) -> None:
        process = cast(BaseProcess, worker.process)   # a worker that ran
        process.join(1.0)     # its pipe is closed: it has exited or is
        if process.is_alive():   # about to; never wait on a hung one here
            process.kill()
            process.join(1.0)
        self._close(worker)
        with self._lock:
            worker.last_exit = process.exitcode
        if self._stopping:
            return
        self._schedule_restart(worker, "exited with %s" % process.exitcode)

    def _close(self, worker: _Worker) -> None:
        with self._lock:
            conn, control = worker.conn, worker.control
            worker.conn = worker.control = None
            worker.connected = False
        for end in (conn, control):
            if end is not None:
                end.close()

    def _schedule_restart(self, worker: _Worker, why: str) -> None:
        now = self._clock()
        lived = now - (worker.started_at or now)
        first, longest = RESTART_BACKOFF
        delay = first if lived > longest * 2 \
            else backoff.exponential(first, worker.restarts + 1, longest)
        with self._lock:
            worker.restarts += 1
            worker.restart_at = now + delay
        LOG.error("listener_worker_died", worker=worker.index,
                  pid=worker.process.pid if worker.process else None,
                  restart_in=round(delay, 1), reason=why + "; its "
                  "unacknowledged notifications go to the other workers and "
                  "it is started again")

    def _restart_due(self) -> None:
        now = self._clock()
        for worker in self._workers:
            if worker.conn is None and worker.restart_at is not None \
                    and now >= worker.restart_at:
                self._spawn(worker)

    def stop(self) -> None:
        """Ask every worker to stop, apply what they still send, and kill
        the ones that have not exited within ``STOP_TIMEOUT`` seconds."""
        self._stopping = True
        for worker in self._workers:
            control = worker.control
            if control is not None:
                try:
                    control.send(STOP)
                except OSError:
                    pass   # already gone: the reader sees its end of file
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT + 5)
        for worker in self._workers:
            process = worker.process
            if process is not None and process.is_alive():
                LOG.warning("listener_worker_killed", worker=worker.index,
                            pid=process.pid,
                            reason="did not stop within %ss" % STOP_TIMEOUT)
                process.kill()
                process.join(STOP_TIMEOUT)
            self._close(worker)

    # -- health ------------------------------------------------------------
    def connected(self) -> bool:
        """Whether any worker is connected: the broker redelivers what a
        disconnected one held to the connected ones."""
        return any(w.connected for w in self._workers)

    def health(self) -> List[Dict[str, Any]]:
        with self._lock:
            return [{"worker": w.index,
                     "pid": w.process.pid if w.process else None,
                     "alive": bool(w.conn is not None),
                     "connected": w.connected,
                     "restarts": w.restarts,
                     "last_exit": w.last_exit}
                    for w in self._workers]

    def pids(self) -> List[Optional[int]]:
        return [w.process.pid for w in self._workers
                if w.process is not None and w.conn is not None]
