"""The beat loop: every ``[agent] interval`` seconds, one signed datagram
per network path to every engine address.

Identity. ``host`` is the name Nova knows the host by: ``[agent] host``,
else nova.conf's ``[DEFAULT] host``, else the system's host name (Nova's
own default). ``boot_id`` is the kernel's (a new one at every boot: the
engine tells a reboot from a pause by it).

Numbers and times. Each path has its own sequence, one more per beat; it
starts at the milliseconds since boot (``CLOCK_BOOTTIME``), so a restarted
agent continues above what its predecessor sent in the same boot and the
engine's replay guard accepts it at once. All engine addresses of a path
get the same datagram (same sequence number: each engine sees its own
copy). ``sent_at`` is the wall clock read once at start plus the
monotonic time elapsed since: a clock step while the agent runs (NTP
correcting the clock after boot) does not move it, so the engine's
learned offset for this host stays right (see
:mod:`instanceha.heartbeat.replay`).

Failures to send (a network down) are counted per path and logged when a
path starts failing and when it recovers, not at every beat.

Challenges. Each engine sends, every few seconds, a signed challenge
back to the address and port the beats come from: the path sockets
receive them (a thread of their own while :meth:`Sender.run` beats, or
:meth:`Sender.handle_reply` fed by the caller). A challenge that
verifies with this host's keyring and names this host is kept, the
newest per engine; every beat echoes them
(:mod:`instanceha.heartbeat.challenge`). An engine takes a beat as
proof that this host lives, and keeps it from being fenced, only when
it echoes one of that engine's latest challenges. Anything else that
arrives is counted by reason (:attr:`Sender.replies`) and logged at
most once a minute per reason.
"""

import collections
import configparser
import errno
import selectors
import socket
import threading
import time

import structlog

from instanceha.conf import agent as agent_conf
from instanceha.errors import ConfigError
from instanceha.heartbeat import challenge
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.agent.sender")

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
#: What :meth:`Sender.handle_reply` answers for a challenge kept.
ECHOED = "echoed"
#: What :meth:`Sender.handle_reply` answers for a relayed pill kept.
RELAYED = "relayed"
#: What :meth:`Sender.handle_reply` answers for an engine's answer to a
#: drain request taken (:mod:`instanceha.agent.shutdown`).
DRAIN_ANSWER = "drain_answer"
#: The datagrams the path sockets read besides beats and requests.
_REPLY_BODIES = {protocol.CHALLENGE: challenge.read_body,
                 peer.RELAY: peer.read_relay}
#: A datagram on a path socket that is not a challenge for this host.
NOT_A_CHALLENGE = "not_a_challenge"
WRONG_HOST = "wrong_host"
#: A reply drop reason is logged at most once per this many seconds.
REPLY_LOG_INTERVAL = 60.0


def read_boot_id(path=BOOT_ID_FILE):
    """The kernel's boot id; raises ConfigError when it cannot be read."""
    try:
        with open(path) as f:
            boot_id = f.read(100).strip()
    except OSError as e:
        raise ConfigError("boot id: cannot read %s (%s)"
                          % (path, e.strerror or e))
    if not boot_id or len(boot_id) > protocol.MAX_BOOT_ID:
        raise ConfigError("boot id: %s holds no boot id" % path)
    return boot_id


