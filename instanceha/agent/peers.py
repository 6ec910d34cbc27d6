"""The agent's peers (issue 37, section 2): probes to the configured peer
agents every check interval, answers to theirs, and the engines' relayed
pills (:mod:`instanceha.heartbeat.peer`).

``[agent] peers`` lists at most :data:`MAX_PEERS` agents (``name=address:
port``; bounded fan-out: each probe round sends that many datagrams);
``[agent] peer_address`` is where this agent listens for theirs. An
answer counts when it is signed with the peers' key, comes from a
configured peer (by name), names this host and echoes a probe this agent
sent within the isolation timeout; it counts from the probe's sending
time. Any probe signed with the peers' key is answered, at the address it
came from (peer lists need not be symmetric). A pill in it condemns this
host only once verified with this host's own key (:meth:`~instanceha.agent.guardian.Guardian.check_pill`).

What this agent hears. Each peer's newest answer counts from the
sending time of the probe it answers; the peer is *heard* while that is
no older than ``window`` (``[agent] peer_window``). The beats carry it
(:meth:`hearing`, in the watchdog report): the engines take a silent
host that most of its peers do not hear either as dead at once
(doc/safety.md). Probing needs no watchdog: the agent probes whenever
``[agent] peers`` (or ``peers_from``) names peers.

Pills to relay: an engine sends each agent the pills of the hosts it
condemned (a relay datagram signed with that agent's own key); the agent
keeps the newest per target (at most :data:`MAX_PILLS`) and hands it to
that target when it probes.
"""

import collections
import os
import selectors
import socket
import threading

import structlog

from instanceha.agent import selffence
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.agent.peers")

MAX_PEERS = 16
MAX_PILLS = 256


class Peers:
    """See the module's text. ``peers``: [(name, sockaddr)];
    ``peer_keyring``: the peers' key; ``guardian``: the watchdog duty."""

    def __init__(self, host, peers, peer_keyring, guardian, sock,
                 monotonic, random=os.urandom, window=3.0):
        self.host = host
        self.peers = dict(peers[:MAX_PEERS])
        self.window = float(window)
        #: peer name -> sending time of the newest probe it answered
        self._heard = {}
        self.peer_keyring = peer_keyring
        self.guardian = guardian
        self.sock = sock
        self._monotonic = monotonic
        self._random = random
        self._sent = collections.OrderedDict()     # nonce -> sent at
        self._pills = collections.OrderedDict()    # target -> bytes
        self._lock = threading.Lock()
        self.counts = collections.Counter()
        self._thread = None
        self._wake = None
        guardian.relaying = self.relaying
        guardian.hearing = self.hearing

    def hearing(self, now):
        """(names of the peers heard at ``now``, the window): a peer is
        heard while it answered a probe sent no more than ``window``
        seconds ago."""
        with self._lock:
            heard = frozenset(name for name, at in self._heard.items()
                              if 0 <= now - at <= self.window)
        return heard, self.window

    def relaying(self):
        """The pills this agent holds, oldest first."""
        with self._lock:
            return list(self._pills.values())

    def keep_relay(self, relay):
        """An engine's relay (verified with this host's key): keep the
        pill for its target."""
        with self._lock:
            self._pills.pop(relay.target, None)
            self._pills[relay.target] = relay.pill
            while len(self._pills) > MAX_PILLS:
                self._pills.popitem(last=False)
        return self._count("relay_kept")

    # -- probing -------------------------------------------------------------

    def probe(self, now):
        """Send one probe to every peer; returns the number sent."""
        nonce = self._random(protocol.NONCE_SIZE)
        with self._lock:
            self._sent[nonce] = now
            limit = max(self.guardian.isolation_timeout, self.window)
            for old in [n for n, at in self._sent.items()
                        if now - at > limit]:
                del self._sent[old]
        data = peer.encode_probe(peer.Probe(nonce, self.host),
                                 self.peer_keyring.current)
        sent = 0
        for name, address in self.peers.items():
            try:
                self.sock.sendto(data, address)
            except OSError as e:
                self.counts["send_failed"] += 1
                LOG.debug("agent.peer_probe_failed", peer=name,
                          error=str(e))
            else:
                sent += 1
        return sent

    # -- receiving -----------------------------------------------------------

    def handle(self, data, source):
        """One datagram on the peer socket; returns what it was taken
        for."""
        try:
            msg, _ = peer.decode_signed(data, self.peer_keyring)
        except protocol.Dropped:
            try:         # an engine's relay is signed with our own key
                msg, _ = peer.decode_signed(data, self.guardian.keyring)
            except protocol.Dropped as e:
                return self._count(e.reason)
            if type(msg) is not peer.Relay:
                return self._count("not_a_relay")
            return self.keep_relay(msg)
        if type(msg) is peer.Probe:
            return self._answer(msg, source)
        if type(msg) is peer.Answer:
            return self._answered(msg)
        return self._count("not_a_peer_message")

    def _answer(self, probe, source):
        # Any agent of the peer set (it holds the peers' key) is
        # answered, at the address its probe came from: peer lists need
        # not be symmetric.
        if source is None:
            return self._count("no_source")
        now = self._monotonic()
        with self._lock:
            pill = self._pills.get(probe.host, b"")
        data = peer.encode_answer(peer.Answer(
            probe.nonce, self.host, probe.host,
            self.guardian.hears_engine(now), pill),
            self.peer_keyring.current)
        try:
            self.sock.sendto(data, tuple(source[:2]))
        except OSError:
            return self._count("send_failed")
        return self._count("answered")

    def _answered(self, answer):
        if answer.target != self.host:
            return self._count("wrong_target")
        if answer.host not in self.peers:
            return self._count("unknown_peer")
        with self._lock:
            sent_at = self._sent.get(answer.nonce)
        if sent_at is None:
            return self._count("unproven")
        with self._lock:
            if sent_at > self._heard.get(answer.host, float("-inf")):
                self._heard[answer.host] = sent_at
        condemns = self.guardian.check_pill(answer.pill)
        self.guardian.fence.peer_answered(selffence.PeerAnswer(
            answer.host, sent_at, answer.hears_engine, condemns))
        return self._count("condemned" if condemns else "answer")

    def _count(self, why):
        self.counts[why] += 1
        return why

    # -- the socket thread ---------------------------------------------------

    def start(self):
        self._wake = socket.socketpair()
        self.sock.setblocking(False)
        self._thread = threading.Thread(target=self._serve,
                                        name="agent-peers", daemon=True)
        self._thread.start()

    def _serve(self):
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake[0], selectors.EVENT_READ)
            sel.register(self.sock, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self._wake[0]:
                        return
                    datagrams.drain(self.sock, protocol.MAX_SIZE + 1,
                                    lambda d, s: self.handle(d, s),
                                    _failed)

    def stop(self):
        if self._thread is not None:
            self._wake[1].send(b"x")
            self._thread.join(5)
            self._thread = None
        if self._wake is not None:
            for s in self._wake:
                s.close()
            self._wake = None
        self.sock.close()


def _failed(stage, exc):
    LOG.warning("agent.peer_receive_failed", stage=stage, error=str(exc))
