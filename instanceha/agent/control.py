"""Soft fencing on the agent's side: restart nova-compute when an engine
asks, or on the agent's own policy, a bounded number of times.

Requests arrive as signed UDP datagrams
(:class:`~instanceha.heartbeat.protocol.Request`) on ``[agent]
control_addresses`` (empty: nothing is bound). One is carried out only
when all hold, checked in this order, each refusal logged with its
reason:

1. it decodes and its signature verifies with the agent's keyring
   (otherwise one of the protocol's drop reasons; these are counted and
   logged at most once a minute per reason, as is ``replayed``/``stale``,
   so a flood of junk cannot flood the log);
2. it is a request (``not_a_request``), for this host (``wrong_host``),
   of a known kind (``unknown_kind``);
3. it is fresh and new: the replay guard in strict mode, no clock offset
   learned (``stale``: the engine's clock and this host's differ by more
   than ``[agent] replay_window``; ``replayed``);
4. ``[agent] restart_compute`` is true (``disabled``: the default);
5. no restart is running (``busy``) and fewer than ``restart_max`` ran in
   the last ``restart_window`` seconds (``rate_limited``).

The agent's own policy (``[agent] self_restart``, off by default):
:meth:`Control.observe` is given each beat's facts; nova-compute seen
down for ``self_restart_after`` seconds is restarted, under the same
limit. Each attempt is logged (``agent.restart_started`` with its origin
and reason, then ``agent.restart_done`` or ``agent.restart_failed``).

The restart command (``[agent] restart_command``, ``systemctl --no-block
restart {unit}`` by default) runs on a thread of its own, so neither the
beats nor the request socket wait for it.
"""

import collections
import selectors
import socket
import subprocess
import threading
import time

import structlog

from instanceha.conf import agent as agent_conf
from instanceha.errors import ConfigError
from instanceha.heartbeat import protocol
from instanceha.heartbeat import replay
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.agent.control")

ACCEPTED = "accepted"
#: Why an authentic request was refused (besides the replay guard's).
REFUSALS = ("not_a_request", "wrong_host", "unknown_kind", "disabled",
            "busy", "rate_limited")
#: Drops logged at most once per this many seconds per reason.
DROP_LOG_INTERVAL = 60.0
_GUARD_PATH = "control"
_GUARD_BOOT = "engines"


def _receive_failed(stage, exc):
    if stage == datagrams.RECEIVE:
        LOG.warning("agent.control_receive_failed", error=str(exc))
    else:
        LOG.exception("agent.request_failed")


def _spawn(target, *args):
    threading.Thread(target=target, args=args, name="agent-restart",
                     daemon=True).start()


class RestartLimiter:
    """At most ``limit`` restarts per ``window`` seconds (monotonic)."""

    def __init__(self, limit, window):
        self.limit = limit
        self.window = window
        self._times = collections.deque()

    def allow(self, now):
        while self._times and now - self._times[0] >= self.window:
            self._times.popleft()
        return len(self._times) < self.limit

    def note(self, now):
        self._times.append(now)