def boot_millis():
    """Milliseconds since boot, suspend included (the first sequence
    number)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1000)


def nova_host(path):
    """nova.conf's ``[DEFAULT] host`` at ``path``, or None (unset, or the
    file unreadable)."""
    parser = configparser.RawConfigParser(strict=False)
    try:
        with open(path) as f:
            parser.read_file(f)
    except (OSError, configparser.Error, UnicodeDecodeError) as e:
        LOG.info("agent.nova_conf_unread", path=path, error=str(e))
        return None
    return (parser.defaults().get("host") or "").strip() or None


def resolve_host(conf, gethostname=socket.gethostname, read_nova=nova_host):
    """This host's name as Nova knows it (see the module's text)."""
    group = conf.agent
    if group.host:
        return group.host
    return read_nova(group.nova_conf) or gethostname()


def resolve_engines(items, resolver=socket.getaddrinfo):
    """[(family, sockaddr)] of ``[agent] engines``, resolved now; raises
    ConfigError naming an entry that does not resolve."""
    engines = []
    for item in items:
        try:
            host, port = agent_conf.split_address(
                item, agent_conf.DEFAULT_ENGINE_PORT)
            info = resolver(host, port, type=socket.SOCK_DGRAM)
        except (ValueError, OSError) as e:
            raise ConfigError("[agent] engines: %s: %s" % (item, e))
        family, _, _, _, sockaddr = info[0]
        engines.append((family, sockaddr))
    return engines


def _family(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class _Path:
    """One network path: its name, sockets (per address family) and
    sequence."""

    def __init__(self, name, address, seq):
        self.name = name
        self.address = address
        self.seq = seq
        self.sockets = {}
        self.sent = 0
        self.errors = 0
        self.failing = False


class Sender:
    """Sends this host's beats (see the module's text).

    ``clock`` is the wall clock (read once, at construction),
    ``facts_fn()`` returns the :class:`~instanceha.heartbeat.protocol.Facts`
    of each beat, ``socket_factory(family, type)`` makes the sockets.
    ``host``, ``boot_id``, ``seq_start``, ``monotonic`` and ``resolver``
    are read from the system unless given (tests, the simulator)."""

    def __init__(self, conf, keyring, clock=time.time, facts_fn=None,
                 socket_factory=socket.socket, host=None, boot_id=None,
                 monotonic=time.monotonic, seq_start=None,
                 resolver=socket.getaddrinfo, watchdog_fn=None,
                 on_challenge=None, on_relay=None):
        group = conf.agent
        #: watchdog_fn(now) -> the beat's WatchdogReport or None;
        #: on_challenge(challenge, data) is given each challenge kept
        #: (the watchdog duty: instanceha.agent.guardian)
        self._watchdog_fn = watchdog_fn or (lambda now: None)
        self._on_challenge = on_challenge
        #: on_relay(relay): an engine's relayed pill for a peer
        self.on_relay = on_relay
        #: on_drain_answer(request): an engine's answer to this host's
        #: drain request before a shutdown (instanceha.agent.shutdown);
        #: returns its status, or why it was not taken
        self.on_drain_answer = None
        self.interval = group.interval
        self.keyring = keyring
        self.host = host or resolve_host(conf)
        self.boot_id = boot_id or read_boot_id()
        self._facts_fn = facts_fn or (lambda: protocol.UNKNOWN_FACTS)
        #: The newest challenge of each engine heard, echoed in beats.
        self.echoes = challenge.Echoes()
        #: Datagrams received on the path sockets, by outcome.
        self.replies = collections.Counter()
        self._reply_logged = {}
        self._reply_thread = None
        self._reply_wake = None
        self._monotonic = monotonic
        self._mono0 = monotonic()
        self._wall0 = clock()
        seq = boot_millis() if seq_start is None else seq_start
        self._engines = resolve_engines(group.engines, resolver)
        try:
            paths = agent_conf.parse_paths(group.paths)
        except ValueError as e:
            raise ConfigError("[agent] paths: %s" % e)
        self.paths = [_Path(name, address, seq) for name, address in paths]
        try:      # a host name that no beat can carry fails now
            protocol.encode_beat(self._beat(self.paths[0], 0.0,
                                            protocol.UNKNOWN_FACTS),
                                 keyring.current)
        except ValueError as e:
            raise ConfigError("[agent] host %r: %s" % (self.host, e))
        for path in self.paths:
            self._open(path, socket_factory)

    def _open(self, path, socket_factory):
        families = {family for family, _ in self._engines}
        if path.address is not None:
            family = _family(path.address)
            if family not in families:
                raise ConfigError(
                    "[agent] paths: %s=%s: no engine address of that "
                    "address family" % (path.name, path.address))
            families = {family}
        for family in families:
            sock = socket_factory(family, socket.SOCK_DGRAM)
            try:
                sock.setblocking(False)
                if path.address is not None:
                    sock.bind((path.address, 0))
            except OSError as e:
                sock.close()
                self.close()
                raise ConfigError("[agent] paths: %s=%s: cannot bind (%s)"
                                  % (path.name, path.address,
                                     e.strerror or e))
            path.sockets[family] = sock

    def close(self):
        self.stop_replies()
        for path in self.paths:
            for sock in path.sockets.values():
                sock.close()
            path.sockets.clear()

    def sent_at(self):
        """The send time of a beat now: step-free wall clock."""
        return self._wall0 + (self._monotonic() - self._mono0)

    def _beat(self, path, sent_at, facts, echoes=(), watchdog=None):
        return protocol.Beat(host=self.host, boot_id=self.boot_id,
                             seq=path.seq, sent_at=sent_at, path=path.name,
                             facts=facts, echoes=echoes, watchdog=watchdog)

    def send_once(self):
        """Send one beat on every path to every engine; return the number
        of datagrams handed to the kernel."""
        facts = self._facts_fn()
        sent_at = self.sent_at()
        now = self._monotonic()
        echoes = self.echoes.current(now)
        watchdog = self._watchdog_fn(now)
        key = self.keyring.current
        total = 0
        for path in self.paths:
            path.seq += 1
            data = protocol.encode_beat(
                self._beat(path, sent_at, facts, echoes, watchdog), key)
            sent = self._to_engines(path, data)
            path.sent += sent
            total += sent
        return total

    def send_every_path(self, data):
        """Send one signed datagram (a drain request) to every engine
        over every path; return the number handed to the kernel."""
        return sum(self._to_engines(path, data) for path in self.paths)

    def send_event(self, data):
        """Send one signed datagram other than a beat (a guest event) to
        every engine over the first path; return the number handed to
        the kernel. Failures count on that path, as beats' do."""
        return self._to_engines(self.paths[0], data)

    def _to_engines(self, path, data):
        """``data`` to every engine on ``path``; the number handed to the
        kernel. A failure counts in the path's errors and is said once
        (_note)."""
        total = 0
        failed = None
        for family, address in self._engines:
            sock = path.sockets.get(family)
            if sock is None:
                continue
            try:
                sock.sendto(data, address)
            except OSError as e:
                failed = e
                path.errors += 1
            else:
                total += 1
        self._note(path, failed)
        return total

    def _note(self, path, failed):
        if failed is not None and not path.failing:
            LOG.warning("agent.path_failing", path=path.name,
                        error=errno.errorcode.get(failed.errno,
                                                  str(failed)))
        elif failed is None and path.failing:
            LOG.info("agent.path_recovered", path=path.name,
                     errors=path.errors)
        path.failing = failed is not None

    def run(self, stop_event):
        """Beat every ``interval`` seconds until ``stop_event`` is set
        (its ``wait`` is the only pause), receiving the engines'
        challenges meanwhile. Beats are due at fixed times;
        when sending ran past the next one, it is sent at once and the
        schedule goes on from there (no burst to catch up)."""
        self.start_replies()
        try:
            self._beat_loop(stop_event)
        finally:
            self.stop_replies()

    def _beat_loop(self, stop_event):
        due = self._monotonic()
        while not stop_event.is_set():
            try:
                self.send_once()
            except Exception:
                LOG.exception("agent.beat_failed")
            due += self.interval
            now = self._monotonic()
            if due < now:
                due = now
            if stop_event.wait(due - now):
                break

    # -- the engines' challenges ---------------------------------------------

    def handle_reply(self, data, source=None):
        """Judge one datagram received on a path socket: a challenge for
        this host is kept for the next beats (:data:`ECHOED`); anything
        else is counted by reason (a protocol drop reason,
        :data:`NOT_A_CHALLENGE`, :data:`WRONG_HOST`) and dropped."""
        try:
            message, _ = protocol.decode_signed(data, self.keyring,
                                                _REPLY_BODIES)
        except protocol.Dropped as e:
            return self._reply_dropped(e.reason, source)
        if type(message) is peer.Relay and self.on_relay is not None:
            self.on_relay(message)
            self.replies[RELAYED] += 1
            return RELAYED
        if type(message) is protocol.Request and \
                message.kind == protocol.DRAIN_STATUS and \
                self.on_drain_answer is not None:
            taken = self.on_drain_answer(message)
            if taken in protocol.DRAIN_STATUSES:
                self.replies[DRAIN_ANSWER] += 1
                return DRAIN_ANSWER
            return self._reply_dropped(taken, source)
        if type(message) is not challenge.Challenge:
            return self._reply_dropped(NOT_A_CHALLENGE, source)
        if message.host != self.host:
            return self._reply_dropped(WRONG_HOST, source)
        self.echoes.heard(message, self._monotonic())
        self.replies[ECHOED] += 1
        if self._on_challenge is not None:
            self._on_challenge(message, bytes(data))
        return ECHOED

    def _reply_dropped(self, why, source):
        self.replies[why] += 1
        now = self._monotonic()
        last = self._reply_logged.get(why)
        if last is None or now - last >= REPLY_LOG_INTERVAL:
            self._reply_logged[why] = now
            LOG.warning("agent.challenge_dropped", reason=why,
                        count=self.replies[why], source=source,
                        note="logged at most once a minute per reason")
        return why

    def _received(self, data, sender):
        self.handle_reply(data, "%s:%s" % sender[:2])

    def start_replies(self):
        """Receive on the path sockets on a thread of its own (the
        challenges), until :meth:`stop_replies`."""
        if self._reply_thread is not None:
            return
        sel = selectors.DefaultSelector()
        for path in self.paths:
            for sock in path.sockets.values():
                try:
                    sel.register(sock, selectors.EVENT_READ)
                except (AttributeError, TypeError, ValueError,
                        OSError) as e:
                    LOG.warning("agent.challenges_not_received",
                                path=path.name, error=str(e),
                                effect="beats of this path echo no "
                                       "challenge it brings")
        if not sel.get_map():
            sel.close()
            return
        self._reply_wake = socket.socketpair()
        sel.register(self._reply_wake[0], selectors.EVENT_READ)
        self._reply_thread = threading.Thread(
            target=self._serve_replies, args=(sel,),
            name="agent-challenges", daemon=True)
        self._reply_thread.start()

    def _serve_replies(self, sel):
        size = protocol.MAX_SIZE + 1
        wake = self._reply_wake[0]
        with sel:
            while True:
                for key, _ in sel.select():
                    if key.fileobj is wake:
                        return
                    datagrams.drain(key.fileobj, size, self._received,
                                    _reply_failed)

    def stop_replies(self):
        if self._reply_thread is not None:
            self._reply_wake[1].send(b"x")
            self._reply_thread.join(5)
            self._reply_thread = None
        if self._reply_wake is not None:
            for sock in self._reply_wake:
                sock.close()
            self._reply_wake = None


def _reply_failed(stage, exc):
    if stage == datagrams.RECEIVE:
        LOG.warning("agent.challenge_receive_failed", error=str(exc))
    else:
        LOG.exception("agent.challenge_failed")
