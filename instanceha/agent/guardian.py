"""The agent's watchdog duty (issue 37): arms the device, hands each beat
its watchdog report, takes the engines' answers and poison pills, and
feeds the device while :mod:`instanceha.agent.selffence` says the host
may live.

Freshness. The agent draws a nonce (16 random bytes) every check
interval and puts the newest in every beat's watchdog report. An engine
answers with the newest it received (the challenge's ``answer``): an
answer echoing a nonce drawn at ``d`` was made after ``d``, so it counts
as heard at ``d`` (only a nonce of this run of the agent: its draw time
is known). A pill must echo a nonce of this *boot*: the agent also
appends each nonce to ``[agent] nonce_file`` (under /run, emptied at
boot), so an agent restarted by systemd after a crash still obeys a
pill made before its restart, and a pill recorded before the host's
last boot is refused. At most :data:`KEEP` are kept (the oldest
dropped).

Arming. The device is armed at the first check that says the host may
live (an engine answered, or a majority of the peers did), not at start:
after a site-wide power loss the hosts boot before the engines and their
peers, and arming at start would reset each host before anyone could
answer it, again at every boot. Until then the beats say "none" (with
the nonce, so that engines can answer) and the engines do not count on
the watchdog.

An orderly stop (:meth:`Guardian.disarm`) disarms the device first and
sends a beat saying so; the engines then stop counting on the watchdog.
"""

import collections
import os
import threading
from typing import Optional

import structlog

from instanceha.agent import selffence
from instanceha.agent import watchdog
from instanceha.heartbeat import challenge
from instanceha.heartbeat import protocol

LOG = structlog.get_logger("instanceha.agent.guardian")

#: Nonces of this run kept to recognise answers and pills.
KEEP = 4096


class Nonces:
    """This run's nonces and when each was drawn (monotonic)."""

    def __init__(self, interval, random=os.urandom, path=None):
        self.interval = interval
        self._random = random
        self._drawn = collections.OrderedDict()
        self._lock = threading.Lock()
        self._newest = None
        self._newest_at = None
        self._path = path
        #: nonces of earlier runs of the agent in this boot (pills only)
        self._earlier = set(self._load(path)) if path else set()

    @staticmethod
    def _load(path):
        try:
            with open(path) as f:
                lines = f.read().split()[-KEEP:]
        except FileNotFoundError:
            return []
        except OSError as e:
            LOG.warning("agent.nonce_file_unread", path=path, error=str(e),
                        effect="pills made before this start are refused")
            return []
        out = []
        for line in lines:
            try:
                nonce = bytes.fromhex(line)
            except ValueError:
                continue
            if len(nonce) == protocol.NONCE_SIZE:
                out.append(nonce)
        return out

    def _store(self, nonce):
        if not self._path:
            return
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, nonce.hex().encode("ascii") + b"\n")
            finally:
                os.close(fd)
        except OSError as e:
            LOG.warning("agent.nonce_file_unwritten", path=self._path,
                        error=str(e),
                        effect="after a restart of the agent, a pill made "
                               "before it would be refused")

    def current(self, now):
        """The nonce to send at ``now`` (a new one every interval)."""
        with self._lock:
            if self._newest is None or now - self._newest_at >= \
                    self.interval:
                self._newest = self._random(protocol.NONCE_SIZE)
                self._newest_at = now
                self._drawn[self._newest] = now
                while len(self._drawn) > KEEP:
                    self._drawn.popitem(last=False)
                self._store(self._newest)
            return self._newest

    def drawn_at(self, nonce) -> Optional[float]:
        """When ``nonce`` was drawn by this run, or None."""
        if nonce is None:
            return None
        with self._lock:
            return self._drawn.get(nonce)

    def ours(self, nonce) -> bool:
        """True for a nonce drawn by this agent in this boot."""
        if nonce is None:
            return False
        with self._lock:
            return nonce in self._drawn or nonce in self._earlier


