"""A heartbeat agent on each simulated host, running the real agent's code.

    agents = SimAgents(cloud, engines=["127.0.0.1:7411"], keyring=keyring,
                       paths={"mgmt": "127.0.0.1", "storage": "127.0.0.2"})
    agents.start()          # one thread beats for every host
    cloud.kill_compute("compute-1")     # beats go on, compute false
    cloud.kill("compute-2")             # the host hangs: its beats stop
    agents.set_fault(host="compute-3", path="storage", loss=0.3)
    agents.stop()

Each host's agent is the real :class:`instanceha.agent.sender.Sender`
(signing, sequence numbers, step-free send times, per-path sockets and
their failure logging) and the real
:class:`instanceha.agent.control.Control` (soft-fencing requests, rate
limit, the self-restart policy), given the simulator's pieces: its clock
(the host's, ``clock_offset`` seconds off), its host name and boot id,
sockets that go through the simulated network (sim/agent_net.py), and a
restart command that restarts the host's simulated nova-compute.

What a host's agent does follows the host, as in life:

* it beats while the host's operating system runs (``SimCloud.os_running``:
  powered on, not hung); ``kill`` (a hang) and a power off stop it; a
  power on starts it again at once (before nova-compute, which takes
  ``boot_time``) with a new boot id and sequence numbers starting at the
  milliseconds since that boot;
* its facts are read from the simulated host at each beat: ``compute``
  is nova-compute running (``kill_compute`` makes it false while beats go
  on), ``libvirt`` the host powered on, ``guests`` its active servers
  (``SimCloud.running_guests``). (The real agent asks systemd every
  ``facts_interval``; here the facts are never late.)
* ``stop_agent`` / ``start_agent`` stop and start the agent alone (host
  and nova-compute untouched); ``restart_agent`` is both, as systemd's
  restart: same boot, sequence numbers above the old ones.

Keys. With ``master_key`` each host's agent holds its own key, derived
from it as ``instanceha agent-key`` derives it (the engine is given the
same master: ``simrun.agent_setup(..., host_keys=True)``); otherwise
every agent holds the shared ``keyring``. ``impersonate(attacker,
victim)`` is root on ``attacker``: besides its own beats, its agent sends
beats naming ``victim``, signed with the only key it holds (its own, or
the shared one), at each of its beats, until ``impersonate(attacker,
None)``.

Scheduling: one thread for every host (:meth:`SimAgents.run_due` does
one round; tests call it with their own clock and never sleep). Each
host beats every ``interval`` seconds at its own phase, spread over the
interval, as independent agents would. The same thread sends the
datagrams a delay fault held back and receives the engines' requests
(sim/agent_requests.py: one socket per path address for all hosts,
routed by the host the request names) and the engines' challenges (on
the shared path sockets the beats leave from, routed by the host the
challenge names to its Sender, through the host's faults on that path:
a path down or a loss drops them, a delay holds back only what the host
sends).
"""

import collections
import heapq
import os
import selectors
import socket
import subprocess
import threading

import structlog

from instanceha.agent import control as control_mod
from instanceha.agent import guardian as guardian_mod
from instanceha.agent import peers as peers_mod
from instanceha.agent import selffence
from instanceha.agent import sender as sender_mod
from instanceha.agent import watchdog as watchdog_mod
from instanceha.conf import agent as agent_conf
from instanceha.heartbeat import keys
from instanceha.heartbeat import challenge
from instanceha.heartbeat import peer
from instanceha.heartbeat import protocol
from instanceha.sim import agent_net
from instanceha.sim import agent_peers
from instanceha.sim import agent_requests
from instanceha.sim import watchdog_hw
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.sim.agents")

DEFAULT_PATHS = {"mgmt": "127.0.0.1"}
#: The longest the thread waits without looking at the clock (the
#: simulator's clock need not be the wall clock).
MAX_WAIT = 0.2
_GOLDEN = 0.6180339887498949
#: What the agents' path sockets read besides beats: the engines'
#: challenges and their relays of a poison pill.
_REPLY_BODIES = {protocol.CHALLENGE: challenge.read_body,
                 peer.RELAY: peer.read_relay}


def _next(due, now, interval):
    """The next time of a periodic task due at ``due`` (None: first run
    now); late, it goes on from ``now`` (no burst)."""
    return now + interval if due is None else max(due + interval, now)


def _inline(target, *args):
    target(*args)


