"""The agents' heartbeat listener: signed UDP beats from the compute
hosts' ``instanceha-agent`` turned into AGENT_BEATING / AGENT_SILENT
(and AGENT_PEERS: the peers' word on a silent host) events, and signed requests sent back to the agents (soft fencing).

Off unless ``[agent] listen_addresses`` is set; a host whose agent never
beat is judged by Nova alone. One receiver thread reads the datagrams of
every configured address (a socket each) in batches, verifies them
(:mod:`instanceha.heartbeat.protocol`: size, format, version, key,
signature, fields, and that a host's own key signed for that host alone:
``wrong_host``), refuses replays and held back datagrams
(:mod:`instanceha.heartbeat.replay`) and records the beats in the host
table (:mod:`instanceha.sources.heartbeat_table`), which makes an event
on changes only. A periodic check reports hosts whose
paths fell silent.

Only beats proven fresh enter that table: every ``challenge_interval``
seconds this engine sends each host it heard a signed challenge, to the
address and port each path's beats came from, through the socket they
arrived on; a beat is proven when it echoes one of this engine's last
``challenge_window`` nonces (:mod:`instanceha.heartbeat.challenge`).
Beats held back, replayed after a restart of this engine, or from an
agent that echoes nothing are *unproven*: counted and shown (``view``,
``health``), never an event, so never a veto; the table sees such a host
as silent. Anything not accepted is counted by reason (the
protocol's :data:`~instanceha.heartbeat.protocol.DROP_REASONS`, plus
``unexpected_kind`` for a request sent to an engine other than an
agent's ``drain_host`` (below), ``no_drain_sink`` for that one when this
engine takes none, ``unknown_host`` for
a beat naming a host Nova does not know, ``no_guest_sink`` for a guest
event when instance repair is off) and never raises; a datagram
never creates a host: only Nova's hosts (``known_hosts()``) are tracked.

Keys (:class:`instanceha.heartbeat.keys.HostKeyring`): each host's own
key is derived from ``[agent] master_key_file`` when Nova's hosts are
read (once per host, not per datagram); the shared ``key_file`` of older
deployments is accepted while ``accept_shared_key`` is true, each host
still signing with it logged once (``agent_shared_key_used``) and counted
(``hosts_on_shared_key``, ``shared_key_beats``), and dropped as
``shared_key`` once it is false. Within the window, a host this engine
has heard on its own key is no longer spoken for by the shared key: a
shared-key datagram naming it is dropped as ``shared_key`` too (until
the engine restarts or Nova stops listing the host), so each host is
protected from the moment its agent moves. Requests to an agent are signed with the
key its beats are signed with.

An agent's ``drain_host`` request before an orderly shutdown of its host
(issue 38) is taken when signed with that host's own key (never the
shared key), for a host Nova knows, fresh and newer than the last one of
that host (a replay guard of its own, strict: no clock offset learned);
the acting engine hands it to ``drain_sink``
(:class:`instanceha.engine.shutdown_drain.ShutdownDrains`) and answers
with a ``drain_status`` echoing its sequence number, sent back to where
the request came from; a standby neither acts nor answers.

Threads: the receiver and the check change the table under ``_lock`` and
hand their events to the sink in order, under ``_emit`` (taken by this
module's threads only; the sink is called without ``_lock`` held, so the
engine may ask :meth:`heard` while it holds its own lock).
"""

import collections
import selectors
import socket
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, \
    Set, Tuple, Union, cast

import structlog

from instanceha.conf import heartbeat as heartbeat_conf
from instanceha.errors import ConfigError, StartupError
from instanceha.events import Event
from instanceha.heartbeat import challenge
from instanceha.heartbeat import guest
from instanceha.heartbeat import keys
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.heartbeat import replay
from instanceha.events import AgentReport
from instanceha.sources import heartbeat_table
from instanceha.sources import udp
from instanceha.sources.base import Sink
from instanceha.sources.heartbeat_table import Address, HostTable
from instanceha.sources.watchdog_book import WatchdogBook, WatchdogState
from instanceha.util import datagrams
from instanceha.util import periodic
from instanceha.util.writes import write

LOG = structlog.get_logger("instanceha.sources.heartbeat")

UNEXPECTED_KIND = "unexpected_kind"
#: The protocol's drop of a datagram signed with the shared key, also for
#: a host already heard on its own key.
SHARED_KEY = "shared_key"
UNKNOWN_HOST = "unknown_host"
NO_GUEST_SINK = "no_guest_sink"
#: A drain request of an agent while this engine takes none.
NO_DRAIN_SINK = "no_drain_sink"
#: A host heard in the view, whose recent beats are all unproven (no
#: veto: the table sees it as silent).
ALIVE_UNPROVEN = "alive_unproven"
#: The log-throttling key of unproven beats.
UNPROVEN = "unproven"
#: Every reason a datagram is dropped, for counting.
DROP_REASONS = protocol.DROP_REASONS + (UNEXPECTED_KIND, UNKNOWN_HOST,
                                        NO_GUEST_SINK, NO_DRAIN_SINK)
#: A drop reason is logged at most once per this many seconds.
DROP_LOG_INTERVAL = 60.0
#: Nova's host list is read again at most this often for an unknown name.
MIN_REFRESH_INTERVAL = 1.0
#: Host names reported as unknown are remembered up to this many.
MAX_UNKNOWN_NAMES = 1024
#: Paths whose last accepted beat is older than this (seconds) are no
#: longer sent challenges (the host, its agent or the path is down).
CHALLENGE_TARGET_TTL = 60.0
#: Datagrams read from one socket before looking at the others again.
_BURST = 256
#: Receive buffer asked for each socket (bytes).
_RCVBUF = 4 * 1024 * 1024

