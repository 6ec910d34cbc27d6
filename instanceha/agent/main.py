"""``instanceha-agent``: the heartbeat agent's process.

Reads its configuration (``--config-file``, by default
``/etc/instanceha/instanceha-agent.conf`` when it exists), loads the key
files, binds its sockets, then beats until SIGTERM or SIGINT. A start-up
error (a bad option, a key file missing, unreadable, short or readable by
others, an address that cannot be bound) prints one line naming it and
exits with status 2, which the systemd unit does not restart.
"""

import os
import signal
import socket
import sys
import threading
import time

from oslo_config import cfg
import structlog

from instanceha import log
from instanceha import sdnotify
from instanceha.agent import control as control_mod
from instanceha.agent import facts as facts_mod
from instanceha.agent import guardian as guardian_mod
from instanceha.agent import guest_events
from instanceha.agent import peers as peers_mod
from instanceha.agent import sender as sender_mod
from instanceha.agent import shutdown as shutdown_mod
from instanceha.agent import watchdog
from instanceha.conf import agent as agent_conf
from instanceha.conf import explain
from instanceha.errors import ConfigError
from instanceha.heartbeat import keys

LOG = structlog.get_logger("instanceha.agent")
PROG = "instanceha-agent"
START_ERROR = 2


def load_conf(argv):
    """The parsed, checked configuration; raises cfg.Error."""
    conf = agent_conf.new_conf()
    defaults = ([agent_conf.DEFAULT_CONFIG_FILE]
                if os.path.exists(agent_conf.DEFAULT_CONFIG_FILE) else [])
    explain.parse(conf, args=list(argv), project="instanceha", prog=PROG,
                  default_config_files=defaults,
                  description="Send this compute host's signed heartbeats "
                              "to the instanceha engines.")
    explain.check_values(conf, agent_conf.GROUP, agent_conf.OPTS)
    agent_conf.validate(conf)
    return conf