def _challenge_failed(stage, exc):
    if stage == datagrams.RECEIVE:
        LOG.warning("sim.agent_challenge_receive_failed", error=str(exc))
    else:
        LOG.exception("sim.agent_challenge_failed")


class HostAgent:
    """One host's agent: its real Sender and Control (None while the
    agent does not run), and the simulator's settings for it."""

    def __init__(self, name, index):
        self.name = name
        self.index = index
        self.sender = None
        self.control = None
        self.boots = None           # the host boot the agent runs in
        self.stopped = False        # stop_agent: the agent alone is down
        self.clock_offset = 0.0
        self.facts = protocol.UNKNOWN_FACTS
        self.keyring = None         # the keys its agent holds
        self.victim = None          # impersonate: the host it forges
        self.forger = None          # the Sender of its forged beats
        # With watchdogs (SimAgents' watchdog_dir): the agent's watchdog
        # duty and peers while it runs, the host's watchdog chip always.
        self.guardian = None
        self.peers = None
        self.hardware = None
        self.hw_boots = None        # the boot the chip last saw
        self.peer_names = ()
        #: when its last beat reporting an armed watchdog was sent
        self.armed_beat_at = None

    @property
    def running(self):
        return self.sender is not None


class SimAgents:
    """The agents of ``cloud``'s hosts (``hosts``: their names, all by
    default; a host left out has no agent, as a host without one in
    life). ``engines``: "address:port" of every engine listener;
    ``keyring``: an :class:`instanceha.heartbeat.keys.Keyring`, the
    shared key (may be None with ``master_key``); ``master_key``: a
    :class:`~instanceha.heartbeat.keys.Key` each host's own key is derived
    from;
    ``paths``: {name: loopback source address}, each path's own;
    ``request_port``: where the engines' requests arrive (on every path
    address; 0 picks a free port, None: no request socket);
    ``restart_compute`` / ``self_restart``: the agents' options of those
    names (the engine decides whether to ask; here the agents allow it
    by default). ``socket_factory`` makes the real sockets (tests).

    Watchdogs (issue 37): with ``watchdog_dir`` (a directory of the
    run's own, never /dev) every agent has the real watchdog duty
    (:class:`~instanceha.agent.guardian.Guardian`) on a test device
    there, played by :class:`instanceha.sim.watchdog_hw.Hardware`, which
    resets the host (``watchdog_action``: "reboot" or "off") when it is
    not fed for ``watchdog_timeout`` seconds, and the real
    :class:`~instanceha.agent.peers.Peers` with ``peer_count`` peers each
    (the next hosts in order: :func:`instanceha.sim.agent_peers.ring`),
    over ``peer_path`` (the first path by default), probed every
    ``peer_interval`` and heard within ``peer_window`` (the beats say
    which: the engines' peer witnesses). ``isolation_timeout``,
    ``watchdog_check_interval``, ``peer_interval``, ``peer_window``: the
    agents' options of those names (None: their defaults)."""

    def __init__(self, cloud, engines, keyring, interval=1.0, paths=None,
                 request_port=None, restart_compute=True,
                 self_restart=False, hosts=None, seed=0,
                 socket_factory=socket.socket, master_key=None,
                 watchdog_dir=None, watchdog_timeout=30,
                 isolation_timeout=20.0, watchdog_check_interval=2.0,
                 peer_count=3, watchdog_action=watchdog_hw.REBOOT,
                 peer_path=None, peer_interval=None, peer_window=None):
        if keyring is None and master_key is None:
            raise ValueError("a keyring or a master key is needed")
        self.cloud = cloud
        self.keyring = keyring
        self.master_key = master_key
        self.interval = float(interval)
        self.paths = dict(paths or DEFAULT_PATHS)
        self.watchdog_dir = watchdog_dir
        self.conf = self._agent_conf(engines, interval, self.paths,
                                     request_port, restart_compute,
                                     self_restart)
        if watchdog_dir is not None:
            self._watchdog_conf(watchdog_dir, watchdog_timeout,
                                isolation_timeout, watchdog_check_interval,
                                peer_interval, peer_window)
        if watchdog_action not in watchdog_hw.ACTIONS:
            raise ValueError("watchdog_action: one of %s"
                             % ", ".join(watchdog_hw.ACTIONS))
        self.watchdog_action = watchdog_action
        #: (simulator time, host) of every reset a watchdog chip made
        self.resets = []
        self.faults = agent_net.Faults()
        self.network = agent_net.Network(self.paths, cloud.clock,
                                         self.faults, seed, socket_factory)
        self.peer_net = None
        if watchdog_dir is not None:
            self.peer_net = agent_peers.PeerNet(
                self._running_peers, self.network,
                peer_path or next(iter(self.paths)))
        names = list(cloud.hosts) if hosts is None else list(hosts)
        unknown = [n for n in names if n not in cloud.hosts]
        if unknown:
            raise ValueError("no such host: %s" % unknown[0])
        self.agents = {n: HostAgent(n, i) for i, n in enumerate(names)}
        self._next_guard = self._next_probe = None
        #: target host -> {peer: (pill bytes, when that peer first kept
        #: it)}: the sim's own record of the pills relayed to peers
        self._pills_held = collections.defaultdict(dict)
        if watchdog_dir is not None:
            peer_path = peer_path or next(iter(self.paths))
            if peer_path not in self.paths:
                raise ValueError("no path %s" % peer_path)
            self.peer_key = keys.Keyring(keys.Key.from_secret(
                ("instanceha-sim-peers-%s" % seed).encode() * 2))
            rings = agent_peers.ring(names, peer_count)
            for agent in self.agents.values():
                agent.peer_names = tuple(rings[agent.name])
                agent.hardware = watchdog_hw.Hardware(
                    agent.name, watchdog_hw.device_path(
                        watchdog_dir, agent.name), watchdog_timeout,
                    watchdog_action)
        for agent in self.agents.values():
            agent.keyring = (keys.Keyring(keys.derive_host_key(
                master_key, agent.name)) if master_key is not None
                else keyring)
        #: For routing the engines' datagrams to the host they name only
        #: (the host's agent verifies again, with the one key it holds):
        #: every host's key, as an engine holds them.
        self._routing = keyring
        if master_key is not None:
            self._routing = keys.HostKeyring(master_key, shared=keyring)
            self._routing.learn(names)
        self.dispatcher = None
        if request_port is not None:
            self.dispatcher = agent_requests.Dispatcher(
                self._routing, self._control_of,
                [(a, request_port) for a in self.paths.values()],
                socket_factory)
        #: The engines' challenges received, by outcome (the host's
        #: Sender's, or no_agent, undelivered, or a drop reason).
        self.challenges = collections.Counter()
        self._lock = threading.Lock()
        self._due = []
        self._thread = None
        self._stop = threading.Event()
        self._wake = None
        now = cloud.clock()
        for agent in self.agents.values():
            phase = (agent.index * _GOLDEN) % 1.0 * self.interval
            heapq.heappush(self._due, (now + phase, agent.index, agent.name))

    @staticmethod
    def _agent_conf(engines, interval, paths, request_port,
                    restart_compute, self_restart):
        """The agents' [agent] options (one configuration for all)."""
        conf = agent_conf.new_conf()
        conf(args=[], default_config_files=[])
        overrides = {
            "engines": list(engines), "interval": float(interval),
            "paths": ["%s=%s" % kv for kv in paths.items()],
            # Without a request socket no request can arrive.
            "restart_compute": bool(restart_compute)
            and request_port is not None,
            "self_restart": bool(self_restart),
            # Where the requests arrive (the dispatcher binds them).
            "control_addresses": [
                "%s:%d" % (a, request_port or 1) for a in paths.values()]
            if request_port is not None else [],
        }
        for name, value in overrides.items():
            conf.set_override(name, value, group=agent_conf.GROUP)
        agent_conf.validate(conf)
        return conf

    def _watchdog_conf(self, directory, timeout, isolation, interval,
                       peer_interval=None, peer_window=None):
        """The [agent] watchdog options, checked as the agent checks them
        (the device itself is each host's: :meth:`_build`)."""
        if os.path.realpath(directory).startswith("/dev/"):
            raise ValueError("watchdog_dir %s: test devices only, never "
                             "under /dev" % directory)
        os.makedirs(directory, exist_ok=True)
        conf = self.conf
        for name, value in (("watchdog_device",
                             watchdog_hw.device_path(directory, "check")),
                            ("watchdog_timeout", int(timeout)),
                            ("isolation_timeout", float(isolation)),
                            ("watchdog_check_interval", float(interval)),
                            ("peer_interval", peer_interval),
                            ("peer_window", peer_window)):
            if value is not None:
                conf.set_override(name, value, group=agent_conf.GROUP)
        agent_conf.validate(conf)

    # -- the agents' lifecycle -------------------------------------------

    def agent(self, name):
        """The :class:`HostAgent` of host ``name``."""
        return self.agents[name]

    def _control_of(self, name):
        with self._lock:
            agent = self.agents.get(name)
            return agent.control if agent is not None else None

    def _build(self, agent, boot_id, boots, seq_start):
        """Start ``agent``'s real Sender and Control (its process)."""
        name = agent.name
        offset = agent.clock_offset
        clock = self.cloud.clock
        network = self.network

        def host_clock():
            return clock() + offset

        def sockets(family, kind):
            return agent_net.PathSocket(network, name, family)

        def runner(command, **kw):
            ok = self.cloud.restart_compute(name)
            return subprocess.CompletedProcess(
                command, 0 if ok else 1, "", "" if ok
                else "simulated host %s is off or hung" % name)

        control = control_mod.Control(
            self.conf, agent.keyring, name, clock=host_clock,
            monotonic=clock, runner=runner, spawn=_inline)

        def facts():
            current = agent.facts
            try:
                control.observe(current)
            except Exception:
                LOG.exception("sim.agent_policy_failed", host=name)
            return current

        guardian, peers, duty = self._watchdog_duty(agent, boots), None, {}
        if guardian is not None:
            duty = dict(watchdog_fn=self._reporter(agent, guardian),
                        on_challenge=guardian.on_challenge)
            peers = peers_mod.Peers(
                name, [(p, agent_peers.address(p, self.agents[p].index))
                       for p in agent.peer_names],
                self.peer_key, guardian, self.peer_net.socket(name), clock,
                window=self.conf.agent.peer_window)
        sender = sender_mod.Sender(
            self.conf, agent.keyring, clock=host_clock, facts_fn=facts,
            socket_factory=sockets, host=name, boot_id=boot_id,
            monotonic=clock, seq_start=seq_start, **duty)
        if peers is not None:
            sender.on_relay = self._relay_keeper(agent, peers)
        with self._lock:
            if not agent.stopped:       # not stopped meanwhile
                agent.sender, agent.control = sender, control
                agent.guardian, agent.peers = guardian, peers
                agent.boots = boots
                return
        sender.close()
        if guardian is not None:
            guardian.disarm()

    def _watchdog_duty(self, agent, boots):
        """A new run of ``agent``'s watchdog duty (its Guardian), or None
        without watchdogs. Its nonce file is the boot's (under /run in
        life: emptied at boot)."""
        if self.watchdog_dir is None:
            return None
        group = self.conf.agent
        return guardian_mod.Guardian(
            watchdog_mod.Device(agent.hardware.path, group.watchdog_timeout),
            group.isolation_timeout, group.watchdog_check_interval,
            agent.name, agent.keyring, peers=agent.peer_names,
            monotonic=self.cloud.clock,
            nonce_file=os.path.join(self.watchdog_dir, "nonces-%s-%d" % (
                agent.name, boots)))

    def _reporter(self, agent, guardian):
        """The beats' watchdog report; notes when a beat last said armed
        (the sim's own view of the host's watchdog deadline)."""
        def report(now):
            r = guardian.report(now)
            if r is not None and r.state == protocol.WATCHDOG_ARMED:
                agent.armed_beat_at = now
            return r
        return report

    def _relay_keeper(self, agent, peers):
        def keep(relay):
            with self._lock:
                held = self._pills_held[relay.target]
                old = held.get(agent.name)
                if old is None or old[0] != relay.pill:
                    held[agent.name] = (relay.pill, self.cloud.clock())
            return peers.keep_relay(relay)
        return keep

    def _running_peers(self, name):
        """The running Peers of host ``name`` (None: down, hung, or no
        agent)."""
        agent = self.agents.get(name)
        if agent is None or agent.peers is None:
            return None
        if not self.cloud.os_running(self.cloud.hosts[name]):
            return None
        return agent.peers

    def _halt(self, agent, orderly=False):
        """The agent's process ends: the host went down (its watchdog
        device is closed as a crash closes it: still armed), or
        ``orderly`` (stop_agent: the magic close first, and one beat
        saying disarmed, as the real agent's stop)."""
        with self._lock:
            sender, agent.sender, agent.control = agent.sender, None, None
            forger, agent.forger = agent.forger, None
            guardian, agent.guardian = agent.guardian, None
            peers, agent.peers = agent.peers, None
        if guardian is not None:
            if orderly:
                guardian.disarm()
                if sender is not None:
                    try:
                        sender.send_once()
                    except Exception:
                        LOG.exception("sim.agent_disarmed_beat_failed",
                                      host=agent.name)
            else:
                guardian.device.abandon()
        if peers is not None:
            peers.sock.close()
        for s in (sender, forger):
            if s is not None:
                s.close()

    def impersonate(self, attacker, victim):
        """Root on ``attacker`` makes its agent send beats naming
        ``victim`` too, signed with its own keys (None: stop)."""
        agent = self.agents[attacker]
        if victim is not None and victim not in self.cloud.hosts:
            raise ValueError("no such host: %s" % victim)
        with self._lock:
            agent.victim = victim
            forger, agent.forger = agent.forger, None
        if forger is not None:
            forger.close()

    def _forger(self, agent):
        """The Sender of ``agent``'s forged beats (made at its first)."""
        if agent.forger is None:
            name, network = agent.name, self.network
            clock, offset = self.cloud.clock, agent.clock_offset
            victim = self.cloud.hosts[agent.victim]
            agent.forger = sender_mod.Sender(
                self.conf, agent.keyring, clock=lambda: clock() + offset,
                facts_fn=lambda: protocol.Facts(True, True, 1),
                socket_factory=lambda family, kind: agent_net.PathSocket(
                    network, name, family),
                host=agent.victim, boot_id=self.cloud.boot_id(victim),
                monotonic=clock, seq_start=2 ** 40)
            # Root on the attacker reads the challenges sent to its own
            # host: a round's nonce is the same for every host, so its
            # forged beats echo them (the worst case).
            if agent.sender is not None:
                agent.forger.echoes = agent.sender.echoes
        return agent.forger

    def stop_agent(self, name):
        """Stop host ``name``'s agent; the host and its nova-compute go
        on."""
        agent = self.agents[name]
        agent.stopped = True
        self._halt(agent, orderly=True)

    def start_agent(self, name):
        """Let host ``name``'s agent run again (from its next beat, if the
        host runs)."""
        self.agents[name].stopped = False

    def restart_agent(self, name):
        """The agent restarts (same boot: sequence numbers go on above
        the old ones)."""
        self._halt(self.agents[name], orderly=True)
        self.start_agent(name)

    def set_clock_offset(self, seconds, host=None):
        """Host ``host``'s clock (every host's when None) is ``seconds``
        off; its agent restarts to read it (the agent reads the wall
        clock once, at start)."""
        names = [host] if host is not None else list(self.agents)
        for name in names:
            self.agents[name].clock_offset = float(seconds)
            self.restart_agent(name)

    # -- faults ------------------------------------------------------------

    def set_fault(self, host=None, path=None, loss=None, delay=None,
                  down=None):
        """Network faults of ``host`` on ``path`` (None: every host / every
        path): ``loss`` probability, ``delay`` seconds, ``down`` (see
        sim/agent_net.py). Fields not given keep their value."""
        if host is not None and host not in self.agents:
            raise ValueError("no agent on host %s" % host)
        if path is not None and path not in self.paths:
            raise ValueError("no path %s (paths: %s)"
                             % (path, ", ".join(self.paths)))
        self.faults.set(host, path, loss=loss, delay=delay, down=down)

    def clear_faults(self, host=None, path=None):
        self.faults.clear(host, path)

    # -- one round -----------------------------------------------------------

    def run_due(self, now=None):
        """Beat for every host due by ``now`` (the cloud's clock by
        default), send the delayed datagrams due; return when something
        is next due."""
        cloud = self.cloud
        now = cloud.clock() if now is None else now
        due, again = [], []
        while self._due and self._due[0][0] <= now:
            when, index, name = heapq.heappop(self._due)
            due.append(self.agents[name])
            when += self.interval
            # Late (a busy thread): the missed beats are not sent in a
            # burst; the schedule goes on from now.
            again.append((when if when > now else now + self.interval,
                          index, name))
        for item in again:
            heapq.heappush(self._due, item)
        starts, beating, halts = [], [], []
        with cloud.lock:
            cloud.now()
            for agent in due:
                h = cloud.hosts[agent.name]
                if agent.stopped or not cloud.os_running(h):
                    if agent.running:
                        halts.append(agent)
                    continue
                agent.facts = protocol.Facts(
                    compute=h.alive, libvirt=h.power_on,
                    guests=cloud.running_guests(agent.name),
                    system_uuid=h.system_uuid)
                if agent.running and agent.boots != h.boots:
                    halts.append(agent)     # it rebooted meanwhile
                if not agent.running or agent.boots != h.boots:
                    starts.append((agent, cloud.boot_id(h), h.boots,
                                   int(max(now - h.booted_at, 0) * 1000)))
                beating.append(agent)
        for agent in halts:
            self._halt(agent)
        for agent, boot_id, boots, seq_start in starts:
            try:
                self._build(agent, boot_id, boots, seq_start)
            except Exception:
                LOG.exception("sim.agent_start_failed", host=agent.name)
        for agent in beating:
            sender = agent.sender
            if sender is None:
                continue
            try:
                sender.send_once()
                if agent.victim is not None:
                    self._forger(agent).send_once()
            except Exception:
                LOG.exception("sim.agent_beat_failed", host=agent.name)
        nxt = self.network.flush(now)
        head = self._due[0][0] if self._due else now + self.interval
        if self.watchdog_dir is not None:
            head = min(head, self._watchdogs(now))
        return head if nxt is None else min(head, nxt)

    # -- watchdogs and peers ---------------------------------------------------

    def _watchdogs(self, now):
        """Every check interval, each running agent decides and feeds its
        watchdog (the real agent's guard loop); every peer interval, it
        probes its peers (its probe loop); the peers' datagrams are
        delivered; every chip looks at what was written and fires when
        unfed. Returns when this is next due."""
        cloud = self.cloud
        group = self.conf.agent
        guard = self._next_guard is None or now >= self._next_guard
        probe = self._next_probe is None or now >= self._next_probe
        if guard:
            self._next_guard = _next(self._next_guard, now,
                                     group.watchdog_check_interval)
        if probe:
            self._next_probe = _next(self._next_probe, now,
                                     group.peer_interval)
        if guard or probe:
            with self._lock:
                duties = [(a.name, a.guardian, a.peers)
                          for a in self.agents.values()
                          if a.guardian is not None]
            for name, guardian, peers in duties:
                if not cloud.os_running(cloud.hosts[name]):
                    continue        # halted at its next beat
                try:
                    if guard:
                        guardian.tick(now)
                    if probe and peers is not None:
                        peers.probe(now)
                except Exception:
                    LOG.exception("sim.agent_guard_failed", host=name)
        self.peer_net.deliver()
        fired = []
        with cloud.lock:
            for agent in self.agents.values():
                h = cloud.hosts[agent.name]
                hw = agent.hardware
                if agent.hw_boots != h.boots:      # a new boot: disarmed
                    agent.hw_boots = h.boots
                    hw.power_lost()
                if hw.poll(now, h.power_on):
                    fired.append(agent.name)
        for name in fired:
            self.resets.append((now, name))
            cloud.watchdog_reset(name, power_off=(
                self.watchdog_action == watchdog_hw.POWER_OFF))
        return min(self._next_guard, self._next_probe)

    def watchdog_proven(self, name, now=None):
        """The simulator's own judgement (the invariant's): had host
        ``name`` lived on after its last beat, cut off from everyone, its
        watchdog would have reset it by now. True only when its last
        beats reported an armed watchdog, a majority of its peers held
        a pill for it (the engine's relays) and ``max(that beat, that
        majority) + isolation timeout + watchdog timeout`` has passed.
        (The engine's rule adds its margin and counts from what it
        received: never earlier.)"""
        agent = self.agents.get(name)
        if agent is None or self.watchdog_dir is None \
                or agent.armed_beat_at is None:
            return False
        now = self.cloud.clock() if now is None else now
        by_pill = collections.defaultdict(list)
        with self._lock:
            held = list(self._pills_held.get(name, {}).values())
        for pill, at in held:
            by_pill[pill].append(at)
        need = selffence.majority(len(agent.peer_names))
        published = [sorted(times)[need - 1] for times in by_pill.values()
                     if len(times) >= need]
        if agent.peer_names and not published:
            return False
        group = self.conf.agent
        start = agent.armed_beat_at
        if published:
            start = max(start, min(published))
        return now >= start + group.isolation_timeout + \
            group.watchdog_timeout

    # -- the engines' challenges ---------------------------------------------

    def challenge(self, data, path, source=None):
        """One datagram that arrived on ``path``'s shared socket: handed
        to the Sender of the host the challenge names (which checks it
        again, as a real agent does). Returns the outcome."""
        try:
            message, _ = protocol.decode_signed(data, self._routing,
                                                _REPLY_BODIES)
        except protocol.Dropped as e:
            outcome = e.reason
        else:
            if type(message) is peer.Relay:
                outcome = self._relay(data, message, path, source)
            elif type(message) is not challenge.Challenge:
                outcome = "not_a_challenge"
            elif not self.network.delivers(message.host, path):
                outcome = "undelivered"
            else:
                with self._lock:
                    agent = self.agents.get(message.host)
                    sender = agent.sender if agent is not None else None
                outcome = ("no_agent" if sender is None
                           else sender.handle_reply(data, source))
        self.challenges[outcome] += 1
        return outcome

    def _relay(self, data, relay, path, source):
        """An engine's relay of ``relay.target``'s pill: sent to one peer
        of it at an address every host shares here, so handed to each
        running agent that has the target among its peers and whose own
        key signed it (its Sender checks again)."""
        outcome = "no_peer"
        with self._lock:
            candidates = [(a, a.sender) for a in self.agents.values()
                          if relay.target in a.peer_names
                          and a.sender is not None]
        for agent, sender in candidates:
            try:
                protocol.decode_signed(data, agent.keyring, _REPLY_BODIES)
            except protocol.Dropped:
                continue
            if not self.network.delivers(agent.name, path):
                outcome = "undelivered"
                continue
            outcome = sender.handle_reply(data, source)
        return outcome

    def _drain_challenges(self, sock, path):
        datagrams.drain(sock, protocol.MAX_SIZE + 1,
                        lambda data, sender: self.challenge(
                            data, path, "%s:%s" % sender[:2]),
                        _challenge_failed)

    # -- the thread ------------------------------------------------------------

    def start(self):
        """Bind the sockets, then beat on a thread until :meth:`stop`.
        Returns self. Raises OSError when an address cannot be bound."""
        self.network.open()
        if self.dispatcher is not None:
            try:
                self.dispatcher.open()
            except OSError:
                self.network.close()
                raise
        self._wake = socket.socketpair()
        self._stop.clear()
        if self.watchdog_dir is not None:
            # The invariant reads it: an evacuation from a host whose BMC
            # cannot answer is safe only after its watchdog deadline.
            self.cloud.watchdog_proof = self.watchdog_proven
        self._thread = threading.Thread(target=self._serve,
                                        name="sim-agents", daemon=True)
        self._thread.start()
        LOG.info("sim.agents_started", hosts=len(self.agents),
                 engines=list(self.conf.agent.engines),
                 paths=self.paths, requests=self.request_addresses)
        return self

    @property
    def request_addresses(self):
        """Where the engines' requests are received: [(address, port)]."""
        return self.dispatcher.addresses if self.dispatcher else []

    @property
    def request_port(self):
        addresses = self.request_addresses
        return addresses[0][1] if addresses else None

    def _serve(self):
        clock = self.cloud.clock
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake[0], selectors.EVENT_READ)
            for sock in (self.dispatcher.sockets if self.dispatcher
                         else ()):
                sel.register(sock, selectors.EVENT_READ)
            for sock, path in self.network.sockets.items():
                sel.register(sock, selectors.EVENT_READ, path)
            while not self._stop.is_set():
                try:
                    nxt = self.run_due()
                except Exception:
                    LOG.exception("sim.agents_round_failed")
                    nxt = clock() + self.interval
                wait = min(max(nxt - clock(), 0.0), MAX_WAIT)
                for key, _ in sel.select(wait):
                    if key.fileobj is self._wake[0]:
                        return
                    if key.data is not None:
                        self._drain_challenges(key.fileobj, key.data)
                    else:
                        self.dispatcher.drain(key.fileobj)

    def stop(self):
        """Stop the thread and every agent; close the sockets."""
        self._stop.set()
        if self._thread is not None:
            self._wake[1].send(b"x")
            self._thread.join(10)
            self._thread = None
        if self._wake is not None:
            for s in self._wake:
                s.close()
            self._wake = None
        for agent in self.agents.values():
            self._halt(agent, orderly=True)
            if agent.hardware is not None:
                agent.hardware.close()
        if self.cloud.watchdog_proof == self.watchdog_proven:
            self.cloud.watchdog_proof = None
        if self.dispatcher is not None:
            self.dispatcher.close()
        self.network.close()