#: what a datagram that decoded says: a beat or a guest event
Message = Union[protocol.Beat, guest.GuestEvent]
#: (message, the id of the key that signed it, sender)
Item = Tuple[Message, str, Address]
#: (reason, sender, detail) of a datagram refused
Drop = Tuple[str, Address, str]
#: a challenge's target: (sender, socket the beat came on, engine time
#: of the beat, key id)
Target = Tuple[Address, Optional[socket.socket], float, str]
#: (host, address, socket, key id) a challenge goes to
ChallengeTo = Tuple[str, Address, Optional[socket.socket], str]
#: drain_sink(host, reason, now) -> (status, detail): an agent's
#: "drain me" before an orderly shutdown
#: (:class:`instanceha.engine.shutdown_drain.ShutdownDrains`)
DrainSink = Callable[[str, str, float], Tuple[str, str]]
#: guest_sink(GuestEvent, now): the agents' guest events
GuestSink = Callable[[guest.GuestEvent, float], object]


def bind_addresses(group: Any) -> List[Tuple[str, int]]:
    """[(address, port)] the listener binds (``[agent]``); raises
    ConfigError."""
    try:
        return heartbeat_conf.listen_addresses(group)
    except ValueError as e:
        raise ConfigError("[agent] listen_addresses: %s" % e)


def cannot_bind(address: str, port: int, e: OSError) -> StartupError:
    """The StartupError of an address that cannot be bound (``e``)."""
    where = ("[%s]:%d" if ":" in address else "%s:%d") % (address, port)
    return StartupError("agent heartbeat listener: cannot bind %s ([agent] "
                        "listen_addresses): %s" % (where, e.strerror or e))


def load_keyring(group: Any) -> keys.HostKeyring:
    """The engine's keyring from the ``[agent]`` key files; raises
    ConfigError (KeyFileError) naming the option or the file."""
    if not group.key_file and not group.master_key_file:
        raise ConfigError("[agent] master_key_file: must be set (or the "
                          "shared key_file) when [agent] listen_addresses "
                          "is")
    return keys.load_host_keyring(
        group.master_key_file, group.previous_master_key_file,
        group.key_file, group.previous_key_file, group.accept_shared_key)