class Agent:
    """The agent's parts, built from ``conf`` (raises ConfigError); the
    keyword arguments replace the system's pieces (tests, simulator)."""

    def __init__(self, conf, keyring, host=None, reader=None,
                 libvirt_module=facts_mod.libvirt, peer_keyring=None,
                 peer_socket=None, logind=None, **sender_kw):
        self.conf = conf
        self.host = host or sender_mod.resolve_host(conf)
        check_key_host(keyring, self.host)
        self.reader = reader or facts_mod.FactReader(conf)
        self.control = control_mod.Control(
            conf, keyring, self.host,
            unit_fn=lambda: self.reader.compute_unit)
        self.monotonic = sender_kw.get("monotonic", time.monotonic)
        self.guardian = self.peers = None
        self._guard_thread = self._probe_thread = None
        if conf.agent.watchdog_device or conf.agent.peers or \
                conf.agent.peers_from:
            self.guardian, self.peers = self._watchdog_duty(
                conf.agent, keyring, peer_keyring, peer_socket)
            sender_kw.update(watchdog_fn=self.guardian.report,
                             on_challenge=self.guardian.on_challenge)
        self.sender = sender_mod.Sender(
            conf, keyring, facts_fn=self.facts, host=self.host, **sender_kw)
        if self.peers is not None:
            self.sender.on_relay = self.peers.keep_relay
        self.shutdown = None
        if conf.agent.drain_on_shutdown:
            self.shutdown = shutdown_mod.ShutdownDrain(
                logind or shutdown_mod.SystemLogind(), keyring, self.host,
                self.sender.send_every_path, self.sender.sent_at,
                conf.agent.shutdown_drain_timeout,
                resend=min(1.0, conf.agent.interval),
                monotonic=self.monotonic)
            self.sender.on_drain_answer = self.shutdown.on_answer
        self.guests = None
        if conf.agent.guest_events:
            self.guests = guest_events.GuestWatcher(
                conf, keyring, self.host, self.sender.boot_id,
                self.sender.send_event, self.sender.sent_at,
                libvirt_module=libvirt_module)

    def _watchdog_duty(self, group, keyring, peer_keyring, peer_socket):
        """(Guardian, Peers or None) of ``[agent] watchdog_device`` and
        the peers; raises ConfigError. Without a watchdog device the
        guardian's device is :class:`watchdog.Absent` (never armed: the
        beats say "none"), and it only carries the peers' report."""
        try:
            peer_set = agent_conf.peer_set(self.host, group)
        except ValueError as e:
            raise ConfigError("[agent] peers / peers_from: %s" % e)
        device = (watchdog.Device(group.watchdog_device,
                                  group.watchdog_timeout)
                  if group.watchdog_device else watchdog.Absent())
        guardian = guardian_mod.Guardian(
            device, group.isolation_timeout, group.watchdog_check_interval,
            self.host, keyring, peers=[name for name, _, _ in peer_set],
            monotonic=self.monotonic,
            nonce_file=(group.nonce_file or None)
            if group.watchdog_device else None)
        if not peer_set:
            return guardian, None
        if peer_keyring is None:
            peer_keyring = keys.load_keyring(group.peer_key_file)
        try:
            resolved = [(name, socket.getaddrinfo(
                host, port, type=socket.SOCK_DGRAM)[0][4])
                for name, host, port in peer_set]
            if peer_socket is None:
                host, port = agent_conf.split_address(group.peer_address)
                family, _, _, _, address = socket.getaddrinfo(
                    host, port, type=socket.SOCK_DGRAM)[0]
                peer_socket = socket.socket(family, socket.SOCK_DGRAM)
                peer_socket.bind(address)
        except (OSError, ValueError) as e:
            raise ConfigError("[agent] peers / peer_address: %s" % e)
        LOG.info("agent.peers_chosen", peers=[p[0] for p in peer_set],
                 listed=len(group.peers), candidates=len(group.peers_from),
                 window=group.peer_window, interval=group.peer_interval,
                 watchdog=bool(group.watchdog_device),
                 reason="probed every peer_interval; the beats tell the "
                        "engines which of them answer")
        return guardian, peers_mod.Peers(
            self.host, resolved, peer_keyring, guardian, peer_socket,
            self.monotonic, window=group.peer_window)

    def facts(self):
        """This beat's facts, also shown to the self-restart policy."""
        facts = self.reader.read()
        try:
            self.control.observe(facts)
        except Exception:
            LOG.exception("agent.policy_failed")
        return facts

    def start(self):
        """Bind the request sockets, check the watchdog (armed at the
        first check saying the host may live); raises ConfigError."""
        self.control.start()
        if self.guardian is not None:
            try:
                self.guardian.check()
            except watchdog.WatchdogError as e:
                self.control.stop()
                raise ConfigError(str(e))
        if self.peers is not None:
            self.peers.start()
        if self.shutdown is not None:
            # Not taken: logged; the agent beats on.
            self.shutdown.start()

    def run(self, stop):
        """Beat until ``stop`` is set, then close everything."""
        if self.guests is not None:
            try:
                self.guests.start(stop)
            except Exception:   # beats go on without guest events
                LOG.exception("agent.guest_events_failed")
        if self.conf.agent.watchdog_device:
            self._guard_thread = threading.Thread(
                target=self.guard, args=(stop,), name="agent-watchdog",
                daemon=True)
            self._guard_thread.start()
        if self.peers is not None:
            self._probe_thread = threading.Thread(
                target=self.probe, args=(stop,), name="agent-peer-probes",
                daemon=True)
            self._probe_thread.start()
        try:
            self.sender.run(stop)
        finally:
            self.stop_watchdog()
            if self.shutdown is not None:
                self.shutdown.stop()
            self.control.stop()
            if self.peers is not None:
                self.peers.stop()
            self.sender.close()

    def guard(self, stop):
        """Decide and feed the watchdog every check interval until
        ``stop`` is set."""
        interval = self.guardian.check_interval
        while True:
            self.guardian.tick(self.monotonic())
            if stop.wait(interval):
                return

    def probe(self, stop):
        """Probe the peers every ``[agent] peer_interval`` until ``stop``
        is set (with or without a watchdog)."""
        interval = self.conf.agent.peer_interval
        while True:
            try:
                self.peers.probe(self.monotonic())
            except Exception:
                LOG.exception("agent.peer_probe_failed")
            if stop.wait(interval):
                return

    def stop_watchdog(self):
        """The orderly stop: the feeding ends, the watchdog is disarmed
        (magic close), then one beat tells the engines so."""
        if self._probe_thread is not None:
            self._probe_thread.join(5)
        if self.guardian is None or not self.conf.agent.watchdog_device:
            return
        if self._guard_thread is not None:
            self._guard_thread.join(5)
        self.guardian.disarm()
        try:
            self.sender.send_once()
        except Exception:
            LOG.exception("agent.disarmed_beat_failed")


def check_key_host(keyring, host):
    """Raise ConfigError when a host key of ``keyring`` speaks for
    another host than ``host``: its beats would all be dropped
    (``wrong_host``)."""
    for which, key in (("key_file", keyring.current),
                       ("previous_key_file", keyring.previous)):
        if key is not None and key.host is not None and key.host != host:
            raise ConfigError(
                "[agent] %s: the key of host %r, and this agent speaks for "
                "%r: engines would drop every beat (wrong_host). Install "
                "this host's key (instanceha agent-key %s on an engine), or "
                "set [agent] host to the name Nova knows this host by"
                % (which, key.host, host, host))


def _fail(message):
    sys.stderr.write("%s: %s\n" % (PROG, message))
    return START_ERROR


def main(argv=None):
    """Run the agent; return the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        conf = load_conf(argv)
    except cfg.Error as e:
        return _fail(e)
    group = conf.agent
    log.setup(group.log_format, group.debug)
    try:
        keyring = keys.load_keyring(group.key_file, group.previous_key_file)
        agent = Agent(conf, keyring)
        agent.start()
    except ConfigError as e:
        return _fail(e)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    notifier = sdnotify.Notifier()
    LOG.info("agent.started", host=agent.host,
             boot_id=agent.sender.boot_id, kid=keyring.current.kid,
             paths=[p.name for p in agent.sender.paths],
             engines=list(group.engines), interval=group.interval)
    notifier.ready("beating to %d engine address(es)" % len(group.engines))
    try:
        agent.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    notifier.stopping()
    LOG.info("agent.stopped", host=agent.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
