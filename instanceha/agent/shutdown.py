"""Orderly shutdown drains first (issue 38): with ``[agent]
drain_on_shutdown``, the agent holds a systemd-logind *delay* inhibitor
lock on shutdown; when logind says the host is about to shut down or
reboot (``PrepareForShutdown(true)``), the agent asks the engines to
drain the host, waits for the acting engine to answer ``drained`` (or
``refused``, or for ``[agent] shutdown_drain_timeout`` to pass), then
releases the lock and the shutdown goes on.

The request (:data:`~instanceha.heartbeat.protocol.DRAIN_HOST`) is a
signed :class:`~instanceha.heartbeat.protocol.Request` naming this host,
sent on every beat path to every engine and repeated every
``resend`` seconds (datagrams get lost); each carries a new sequence
number (the agent's clock in milliseconds, strictly increasing), which
the engine's strict replay guard checks: a recorded request replayed is
dropped. The engine's answer
(:data:`~instanceha.heartbeat.protocol.DRAIN_STATUS`) arrives on the
path sockets, signed with this host's key, and echoes the sequence
number of a request sent in this shutdown: any other is dropped, so a
recorded answer cannot end a later wait early.

logind holds the shutdown for no longer than its ``InhibitDelayMaxSec``
(5 s by default): ``shutdown_drain_timeout`` is capped by it, whatever
is configured. A shutdown that logind cancels
(``PrepareForShutdown(false)``) gets the lock taken again.

:class:`Logind` is what the agent needs of logind;
:class:`SystemLogind` speaks D-Bus to the real one (jeepney), tests give
a fake.
"""

import os
import threading
import time

import structlog

from instanceha.heartbeat import protocol

LOG = structlog.get_logger("instanceha.agent.shutdown")

WHAT = "shutdown"
WHO = "instanceha-agent"
WHY = "drain servers before shutdown"
MODE = "delay"
LOGIN1 = "org.freedesktop.login1"
LOGIN1_PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"

#: The outcomes of :meth:`ShutdownDrain.prepare`.
DRAINED = protocol.DRAINED
REFUSED = protocol.DRAIN_REFUSED
TIMED_OUT = "timed_out"
#: What :meth:`ShutdownDrain.on_answer` says of an answer not taken.
UNASKED = "unasked"


class LogindError(Exception):
    """logind could not be reached or refused a call."""


class Logind:
    """What the agent needs of systemd-logind."""

    def inhibit(self, what, who, why, mode):
        """Take an inhibitor lock; return its file descriptor (closing it
        releases the lock). Raises LogindError."""
        raise NotImplementedError

    def delay_max(self):
        """logind's InhibitDelayMaxSec in seconds, None when unknown."""
        return None

    def watch(self, on_prepare):
        """Call ``on_prepare(start)`` for each PrepareForShutdown signal
        from now on (on a thread of the implementation's own). Raises
        LogindError."""
        raise NotImplementedError

    def close(self):
        """Stop watching and disconnect."""


