"""``instanceha run``: start the service and serve until SIGTERM or
SIGINT; SIGHUP reloads its mutable options and the inventory."""

import argparse
import select
import signal
import socket
import sys
import time

from oslo_config import cfg

from instanceha import log
from instanceha import runtime
from instanceha import conf as conf_pkg
from instanceha.cmd.common import config_arguments
from instanceha.cmd.common import split_config_args
from instanceha.drivers.compute import base as compute_base


#: Signals that stop the service; SIGHUP reloads it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Signals:
    """SIGTERM and SIGINT (stop) and SIGHUP (reload), for the main loop.

    The kernel may deliver a signal sent to the process to any of its
    threads. CPython's C-level handler then runs in that thread and only
    marks the signal; the Python handler waits until the main thread
    executes Python code again. A main thread blocked on a
    ``threading.Event`` (a lock) is not woken by that, so a SIGHUP could
    wait for the next signal (measured on a busy process: 3 of 200 never
    handled): the cause of the flaky SIGHUP test. The C handler also
    writes the signal number to the wakeup fd (``signal.set_wakeup_fd``)
    in whatever thread it runs: the loop waits on that fd and reads the
    numbers from it, so it wakes at once, no signal is lost, and no
    handler takes a lock. Signals that arrive while a reload runs stay in
    the fd: the loop reloads again after it (the file is read anew).
    Must be made by the main thread.
    """

    def __init__(self):
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._pending = set()
        self._previous = signal.set_wakeup_fd(self._w.fileno(),
                                              warn_on_full_buffer=False)
        # The Python handler does nothing: the C handler's byte in the
        # wakeup fd is the message (and SIGINT raises no KeyboardInterrupt).
        self._handlers = {}
        for sig in STOP_SIGNALS + (signal.SIGHUP,):
            self._handlers[sig] = signal.signal(sig, self._noted)

    @staticmethod
    def _noted(signum, frame):
        pass

    def _read(self, timeout):
        try:
            ready, _, _ = select.select([self._r], [], [], timeout)
        except InterruptedError:       # pragma: no cover - PEP 475 retries
            ready = [self._r]
        while ready:
            try:
                data = self._r.recv(512)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            self._pending.update(data)

    def wait(self, timeout=None):
        """The signal numbers received since the last call (a set, maybe
        empty after ``timeout`` seconds); blocks until one arrives."""
        if not self._pending:
            self._read(timeout)
        else:
            self._read(0)
        got, self._pending = self._pending, set()
        return got

    def sleep(self, seconds):
        """Sleep up to ``seconds``; True (at once) when a stop signal came.
        Other signals are kept for :meth:`wait`."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            if self._pending.intersection(STOP_SIGNALS):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left)

    def close(self):
        """Put back the handlers and wakeup fd found at construction."""
        for sig, handler in self._handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous)
        self._r.close()
        self._w.close()


def serve(svc, signals):
    """The main loop of a started service: reload on SIGHUP, stop on
    SIGTERM or SIGINT (after the reload running, if any)."""
    while True:
        got = signals.wait()
        if got.intersection(STOP_SIGNALS):
            break
        if signal.SIGHUP in got:
            svc.reload()
    svc.stop()


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha run",
        description="Run the instanceha service in the foreground until "
                    "SIGTERM or SIGINT; SIGHUP reloads its mutable "
                    "options and the inventory. Exit status 2 when it "
                    "cannot start (the configuration, a bind, a backend "
                    "that refuses); 'instanceha check' checks first.")
    config_arguments(p)
    return p


def refuse(lines, what="cannot start"):
    """Say each start-up refusal on one line of stderr; exit status 2."""
    for line in lines:
        print("instanceha: %s: %s" % (what, log.mask_text(line)),
              file=sys.stderr)
    return 2


def main(argv):
    mine, oslo = split_config_args(argv)
    _args, more = parser().parse_known_args(mine)
    # Local: only ``run`` needs the service; at module top its openstacksdk,
    # oslo.messaging and SQLAlchemy would cost every CLI command ~0.4 s.
    from instanceha import service as service_mod
    from instanceha.service import preflight
    try:
        conf = conf_pkg.load(oslo + more)
    except (cfg.Error, ValueError) as e:
        return refuse([str(e)], "configuration error")
    log.setup(conf.log_format, conf.debug)
    # The start-up checks ``instanceha check`` makes too, before anything
    # is built or bound: every refusal, one line each.
    refused = preflight.refusals(preflight.run(conf))
    if refused:
        return refuse(refused)
    # Before anything starts a thread: a signal sent meanwhile is kept.
    signals = Signals()
    try:
        return _run(conf, signals, service_mod, compute_base.ComputeError)
    finally:
        signals.close()


def _run(conf, signals, service_mod, ComputeError):
    try:
        svc = service_mod.Service(conf, sleep=signals.sleep)
    except (service_mod.ConfigError, ComputeError) as e:
        return refuse([str(e)])
    try:
        svc.start()
    except service_mod.StartupError as e:
        # Nothing was acted on and what was bound is closed again.
        return refuse([str(e)])
    except service_mod.StartInterrupted as e:
        # SIGTERM while a backend was awaited: nothing was acted on.
        print("instanceha: stopped before the start finished: %s" % e,
              file=sys.stderr)
        return 0
    runtime.freeze_startup_heap()
    serve(svc, signals)
    return 0