class Control:
    """The request receiver and restart policy (see the module's text).

    ``clock`` is the wall clock (compared with requests' ``sent_at``),
    ``monotonic`` times the rate limit and self-restart delay,
    ``runner`` has subprocess.run's signature, ``unit_fn()`` names the
    nova-compute unit for ``{unit}``, ``spawn(fn, *args)`` runs a restart
    (a new thread by default)."""

    def __init__(self, conf, keyring, host, clock=time.time,
                 monotonic=time.monotonic, runner=subprocess.run,
                 socket_factory=socket.socket, unit_fn=None, spawn=_spawn,
                 resolver=socket.getaddrinfo):
        self._group = group = conf.agent
        self.keyring = keyring
        self.host = host
        self._clock = clock
        self._monotonic = monotonic
        self._runner = runner
        self._socket_factory = socket_factory
        self._resolver = resolver
        self._unit_fn = unit_fn or (
            lambda: (group.compute_units or ["nova-compute.service"])[0])
        self._spawn = spawn
        self._guard = replay.ReplayGuard(window=group.replay_window,
                                         learn_offset=False)
        self._limiter = RestartLimiter(group.restart_max,
                                       group.restart_window)
        self._lock = threading.Lock()
        self._busy = False
        self._down_since = None
        self._dropped_logged = {}
        self.counts = collections.Counter()
        self.attempts = collections.deque(maxlen=20)
        self._sockets = []
        self._thread = None
        self._wake = None

    # -- requests -----------------------------------------------------------

    def handle(self, data, source=None):
        """Judge one datagram; return ``"accepted"`` or the reason it was
        refused (a drop reason or one of :data:`REFUSALS`)."""
        try:
            msg = protocol.decode(data, self.keyring)
        except protocol.Dropped as e:
            return self._dropped(e.reason, source)
        if not isinstance(msg, protocol.Request):
            return self._dropped("not_a_request", source)
        if msg.host != self.host:
            return self._refused("wrong_host", msg, source)
        if msg.kind != protocol.RESTART_COMPUTE:
            return self._refused("unknown_kind", msg, source)
        stale = self._guard.check(msg.host, _GUARD_PATH, _GUARD_BOOT,
                                  msg.seq, msg.sent_at, self._clock())
        if stale is not None:
            return self._dropped(stale, source)
        if not self._group.restart_compute:
            return self._refused("disabled", msg, source)
        outcome = self.restart("request", msg.reason)
        if outcome != ACCEPTED:
            return self._refused(outcome, msg, source)
        self.counts[ACCEPTED] += 1
        LOG.info("agent.request_accepted", kind=msg.kind, seq=msg.seq,
                 asked_because=msg.reason, source=source)
        return ACCEPTED

    def _refused(self, why, msg, source):
        self.counts[why] += 1
        LOG.warning("agent.request_refused", reason=why, kind=msg.kind,
                    target=msg.host, seq=msg.seq, asked_because=msg.reason,
                    source=source)
        return why

    def _dropped(self, why, source):
        self.counts[why] += 1
        now = self._monotonic()
        last = self._dropped_logged.get(why)
        if last is None or now - last >= DROP_LOG_INTERVAL:
            self._dropped_logged[why] = now
            LOG.warning("agent.request_dropped", reason=why,
                        count=self.counts[why], source=source)
        return why

    # -- restarts -----------------------------------------------------------

    def restart(self, origin, reason):
        """Start a restart of nova-compute unless one runs or the limit
        is reached: ``"accepted"``, ``"busy"`` or ``"rate_limited"``."""
        now = self._monotonic()
        with self._lock:
            if self._busy:
                return "busy"
            if not self._limiter.allow(now):
                return "rate_limited"
            self._limiter.note(now)
            self._busy = True
        command = [arg.replace("{unit}", self._unit_fn())
                   for arg in self._group.restart_command]
        LOG.warning("agent.restart_started", origin=origin,
                    reason=reason, command=" ".join(command))
        try:
            self._spawn(self._run_restart, origin, command)
        except Exception:
            with self._lock:
                self._busy = False
            raise
        return ACCEPTED

    def _run_restart(self, origin, command):
        started = self._clock()
        try:
            done = self._runner(command, capture_output=True, text=True,
                                timeout=self._group.restart_timeout,
                                check=False)
        except (OSError, subprocess.SubprocessError) as e:
            result, detail = "failed", str(e)
        else:
            result = "done" if done.returncode == 0 else "failed"
            detail = ("exit status %d: %s" % (
                done.returncode, (done.stderr or "").strip()[:200])
                if done.returncode else "")
        finally:
            with self._lock:
                self._busy = False
        self.attempts.append((started, origin, result, detail))
        if result == "done":
            LOG.info("agent.restart_done", origin=origin)
        else:
            LOG.error("agent.restart_failed", origin=origin, error=detail)

    def observe(self, facts):
        """The agent's own policy, given each beat's facts: restart
        nova-compute seen down for ``self_restart_after`` seconds."""
        if not self._group.self_restart:
            return None
        now = self._monotonic()
        if facts.compute is not False:
            self._down_since = None
            return None
        if self._down_since is None:
            self._down_since = now
            return None
        if now - self._down_since < self._group.self_restart_after:
            return None
        # Whatever the outcome, a full delay before the next attempt.
        self._down_since = now
        outcome = self.restart(
            "self", "nova-compute down for %.0f s"
            % self._group.self_restart_after)
        if outcome != ACCEPTED:
            self.counts[outcome] += 1
            LOG.warning("agent.self_restart_refused", reason=outcome)
        return outcome

    # -- the socket ---------------------------------------------------------

    def start(self):
        """Bind ``control_addresses`` and receive on a thread; nothing
        when the list is empty. Raises ConfigError when one cannot be
        bound."""
        for item in self._group.control_addresses:
            try:
                host, port = agent_conf.split_address(item)
                family, _, _, _, address = self._resolver(
                    host, port, type=socket.SOCK_DGRAM)[0]
                sock = self._socket_factory(family, socket.SOCK_DGRAM)
            except (ValueError, OSError) as e:
                self.stop()
                raise ConfigError("[agent] control_addresses: %s: %s"
                                  % (item, e))
            try:
                sock.setblocking(False)
                sock.bind(address)
            except OSError as e:
                sock.close()
                self.stop()
                raise ConfigError("[agent] control_addresses: %s: cannot "
                                  "bind (%s)" % (item, e.strerror or e))
            self._sockets.append(sock)
        if not self._sockets:
            return
        self._wake = socket.socketpair()
        self._thread = threading.Thread(target=self._serve,
                                        name="agent-control", daemon=True)
        self._thread.start()
        LOG.info("agent.control_listening",
                 addresses=[s.getsockname()[:2] for s in self._sockets],
                 restart_compute=self._group.restart_compute)

    @property
    def addresses(self):
        """The bound (address, port) pairs."""
        return [s.getsockname()[:2] for s in self._sockets]

    def _serve(self):
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake[0], selectors.EVENT_READ)
            for sock in self._sockets:
                sel.register(sock, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self._wake[0]:
                        return
                    self._drain(key.fileobj)

    def _drain(self, sock):
        datagrams.drain(sock, protocol.MAX_SIZE + 1, self._received,
                        _receive_failed)

    def _received(self, data, sender):
        self.handle(data, "%s:%s" % sender[:2])

    def stop(self):
        if self._thread is not None:
            self._wake[1].send(b"x")
            self._thread.join(5)
            self._thread = None
        if self._wake is not None:
            for s in self._wake:
                s.close()
            self._wake = None
        for sock in self._sockets:
            sock.close()
        self._sockets = []