class SystemLogind(Logind):
    """logind on the system D-Bus (``bus``: "SYSTEM", or a bus address),
    through jeepney (pure Python)."""

    def __init__(self, bus="SYSTEM", call_timeout=5.0):
        self._bus = bus
        self._timeout = call_timeout
        self._conn = None
        self._thread = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _connection(self):
        if self._conn is None:
            try:
                from jeepney.io.blocking import open_dbus_connection
                self._conn = open_dbus_connection(bus=self._bus,
                                                  enable_fds=True)
            except Exception as e:   # noqa: BLE001 - ImportError, OSError
                raise LogindError("cannot reach D-Bus (%s): %s"
                                  % (self._bus, e))
        return self._conn

    def _call(self, method, signature=None, body=(), interface=MANAGER):
        from jeepney import DBusAddress, new_method_call
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg
        address = DBusAddress(LOGIN1_PATH, bus_name=LOGIN1,
                              interface=interface)
        with self._lock:
            conn = self._connection()
            try:
                reply = conn.send_and_get_reply(
                    new_method_call(address, method, signature, body),
                    timeout=self._timeout)
                return unwrap_msg(reply)
            except DBusErrorResponse as e:
                raise LogindError("logind refused %s: %s" % (method, e))
            except (OSError, TimeoutError, ValueError) as e:
                raise LogindError("logind %s failed: %s" % (method, e))

    def inhibit(self, what, who, why, mode):
        (fd,) = self._call("Inhibit", "ssss", (what, who, why, mode))
        to_raw = getattr(fd, "to_raw_fd", None)
        return to_raw() if to_raw is not None else int(fd)

    def delay_max(self):
        try:
            (value,) = self._call(
                "Get", "ss", (MANAGER, "InhibitDelayMaxUSec"),
                interface="org.freedesktop.DBus.Properties")
            return value[1] / 1e6
        except (LogindError, TypeError, ValueError, IndexError):
            return None

    def watch(self, on_prepare):
        from jeepney import MatchRule
        from jeepney.bus_messages import message_bus
        rule = MatchRule(type="signal", interface=MANAGER,
                         member="PrepareForShutdown", path=LOGIN1_PATH)
        with self._lock:
            conn = self._connection()
            try:
                conn.send_and_get_reply(message_bus.AddMatch(rule),
                                        timeout=self._timeout)
            except (OSError, TimeoutError, ValueError) as e:
                raise LogindError("cannot watch logind's signals: %s" % e)
        self._thread = threading.Thread(
            target=self._serve, args=(conn, rule, on_prepare),
            name="agent-logind", daemon=True)
        self._thread.start()

    def _serve(self, conn, rule, on_prepare):
        while not self._stop.is_set():
            try:
                with self._lock:
                    msg = conn.receive(timeout=0.5)
            except TimeoutError:
                continue
            except (OSError, ValueError) as e:
                if not self._stop.is_set():
                    LOG.error("agent.logind_lost", error=str(e),
                              effect="no drain at the next shutdown")
                return
            if rule.matches(msg) and msg.body:
                try:
                    on_prepare(bool(msg.body[0]))
                except Exception:
                    LOG.exception("agent.shutdown_drain_failed")

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _wait(event, seconds):
    return event.wait(seconds)