class Guardian:
    """See the module's text. ``keyring`` is the agent's own (the
    engines sign answers and pills with it), ``monotonic`` its clock."""

    def __init__(self, device, isolation_timeout, check_interval, host,
                 keyring, peers=(), monotonic=None, random=os.urandom,
                 nonce_file=None):
        self.device = device
        self.host = host
        self.keyring = keyring
        self.check_interval = check_interval
        self.fence = selffence.SelfFence(device, isolation_timeout, peers)
        self.nonces = Nonces(check_interval, random, nonce_file)
        self._monotonic = monotonic
        self.disarmed = False
        #: the verified pill's bytes
        self.pill = None
        self._peer_names = tuple(peers)[:protocol.MAX_PEER_DIGESTS]
        self._peer_digests = tuple(protocol.name_digest(p)
                                   for p in self._peer_names)
        #: () -> the pills this agent holds to relay (set by
        #: :class:`instanceha.agent.peers.Peers`)
        self.relaying = lambda: ()
        #: now -> (names of the peers heard, window in seconds), or None
        #: while not probing (set by :class:`instanceha.agent.peers.Peers`)
        self.hearing = lambda now: None

    @property
    def isolation_timeout(self):
        return self.fence.isolation_timeout

    def arm(self):
        """Arm the device now (raises WatchdogError)."""
        self.device.arm()

    def check(self):
        """At start, before arming: raise WatchdogError for a device
        that cannot be used (refused, missing, not writable)."""
        self.device.check()

    def report(self, now) -> Optional[protocol.WatchdogReport]:
        """The watchdog report of a beat sent at ``now``."""
        if self.disarmed:
            state = protocol.WATCHDOG_DISARMED
        elif self.device.armed:
            state = protocol.WATCHDOG_ARMED
        else:
            state = protocol.WATCHDOG_NONE
        pills = tuple(protocol.pill_digest(p) for p in self.relaying())
        heard = self.hearing(now) if self._peer_names else None
        flags = window = None
        if heard is not None:
            names, window = heard
            flags = tuple(p in names for p in self._peer_names)
        return protocol.WatchdogReport(
            state, self.device.timeout, self.isolation_timeout,
            self.nonces.current(now), self._peer_digests,
            pills[-protocol.MAX_PILL_DIGESTS:], flags, window or 0.0)

    def on_challenge(self, ch: challenge.Challenge, data=None) -> str:
        """An engine's challenge for this host (verified): an answer
        proven fresh counts, a pill echoing a nonce of this run
        condemns. Returns what it was taken for."""
        if ch.condemned:
            if not self.nonces.ours(ch.answer):
                return "unproven"
            if data is not None:
                self.pill = data
            self.fence.condemn("engine %s" % ch.issuer.hex())
            return "condemned"
        drawn = self.nonces.drawn_at(ch.answer)
        if drawn is None:
            return "unproven"
        if not ch.acting:
            return "standby"
        self.fence.engine_answered(drawn)
        return "engine"

    def check_pill(self, data) -> bool:
        """A pill a peer relayed: True when it is an engine's condemning
        challenge for this host, signed with this host's key, echoing a
        nonce of this run (the fence is then condemned)."""
        if not data:
            return False
        try:
            ch, _ = challenge.decode_signed(data, self.keyring)
        except protocol.Dropped:
            return False
        if type(ch) is not challenge.Challenge or ch.host != self.host \
                or not ch.condemned or not self.nonces.ours(ch.answer):
            return False
        self.pill = data
        self.fence.condemn("a pill relayed by a peer")
        return True

    def hears_engine(self, now) -> bool:
        """Whether this agent has a fresh answer of an acting engine (what
        it tells its peers)."""
        at = self.fence.inputs().engine_at
        return at is not None and 0 <= now - at <= self.isolation_timeout

    def tick(self, now):
        """Decide and feed (see :class:`selffence.SelfFence`); a feed
        that fails is logged (the host then resets)."""
        if self.disarmed:
            return None
        try:
            if not self.device.armed:
                decision = selffence.decide(now, self.fence.inputs(),
                                            self.isolation_timeout)
                if not decision.feed:
                    return decision
                LOG.info("agent.watchdog_arming", reason=decision.reason,
                         detail=decision.detail)
                self.device.arm()
            return self.fence.tick(now)
        except watchdog.WatchdogError as e:
            LOG.critical("agent.watchdog_feed_failed", error=str(e),
                         effect="this host resets within %d s"
                         % self.device.timeout)
            return None

    def disarm(self):
        """The orderly stop: magic close; the next beats say disarmed."""
        self.disarmed = True
        self.device.disarm()