class HeartbeatSource:
    """See the module's text. ``known_hosts()`` returns Nova's hosts as
    [(service id, host name)]; ``keyring`` replaces the key files (tests,
    benchmarks)."""

    def __init__(self, conf: Any, sink: Sink,
                 clock: Callable[[], float] = time.time,
                 known_hosts: Callable[[], Iterable[Tuple[str, str]]]
                 = lambda: [],
                 *, keyring: Union[keys.HostKeyring, keys.Keyring, None]
                 = None,
                 guest_sink: Optional[GuestSink] = None,
                 sendto: Optional[Callable[
                     [Optional[socket.socket], bytes, Address], Any]] = None,
                 random: Optional[Callable[[int], bytes]] = None,
                 acting: Callable[[], bool] = lambda: True,
                 monotonic: Callable[[], float] = time.monotonic,
                 drain_sink: Optional[DrainSink] = None) -> None:
        group = self._group = conf.agent
        # The agents' watchdogs (issue 37): their reports, condemnations
        # and pills, on the engine's monotonic clock; ``acting()`` says
        # whether this member acts (its answers say so: an agent counts
        # only the acting engine's).
        self.watchdogs = WatchdogBook()
        self._acting = acting
        self._monotonic = monotonic
        self._bind_to = bind_addresses(group)
        if keyring is None:
            keyring = load_keyring(group)
        elif isinstance(keyring, keys.Keyring):
            keyring = keys.HostKeyring(shared=keyring)
        self.keyring = keyring
        self._sink = sink
        # guest_sink(GuestEvent, now): the agents' guest events (issue
        # 25), accepted as beats are (a host Nova knows, the replay guard
        # on a sequence of their own); None: dropped.
        self._guest_sink = guest_sink
        # drain_sink(host, reason, now): an agent's "drain me" before an
        # orderly shutdown (issue 38), on a replay guard of its own
        # (strict: the agent's clock must be within replay_window of
        # this engine's, as for requests to agents); None: dropped.
        self._drain_sink = drain_sink
        self._drain_guard = replay.ReplayGuard(window=group.replay_window,
                                               learn_offset=False)
        self._drain_answers: Dict[str, str] = {}
        self._clock = clock
        self._known_hosts = known_hosts
        self._table = HostTable(group.silence_timeout)
        self._guard = replay.ReplayGuard(window=group.replay_window)
        # Freshness proven by challenges: this engine's nonces, where to
        # send them ((host, path) -> (address, socket, engine time of
        # the last beat)), and the hosts heard unproven (host -> (time,
        # path, address)). ``sendto(sock, data, address)`` and
        # ``random(n)`` replace the socket's and os.urandom (tests).
        # A nonce proves a beat for ``challenge_window`` rounds, and for
        # no longer than one round more than that should they stall.
        self.challenges = challenge.Issuer(
            group.challenge_window,
            max_age=group.challenge_interval * (group.challenge_window + 1),
            **({} if random is None else {"random": random}))
        self._targets: Dict[Tuple[str, str], Target] = {}
        self._unproven: Dict[str, Tuple[float, str, Address]] = {}
        # (host, path) sent a challenge at once since the last round (an
        # unproven beat asks for one: a restarted agent or engine proves
        # at its next beat, not a round later).
        self._prompted: Set[Tuple[str, str]] = set()
        self._sendto = sendto
        self._unproven_beats = 0
        self._challenges_sent = self._challenge_errors = 0
        self._challenge_failure_logged: Optional[float] = None
        self._challenge_loop: Optional[periodic.Periodic] = None
        self._lock = threading.Lock()
        self._emit = threading.Lock()
        self._ids: Dict[str, str] = {}   # host name -> Nova service id
        self._ids_at: Optional[float] = None
        self._unknown: Dict[str, int] = {}   # name -> beats, reported once
        self._refreshing = threading.Lock()
        # Hosts heard signing with the shared key while hosts have keys
        # of their own: each logged once.
        self._shared_hosts: Set[str] = set()
        self._shared_beats = 0
        # Plain integers (not a dict): counted at every beat.
        self._received = self._accepted = self._errors = 0
        self._drops = dict.fromkeys(DROP_REASONS, 0)
        self._drop_logged: Dict[str, float] = {}   # reason -> last logged
        self._requests: Dict[str, Deque[float]] = \
            collections.defaultdict(collections.deque)
        self._socks: List[socket.socket] = []
        self._threads: List[threading.Thread] = []
        self._wake: Optional[Tuple[socket.socket, socket.socket]] = None
        self._check_loop: Optional[periodic.Periodic] = None
        # [(address, port)] once started
        self.bound: List[Tuple[str, int]] = []

    # -- lifecycle -----------------------------------------------------------
    def start(self, sink: Optional[Sink] = None) -> None:
        """Bind every configured address (a failure closes what was bound
        and raises StartupError naming the address), then start the
        receivers and the periodic check."""
        if sink is not None:
            self._sink = sink
        self.bound = []
        for address, port in self._bind_to:
            try:
                sock = udp.bind(address, port)
            except OSError as e:
                self._close()
                self.bound = []
                raise cannot_bind(address, port, e)
            sock.setblocking(False)
            try:
                # Room for bursts while the receiver waits for the GIL
                # (the kernel caps it at net.core.rmem_max).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                _RCVBUF)
            except OSError:
                pass
            self._socks.append(sock)
            self.bound.append((address, sock.getsockname()[1]))
        self._wake = wake = socket.socketpair()
        self.refresh(self._clock())
        thread = threading.Thread(target=self._receive, args=(wake[0],),
                                  daemon=True, name="agent-beats")
        thread.start()
        self._threads.append(thread)
        self._check_loop = periodic.Periodic(
            "agent-silence-check", self.check,
            min(0.5, self._group.silence_timeout / 4.0),
            first=0.0, error_event="agent_check_failed", log=LOG).start()
        self._challenge_loop = periodic.Periodic(
            "agent-challenges", self.challenge,
            self._group.challenge_interval, first=0.0,
            error_event="agent_challenge_failed", log=LOG).start()
        ring = self.keyring
        LOG.info("agent_listener_started",
                 addresses=["%s:%d" % b for b in self.bound],
                 key_ids=list(ring.kids),
                 master_key_ids=list(ring.master_kids),
                 accept_shared_key=bool(ring.kids),
                 host_keys=len(ring),
                 silence_timeout=self._group.silence_timeout,
                 reason="receiving the agents' signed beats")
        if not ring.per_host:
            LOG.warning("agent_shared_key_only", key_ids=list(ring.kids),
                        reason="one key speaks for every host: root on any "
                               "compute host can forge every host's beats "
                               "and keep a dead host from being fenced; set "
                               "[agent] master_key_file and give each host "
                               "its own key (doc/agent.md)")
        elif ring.kids:
            LOG.warning("agent_shared_key_accepted", key_ids=list(ring.kids),
                        reason="[agent] accept_shared_key is true: hosts "
                               "still on the shared key can speak for every "
                               "host; set it false once hosts_on_shared_key "
                               "is 0")

    def stop(self) -> None:
        if self._check_loop is None and not self._socks:
            return
        if self._check_loop is not None:
            self._check_loop.stop(5)
            self._check_loop = None
        if self._challenge_loop is not None:
            self._challenge_loop.stop(5)
            self._challenge_loop = None
        if self._wake is not None:
            self._wake[1].send(b"x")
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        self._close()
        LOG.info("agent_listener_stopped", **self._snapshot())

    def _close(self) -> None:
        for sock in self._socks + list(self._wake or ()):
            sock.close()
        self._socks = []
        self._wake = None

    # -- Nova's hosts --------------------------------------------------------
    def refresh(self, now: float) -> None:
        """Read Nova's hosts (``known_hosts()``) again; forget hosts it no
        longer knows."""
        with self._refreshing:
            self._refresh(now)

    def _refresh(self, now: float) -> None:
        try:
            ids = {name: host_id for host_id, name in self._known_hosts()}
        except Exception as e:   # noqa: BLE001 - keep the old list
            LOG.warning("agent_hosts_unavailable", reason=str(e))
            return
        with self._lock:
            self._ids_at = now
            if ids == self._ids:
                return
        # Each new host's keys derived once, here, not per datagram (and
        # outside the lock: 20,000 hosts take a fraction of a second).
        ring = self.keyring
        derived = ring.learn(ids)
        if derived:
            LOG.info("agent_host_keys_derived", count=derived,
                     hosts=len(ring), master_key_ids=list(ring.master_kids),
                     collisions=ring.collisions,
                     reason="hosts Nova lists: their own keys, derived "
                            "from the master key")
        with self._lock:
            self._ids = ids
            gone = self._table.renamed(ids)
            self._shared_hosts.intersection_update(ids)
            for name in [n for n in self._unproven if n not in ids]:
                del self._unproven[name]
            for where in [w for w in self._targets if w[0] not in ids]:
                del self._targets[where]
        if gone:
            LOG.info("agent_hosts_forgotten", hosts=sorted(gone)[:20],
                     count=len(gone), reason="Nova no longer knows them")

    def _refresh_due(self, now: float) -> bool:
        return (self._ids_at is None
                or now - self._ids_at >= MIN_REFRESH_INTERVAL)

    # -- datagrams -----------------------------------------------------------
    def _receive(self, wake: socket.socket) -> None:
        """The receiver thread: wait for any socket to be readable, read
        what waits on it (up to _BURST datagrams: one select per burst,
        not per datagram) and handle it as one batch. A byte on ``wake``
        ends it."""
        size = protocol.MAX_SIZE + 1
        with selectors.DefaultSelector() as selector:
            selector.register(wake, selectors.EVENT_READ, None)
            for sock in self._socks:
                selector.register(sock, selectors.EVENT_READ, sock)
            while True:
                for key, _ in selector.select():
                    if key.data is None:
                        return
                    batch = datagrams.receive(key.data, size,
                                              self._receive_failed, _BURST)
                    try:
                        self.handle_batch(batch, via=key.data)
                    except Exception as e:   # noqa: BLE001 - lives on
                        self._error("agent_datagram_failed", e)

    def _receive_failed(self, stage: str, exc: BaseException) -> None:
        self._error("agent_receive_failed", exc)

    def _error(self, event: str, exc: BaseException) -> None:
        with self._lock:
            self._errors += 1
        LOG.error(event, reason=str(exc) or type(exc).__name__,
                  exc_info=exc)

    def handle_datagram(self, data: bytes, sender: Address,
                        now: Optional[float] = None,
                        via: Optional[socket.socket] = None
                        ) -> Optional[Event]:
        """One datagram from ``sender`` (address, port, ...), received at
        ``now`` (default: the clock) on socket ``via``. Returns the event
        it made, or None. Never raises for any ``data``."""
        events = self.handle_batch(((data, sender),), now, via)
        return events[0] if events else None

    def handle_batch(self, batch: Iterable[Tuple[bytes, Address]],
                     now: Optional[float] = None,
                     via: Optional[socket.socket] = None) -> List[Event]:
        """Datagrams [(data, sender)] received together at ``now``
        (default: the clock) on socket ``via`` (where challenges to their
        senders leave from): verified one by one, then recorded under
        one lock (the beats of a host Nova was not known to have, after
        one more read of Nova's hosts). Returns the events they made, in
        the order they were recorded. Never raises for any ``data``.

        This runs for every beat of every host (thousands a second):
        what it does per datagram is kept to the decoding, the replay
        check and the table's bookkeeping; counts are plain integers,
        logs are written only for events and drops."""
        if now is None:
            now = self._clock()
        decode = guest.decode_signed
        keyring = self.keyring
        beat_type = protocol.Beat
        beats: List[Item] = []
        drops: List[Drop] = []
        asks: List[Tuple[protocol.Request, str, Address]] = []
        for data, sender in batch:
            try:
                message, kid = decode(data, keyring)
            except protocol.Dropped as d:
                drops.append((d.reason, sender, d.detail))
                continue
            if type(message) is not beat_type:
                if type(message) is protocol.Request and \
                        message.kind == protocol.DRAIN_HOST:
                    asks.append((message, kid, sender))
                    continue
                if type(message) is not guest.GuestEvent:
                    drops.append((UNEXPECTED_KIND, sender,
                                  "a request sent to an engine"))
                    continue
                if self._guest_sink is None:
                    drops.append((NO_GUEST_SINK, sender, "a guest event, "
                                  "and instance repair is off"))
                    continue
            beats.append((message, kid, sender))
        events: List[Event] = []
        if beats:
            guests: List[Tuple[guest.GuestEvent, Any]] = []
            with self._emit:
                unknown = self._record(beats, now, events, guests, drops,
                                       via)
                if unknown and self._refresh_due(now):
                    self.refresh(now)
                    unknown = self._record(unknown, now, events, guests,
                                           drops, via)
                for message, _, sender in unknown:
                    self._unknown_host(message.host, sender)
                for message, sender in guests:
                    self._guest(message, sender, now)
                for event in events:
                    # The first beats after a start are many, say little.
                    (LOG.debug if event.reason == "first beat"
                     else LOG.info)(event.kind.value, **event.log_fields())
                    try:
                        self._sink(event)
                    except Exception as e:   # noqa: BLE001 - lives on
                        self._error("agent_event_failed", e)
        for message, kid, sender in asks:
            self._drain_asked(message, kid, sender, now, via, drops)
        for reason, sender, detail in drops:
            self._drop(reason, sender, detail, now)
        return events

    def _drain_asked(self, message: protocol.Request, kid: str,
                     sender: Address, now: float,
                     via: Optional[socket.socket],
                     drops: List[Drop]) -> None:
        """An agent's verified "drain me" before its host shuts down:
        signed with that host's own key, for a host Nova knows, fresh
        and new (its own strict replay guard), then, on the acting
        engine only, handed to the drain sink and answered (the answer
        echoes the request's seq, signed with the key that signed it)."""
        host = message.host
        if self._drain_sink is None:
            drops.append((NO_DRAIN_SINK, sender, "a drain request, and "
                          "this engine takes none"))
            return
        if kid in self.keyring.shared_kids:
            # The shared key speaks for every host: it asks no drain.
            drops.append((SHARED_KEY, sender, "a drain request signed "
                          "with the shared key: a host's own key needed"))
            return
        with self._lock:
            known = host in self._ids
            stale = None if not known else self._drain_guard.check(
                host, "drain", "agent", message.seq, message.sent_at, now)
        if not known:
            drops.append((UNKNOWN_HOST, sender, "a drain request for a "
                          "host Nova does not know"))
            return
        if stale is not None:
            drops.append((stale, sender, "a drain request of %s" % host))
            return
        if not self._acting():
            LOG.info("agent_drain_request_ignored", host=host,
                     seq=message.seq,
                     reason="this engine does not act (a standby): the "
                            "acting one answers")
            return
        try:
            status, detail = self._drain_sink(host, message.reason, now)
        except Exception as e:   # noqa: BLE001 - lives on
            self._error("agent_drain_request_failed", e)
            return
        with self._lock:
            changed = self._drain_answers.get(host) != status
            self._drain_answers[host] = status
        if changed:
            LOG.info("agent_drain_request", host=host, seq=message.seq,
                     answer=status, detail=detail,
                     asked_because=message.reason,
                     reason="the host's agent asks to be drained before "
                            "an orderly shutdown")
        answer = protocol.Request(
            kind=protocol.DRAIN_STATUS, host=host, seq=message.seq,
            sent_at=now,
            reason=("%s: %s" % (status, detail))[:protocol.MAX_REASON])
        try:
            data = protocol.encode_request(
                answer, self.keyring.signing_key(host, kid))
            self._send(via, data, sender)
        except (OSError, ValueError) as e:
            LOG.warning("agent_drain_answer_not_sent", host=host,
                        address=sender[0], error=str(e))

    def _guest(self, message: guest.GuestEvent, sender: Address,
               now: float) -> None:
        LOG.info("agent_guest_event", host=message.host,
                 server=message.server, lifecycle=message.event,
                 detail=message.detail, address=sender[0],
                 reason="the host's agent saw the guest break by itself: "
                        "handed to instance repair")
        # Guest events come only with a sink (handle_batch drops them
        # without one).
        guest_sink = cast(GuestSink, self._guest_sink)
        try:
            guest_sink(message, now)
        except Exception as e:   # noqa: BLE001 - lives on
            self._error("agent_guest_event_failed", e)

    def _record(self, beats: List[Item], now: float, events: List[Event],
                guests: List[Tuple[guest.GuestEvent, Address]],
                drops: List[Drop],
                via: Optional[socket.socket] = None) -> List[Item]:
        """Under ``_lock``: each beat or guest event (message, kid,
        sender) of a host Nova knows through the replay guard (a guest
        event on a sequence of its own, guest.REPLAY_PATH); a beat's
        sender becomes a challenge target, a beat proven fresh goes into
        the table (its event appended to ``events``), an unproven one is
        only noted; a guest event to ``guests``; a refusal to ``drops``.
        Returns those of hosts Nova does not know (as far as read)."""
        unknown: List[Item] = []
        failures: List[Exception] = []
        accepted = unproven = 0
        last_unproven: Optional[protocol.Beat] = None
        check = self._guard.check
        record = self._table.beat
        last_kid = self._table.kid
        shared_kids = self.keyring.shared_kids if self.keyring.per_host \
            else ()
        first_shared: List[Tuple[str, str, Address]] = []
        proves = self.challenges.proves
        targets = self._targets
        heard_unproven = self._unproven
        prompted = self._prompted
        prompt: List[ChallengeTo] = []
        with self._lock:
            ids = self._ids
            for item in beats:
                message, kid, sender = item
                host_id = ids.get(message.host)
                if host_id is None:
                    unknown.append(item)
                    continue
                is_guest = type(message) is guest.GuestEvent
                if kid in shared_kids:
                    # A host heard on its own key: the shared key no
                    # longer speaks for it (whoever else holds it).
                    own = last_kid(message.host)
                    if own is not None and own not in shared_kids:
                        drops.append((SHARED_KEY, sender, "host %s signs "
                                      "with its own key (id %s): the "
                                      "shared key no longer speaks for it"
                                      % (message.host, own)))
                        continue
                try:
                    # (is_guest tells the message's type: casts, no check)
                    why = check(message.host, guest.REPLAY_PATH if is_guest
                                else cast(protocol.Beat, message).path,
                                message.boot_id, message.seq,
                                message.sent_at, now)
                    if why is not None:
                        drops.append((why, sender, "host %s %s" % (
                            message.host, "guest event of "
                            + cast(guest.GuestEvent, message).server
                            if is_guest else "path %s"
                            % cast(protocol.Beat, message).path)))
                        continue
                    if kid in shared_kids:
                        self._shared_beats += 1
                        if message.host not in self._shared_hosts:
                            self._shared_hosts.add(message.host)
                            first_shared.append((message.host, kid, sender))
                    if is_guest:
                        accepted += 1
                        guests.append((cast(guest.GuestEvent, message),
                                       sender))
                        continue
                    message = cast(protocol.Beat, message)
                    where = (message.host, message.path)
                    targets[where] = (sender, via, now, kid)
                    self.watchdogs.beat(message.host, message.watchdog,
                                        self._monotonic())
                    if not proves(message.echoes, now):
                        # Not proven fresh: shown, never a veto.
                        heard_unproven[message.host] = (now, message.path,
                                                        sender)
                        if where not in prompted:
                            prompted.add(where)
                            prompt.append((message.host, sender, via, kid))
                        accepted += 1
                        unproven += 1
                        last_unproven = message
                        continue
                    event = record(message, kid, host_id, sender, now)
                except Exception as e:   # noqa: BLE001 - a bug; go on
                    failures.append(e)
                    continue
                accepted += 1
                if event is not None:
                    events.append(event)
            self._received += accepted + len(failures)
            self._accepted += accepted
            self._unproven_beats += unproven
            count = self._unproven_beats
            last = self._drop_logged.get(UNPROVEN)
            if last_unproven is None or (
                    last is not None and now - last < DROP_LOG_INTERVAL):
                last_unproven = None
            else:
                self._drop_logged[UNPROVEN] = now
        if prompt:
            self._send_challenges(prompt, self.challenges.newest, now)
        if last_unproven is not None:
            LOG.info("agent_beat_unproven", host=last_unproven.host,
                     path=last_unproven.path,
                     echoes=len(last_unproven.echoes), unproven=count,
                     reason="authentic, but it echoes none of this "
                            "engine's last [agent] challenge_window "
                            "challenges: shown, never a veto (an agent "
                            "older than challenges, a beat held back or "
                            "replayed, or no challenge reached the agent "
                            "yet)",
                     note="logged at most once a minute")
        for failure in failures:
            self._error("agent_datagram_failed", failure)
        for host, kid, sender in first_shared:
            LOG.warning("agent_shared_key_used", host=host, key_id=kid,
                        address=sender[0] if sender else None,
                        reason="accepted, signed with the shared key "
                               "([agent] accept_shared_key is true): give "
                               "this host its own key (instanceha agent-key "
                               "HOST); logged once per host")
        return unknown

    def _drop(self, reason: str, sender: Address, detail: str,
              now: float) -> None:
        with self._lock:
            self._received += 1
            self._drops[reason] += 1
            count = self._drops[reason]
            last = self._drop_logged.get(reason)
            if last is not None and now - last < DROP_LOG_INTERVAL:
                return None
            self._drop_logged[reason] = now
        LOG.warning("agent_datagram_dropped", reason=reason, detail=detail,
                    address=sender[0] if sender else None, dropped=count,
                    note="logged at most once a minute per reason")
        return None

    def _unknown_host(self, name: str, sender: Address) -> None:
        """Counted always; reported once per name, and only once Nova's
        hosts are known (before the first poll every name is unknown)."""
        with self._lock:
            self._received += 1
            self._drops[UNKNOWN_HOST] += 1
            known = len(self._ids)
            first = name not in self._unknown
            if not known or (first and
                             len(self._unknown) >= MAX_UNKNOWN_NAMES):
                return None
            self._unknown[name] = self._unknown.get(name, 0) + 1
        if first:
            LOG.warning("agent_unknown_host", host=name, address=sender[0],
                        known_hosts=known,
                        reason="an authenticated beat names a host Nova "
                               "does not know (the agent's [agent] host?): "
                               "ignored, reported once")
        return None

    # -- challenges -----------------------------------------------------------
    def challenge(self, now: Optional[float] = None) -> int:
        """Draw a new nonce and send it, signed, to every path of every
        host heard within CHALLENGE_TARGET_TTL: to the address and port
        its last beat came from, through the socket that beat arrived on.
        (Between rounds, a path's first unproven beat is answered at once
        with the newest nonce.) Returns the number of challenges sent."""
        now = self._clock() if now is None else now
        nonce = self.challenges.draw(now)
        with self._lock:
            targets = self._targets
            for where in [w for w, (_, _, at, _) in targets.items()
                          if now - at > CHALLENGE_TARGET_TTL]:
                del targets[where]
            items = [(host, address, via, kid) for (host, _), (address, via,
                                                              _, kid)
                     in targets.items()]
            self._prompted.clear()
        sent = self._send_challenges(items, nonce, now)
        self._send_relays(items)
        return sent

    def _send_relays(self, items: List[ChallengeTo]) -> int:
        """Each condemned host's pill to each of its peers heard, on
        every path of theirs, signed with the peer's key."""
        relays = self.watchdogs.relays()
        if not relays:
            return 0
        by_host: Dict[str, List[ChallengeTo]] = {}
        for item in items:
            by_host.setdefault(item[0], []).append(item)
        sent = 0
        signing_key = self.keyring.signing_key
        for target, peer_host in relays:
            pill = self.watchdogs.pill(target)
            if pill is None:
                continue
            for _, address, via, kid in by_host.get(peer_host, ()):
                try:
                    self._send(via, peer.encode_relay(
                        peer.Relay(target, pill),
                        signing_key(peer_host, kid)), address)
                except (OSError, ValueError) as e:
                    LOG.warning("agent_pill_relay_failed", host=target,
                                peer=peer_host, error=str(e))
                else:
                    sent += 1
        return sent

    # -- the agents' watchdogs (the ``watchdog`` fencing method) ------------
    def monotonic(self) -> float:
        """The clock of :meth:`watchdog_state`'s times."""
        return self._monotonic()

    def watchdog_state(self, host_name: str) -> Optional[WatchdogState]:
        """What this engine knows of ``host_name``'s watchdog, or None."""
        return self.watchdogs.state(host_name)

    @write
    def condemn(self, host_name: str, reason: str) -> Optional[float]:
        """Condemn ``host_name``: make its poison pill (a challenge saying
        so, echoing the newest nonce its agent sent, signed with its
        key), send it to the host on every path and to its peers, and
        keep sending it at each round. A new condemnation replaces an
        earlier one (its publication starts over). Returns its time
        (monotonic), None when the host was never heard."""
        now = self._clock()
        with self._lock:
            items = [(host, address, via, kid) for (host, _), (
                address, via, _, kid) in self._targets.items()]
        mine = [i for i in items if i[0] == host_name]
        kid = mine[0][3] if mine else None
        try:
            pill = challenge.encode(challenge.Challenge(
                self.challenges.issuer,
                self.challenges.newest or bytes(challenge.NONCE_SIZE),
                host_name, self.watchdogs.nonce(host_name), True, True),
                self.keyring.signing_key(host_name, kid))
        except (KeyError, ValueError) as e:
            LOG.error("agent_pill_not_made", host=host_name, error=str(e))
            pill = None
        at = self.watchdogs.condemn(host_name, self._monotonic(), pill)
        if at is None:
            return None
        LOG.warning("agent_condemned", host=host_name, reason=reason,
                    peers=len(self.watchdogs.relays()),
                    effect="its agent stops feeding its watchdog once the "
                           "pill reaches it, directly or through a peer")
        self._send_challenges(mine, self.challenges.newest, now)
        self._send_relays(items)
        return at

    @write
    def lift(self, host_name: str) -> None:
        """``host_name`` is back and its service cleaned up: its
        condemnation ends (no pill to it or its peers any more; its agent
        is answered again)."""
        self.watchdogs.lift(host_name)

    def _send_challenges(self, items: List[ChallengeTo],
                         nonce: Optional[bytes], now: float) -> int:
        """Challenge ``nonce`` to each (host, address, socket, key id) of
        ``items``, signed with the key that host's agent signed that beat
        with (it holds it: its own key, or the shared one while that is
        accepted, as for a request); failures counted and said at most
        once a minute. Returns the number sent."""
        if nonce is None:
            return 0
        issuer = self.challenges.issuer
        sent = failed = 0
        failure: Optional[str] = None
        signing_key = self.keyring.signing_key
        acting = self._acting()
        book = self.watchdogs
        for host, address, via, kid in items:
            try:
                pill = book.pill(host)
                data = pill if pill is not None else challenge.encode(
                    challenge.Challenge(issuer, nonce, host,
                                        book.nonce(host), acting),
                    signing_key(host, kid))
                self._send(via, data, address)
            except (OSError, ValueError) as e:
                failed += 1
                failure = "%s: %s" % (address[0], e)
            else:
                sent += 1
        with self._lock:
            self._challenges_sent += sent
            self._challenge_errors += failed
            last = self._challenge_failure_logged
            log = failure is not None and (
                last is None or now - last >= DROP_LOG_INTERVAL)
            if log:
                self._challenge_failure_logged = now
        if log:
            LOG.warning("agent_challenge_not_sent", failed=failed, sent=sent,
                        last_error=failure,
                        effect="those agents' beats stay unproven: no veto "
                               "from them until a challenge reaches them",
                        note="logged at most once a minute")
        return sent

    def _send(self, via: Optional[socket.socket], data: bytes,
              address: Address) -> Any:
        if self._sendto is not None:
            return self._sendto(via, data, address)
        if via is None:
            family = socket.AF_INET6 if ":" in address[0] \
                else socket.AF_INET
            via = next((s for s in self._socks if s.family == family),
                       None)
            if via is None:
                raise OSError("no listening socket of the address family")
        return via.sendto(data, address)

    # -- the periodic check --------------------------------------------------
    def check(self, now: Optional[float] = None) -> List[Event]:
        """Report hosts whose paths fell silent (AGENT_SILENT when all did,
        AGENT_BEATING when some did); re-read Nova's hosts."""
        if now is None:
            now = self._clock()
        self.refresh(now)
        with self._emit:
            with self._lock:
                events = self._table.check(now)
            for event in events:
                LOG.info(event.kind.value, **event.log_fields())
                self._sink(event)
        return events

    # -- questions (any thread) ----------------------------------------------
    def heard(self, host_name: str,
              now: Optional[float] = None) -> Optional[AgentReport]:
        """The host's current view (AgentReport: heard paths, boot id,
        facts) while its agent beats; None when silent or never heard."""
        now = self._clock() if now is None else now
        with self._lock:
            return self._table.report(host_name, now)

    def silent_since(self, host_name: str,
                     now: Optional[float] = None) -> Optional[float]:
        """The engine's time of the last beat of a host whose agent is now
        silent on every path; None while it beats or if it never did."""
        now = self._clock() if now is None else now
        with self._lock:
            return self._table.silent_since(host_name, now)

    def cliff(self, now: Optional[float] = None) -> Optional[str]:
        """Why this engine looks cut off from the agents (a large share of
        them fell silent together: fencing on silence should be held), or
        None."""
        now = self._clock() if now is None else now
        group = self._group
        with self._lock:
            return self._table.cliff(now, group.cliff_share,
                                     group.cliff_window,
                                     group.cliff_min_hosts)

    def view(self, now: Optional[float] = None) -> Dict[str, Dict[str, Any]]:
        """{host name: {state, paths (age, address, heard), compute,
        libvirt, guests, key_id, previous_key, boot_id, ...}}."""
        now = self._clock() if now is None else now
        with self._lock:
            out = self._table.view(now, self.keyring.kind)
            timeout = self._table.timeout
            for name, (at, path, sender) in self._unproven.items():
                entry = out.get(name)
                if entry is None:
                    if now - at >= timeout:
                        continue
                    entry = out[name] = {"state": ALIVE_UNPROVEN}
                elif entry["state"] != heartbeat_table.BEATING \
                        and now - at < timeout:
                    entry["state"] = ALIVE_UNPROVEN
                entry["unproven_beat_age"] = round(now - at, 3)
                entry["unproven_path"] = path
        mono = self._monotonic()
        for name, entry in out.items():
            wd = self.watchdogs.state(name)
            if wd is None or (wd.state == protocol.WATCHDOG_NONE
                              and wd.condemned_at is None):
                continue
            entry["watchdog"] = {
                "state": {protocol.WATCHDOG_ARMED: "armed",
                          protocol.WATCHDOG_DISARMED: "disarmed"}.get(
                              wd.state, "none"),
                "timeout": wd.watchdog_timeout,
                "isolation_timeout": wd.isolation_timeout,
                "condemned_ago": None if wd.condemned_at is None
                else round(mono - wd.condemned_at, 3),
                "pill_held_by": wd.acks, "peers": wd.peers}
        return out

    def health(self) -> Dict[str, Any]:
        now = self._clock()
        with self._lock:
            counts = self._table.counts(now, self.keyring.kind)
            unknown = sorted(self._unknown)
            ring = self.keyring
            timeout = self._table.timeout
            unproven = sorted(
                name for name, (at, _, _) in self._unproven.items()
                if now - at < timeout
                and self._table.report(name, now) is None)
            return {
                "listening": bool(self._threads),
                "addresses": ["%s:%d" % b for b in self.bound],
                "key_ids": list(ring.kids),
                "master_key_ids": list(ring.master_kids),
                "accept_shared_key": bool(ring.kids),
                "host_keys": len(ring),
                **self._count_fields(),
                "dropped": {k: v for k, v in self._drops.items() if v},
                "hosts_beating": counts["beating"],
                "hosts_silent": counts["silent"],
                "hosts_on_previous_key": counts["previous_key"],
                "hosts_on_shared_key": counts["shared_key"],
                "shared_key_beats": self._shared_beats,
                "paths": counts["paths"],
                "unknown_hosts": len(unknown),
                "unknown_host_names": unknown[:10],
                "beats_unproven": self._unproven_beats,
                "hosts_unproven": len(unproven),
                "hosts_unproven_names": unproven[:10],
                "challenges_sent": self._challenges_sent,
                "challenge_errors": self._challenge_errors,
                "challenge_interval": self._group.challenge_interval,
                "challenge_window": self._group.challenge_window}

    def _count_fields(self) -> Dict[str, int]:
        return {"received": self._received, "accepted": self._accepted,
                "errors": self._errors}

    def _snapshot(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._count_fields(),
                        dropped=sum(self._drops.values()))

    # -- requests to agents --------------------------------------------------
    @write
    def send_request(self, host_name: str, reason: str,
                     now: Optional[float] = None) -> str:
        """Ask the host's agent to restart nova-compute: a signed
        :class:`~instanceha.heartbeat.protocol.Request` sent to the
        address of the host's last beat, port ``[agent] request_port``.
        Refused while ``[agent] restart_compute`` is off and beyond
        ``restart_max`` requests per ``restart_window`` for the host.
        Returns one line saying what was sent, or why nothing was."""
        now = self._clock() if now is None else now
        group = self._group
        with self._lock:
            where = self._table.address(host_name)
            last_kid = self._table.kid(host_name)
            why_not = self._refusal(host_name, where, now)
        if why_not is not None:
            LOG.warning("agent_request_not_sent", host=host_name,
                        kind=protocol.RESTART_COMPUTE, reason=why_not,
                        asked_because=reason)
            return "not sent: %s" % why_not
        # _refusal refused a host with no address
        address, path = cast(Tuple[str, str], where)
        request = protocol.Request(
            kind=protocol.RESTART_COMPUTE, host=host_name,
            seq=protocol.request_seq(now), sent_at=now,
            reason=reason[:protocol.MAX_REASON])
        try:
            # The key the host's agent signs its beats with: it holds it.
            key = self.keyring.signing_key(host_name, last_kid)
            data = protocol.encode_request(request, key)
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.sendto(data, (address, group.request_port))
        except (OSError, ValueError) as e:
            why = "cannot send to %s:%d: %s" % (address, group.request_port,
                                                e)
            LOG.warning("agent_request_not_sent", host=host_name,
                        kind=request.kind, reason=why, asked_because=reason)
            return "not sent: %s" % why
        with self._lock:
            self._requests[host_name].append(now)
        LOG.info("agent_request_sent", host=host_name, kind=request.kind,
                 address=address, port=group.request_port, path=path,
                 seq=request.seq, key_id=key.kid,
                 reason=reason)
        return "sent %s to %s:%d (path %s)" % (
            request.kind, address, group.request_port, path)

    def _refusal(self, host_name: str, where: Optional[Tuple[str, str]],
                 now: float) -> Optional[str]:
        group = self._group
        if not group.restart_compute:
            return "[agent] restart_compute is off"
        if where is None:
            return "no beat heard from %s: no address known" % host_name
        sent = self._requests[host_name]
        while sent and now - sent[0] >= group.restart_window:
            sent.popleft()
        if len(sent) >= group.restart_max:
            return ("%d requests in the last %.0fs ([agent] restart_max): "
                    "left to an operator" % (len(sent),
                                             group.restart_window))
        return None