class ShutdownDrain:
    """The inhibitor and the drain before a shutdown (see the module's
    text). ``send(data)`` hands a signed datagram to every engine (the
    sender's paths), ``sent_at()`` is the sender's step-free wall clock,
    ``wait(event, seconds)`` waits for ``event`` (tests advance a fake
    clock instead), ``close_fd`` releases a lock."""

    def __init__(self, logind, keyring, host, send, sent_at, timeout,
                 resend=1.0, monotonic=time.monotonic, wait=_wait,
                 close_fd=os.close):
        self.logind = logind
        self.keyring = keyring
        self.host = host
        self._send = send
        self._sent_at = sent_at
        self.timeout = timeout
        self.resend = resend
        self._monotonic = monotonic
        self._wait = wait
        self._close_fd = close_fd
        self._lock = threading.Lock()
        self.fd = None
        self._seqs = set()
        self._last_seq = 0
        self._answered = threading.Event()
        self._status = None
        self._detail = ""
        #: (outcome, seconds waited) of each shutdown, for tests and logs
        self.outcomes = []

    # -- the lock -----------------------------------------------------------

    def start(self):
        """Take the lock and watch for shutdowns; False (logged) when
        logind cannot be reached: the agent beats on, and a shutdown
        drains nothing."""
        try:
            limit = self.logind.delay_max()
            if limit is not None and limit < self.timeout:
                LOG.warning("agent.shutdown_drain_capped",
                            configured=self.timeout, logind_max=limit,
                            reason="logind holds a shutdown no longer "
                                   "than its InhibitDelayMaxSec: raise it "
                                   "(logind.conf) to wait longer")
                self.timeout = limit
            self._take()
            self.logind.watch(self.on_prepare)
        except LogindError as e:
            LOG.error("agent.shutdown_inhibitor_not_taken", error=str(e),
                      effect="a shutdown of this host will not wait for "
                             "its servers to be drained")
            return False
        LOG.info("agent.shutdown_inhibitor_taken", fd=self.fd,
                 timeout=self.timeout,
                 reason="[agent] drain_on_shutdown: a shutdown waits for "
                        "the engines to drain this host")
        return True

    def _take(self):
        with self._lock:
            if self.fd is None:
                self.fd = self.logind.inhibit(WHAT, WHO, WHY, MODE)

    def release(self):
        with self._lock:
            fd, self.fd = self.fd, None
        if fd is not None:
            try:
                self._close_fd(fd)
            except OSError:
                pass
        return fd is not None

    def stop(self):
        self.logind.close()
        self.release()

    # -- a shutdown ---------------------------------------------------------

    def on_prepare(self, start):
        """logind's PrepareForShutdown(start)."""
        if not start:
            LOG.info("agent.shutdown_cancelled",
                     reason="logind says the shutdown is off: the "
                            "inhibitor is taken again")
            try:
                self._take()
            except LogindError as e:
                LOG.error("agent.shutdown_inhibitor_not_taken",
                          error=str(e))
            return None
        return self.prepare()

    def prepare(self):
        """Ask for the drain, wait for the answer or the bound, release
        the lock; return the outcome."""
        began = self._monotonic()
        deadline = began + self.timeout
        with self._lock:
            self._seqs.clear()
            self._answered.clear()
            self._status, self._detail = None, ""
        LOG.warning("agent.shutdown_drain_asking", timeout=self.timeout,
                    reason="this host shuts down or reboots: asking the "
                           "engines to drain it first")
        outcome = TIMED_OUT
        while True:
            now = self._monotonic()
            if now >= deadline:
                break
            try:
                self._ask()
            except Exception:   # a send failure: asked again next round
                LOG.exception("agent.shutdown_drain_request_failed")
            if self._wait(self._answered,
                          min(self.resend, deadline - now)):
                outcome = self._status
                break
        waited = self._monotonic() - began
        self.release()
        self.outcomes.append((outcome, waited))
        if outcome == DRAINED:
            LOG.info("agent.shutdown_drained", waited=round(waited, 1),
                     detail=self._detail,
                     reason="the engines drained this host: the shutdown "
                            "goes on")
        else:
            LOG.error("agent.shutdown_not_drained", outcome=outcome,
                      waited=round(waited, 1), detail=self._detail,
                      reason="releasing the inhibitor anyway: the shutdown "
                             "goes on; servers still here stop with the "
                             "host")
        return outcome

    def _ask(self):
        sent_at = self._sent_at()
        with self._lock:
            seq = max(protocol.request_seq(sent_at), self._last_seq + 1)
            self._last_seq = seq
            self._seqs.add(seq)
        request = protocol.Request(
            kind=protocol.DRAIN_HOST, host=self.host, seq=seq,
            sent_at=sent_at, reason="orderly shutdown or reboot of the "
                                    "host (logind)")
        self._send(protocol.encode_request(request, self.keyring.current))

    def on_answer(self, msg):
        """An engine's verified :data:`protocol.DRAIN_STATUS` (a Request
        read on a path socket); returns its status, or :data:`UNASKED`
        for one that answers no request of this shutdown."""
        if msg.kind != protocol.DRAIN_STATUS or msg.host != self.host:
            return UNASKED
        status, _, detail = msg.reason.partition(":")
        with self._lock:
            if msg.seq not in self._seqs or \
                    status not in protocol.DRAIN_STATUSES:
                return UNASKED
            first = self._status != status
            self._status, self._detail = status, detail.strip()
        if status == protocol.DRAINING:
            if first:
                LOG.info("agent.shutdown_draining", detail=detail.strip())
            return status
        self._answered.set()
        return status
