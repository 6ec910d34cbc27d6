"""Options of ``instanceha-agent``, the heartbeat agent of a compute host.

The agent is a process of its own with its own configuration file
(``/etc/instanceha/instanceha-agent.conf``): these options are registered
by :mod:`instanceha.agent.main` only, never by the engine (they are not in
``instanceha.conf.MODULES``). The sample is rendered from the
``instanceha.agent`` namespace (etc/oslo-config-generator/
instanceha-agent.conf).
"""

import bisect
import hashlib

from oslo_config import cfg

GROUP = "agent"
DEFAULT_CONFIG_FILE = "/etc/instanceha/instanceha-agent.conf"
DEFAULT_ENGINE_PORT = 7411
CHECKS = [("systemd", "ask systemd for the units' ActiveState "
                      "(systemctl show), at most every facts_interval "
                      "seconds"),
          ("pidfile", "read a pid file and check that the process lives "
                      "(cheap: every beat)"),
          ("none", "do not check; the fact is sent as unknown")]

OPTS = [
    # -- who this host is -------------------------------------------------
    cfg.StrOpt("host", default=None,
               help="This compute host's name as Nova knows it (the "
                    "'host' of its nova-compute service). Unset: nova.conf's "
                    "[DEFAULT] host (see nova_conf), else the system's host "
                    "name, which is Nova's own default. A wrong name makes "
                    "the engine count the beats as from an unknown host: "
                    "this host then gets no fast detection and no veto."),
    cfg.StrOpt("nova_conf", default="/etc/nova/nova.conf",
               help="nova.conf read for [DEFAULT] host when 'host' is "
                    "unset. An unreadable file falls back to the system's "
                    "host name (logged at start)."),
    # -- where beats go ---------------------------------------------------
    cfg.ListOpt("engines", default=[],
                help="Where to send beats: every engine replica's heartbeat "
                     "listener, as host:port ([v6addr]:port for IPv6; the "
                     "port defaults to %d). Names are resolved once at "
                     "start. Required: an agent with no engine does "
                     "nothing." % DEFAULT_ENGINE_PORT),
    cfg.ListOpt("paths", default=[],
                help="Networks to send over, each as name=local_address, "
                     "e.g. 'mgmt=192.0.2.11,storage=198.51.100.11'. Each "
                     "path has its own socket bound to that address (so "
                     "beats leave through that network) and its own "
                     "sequence; the engine counts beats per path, and a "
                     "host silent on one path but not the other is alive. "
                     "'name=' leaves the source address to the routing "
                     "table. Empty: one path named 'default', unbound."),
    cfg.FloatOpt("interval", default=1.0, min=0.05, max=60,
                 help="Seconds between beats. The engine declares a host "
                      "silent after its own silence timeout (a few "
                      "intervals): raising this here without raising it "
                      "there makes healthy hosts look silent."),
    # -- keys ---------------------------------------------------------------
    cfg.StrOpt("key_file", default="/etc/instanceha/agent.key",
               help="File holding this host's own HMAC key, written on an "
                    "engine by 'instanceha agent-key HOST --output FILE' "
                    "(derived from the engines' master key; one line "
                    "ihk1:...:HOST), mode 0600. It speaks for this host "
                    "only: a key of another host stops the agent at start. "
                    "Deployments before per-host keys put the shared key "
                    "here (one line of at least 32 bytes, the same on "
                    "every host and engine), which speaks for every host. "
                    "A missing, unreadable, short or group/world-readable "
                    "file stops the agent at start (exit status 2). Anyone "
                    "who reads it can forge this host's beats and keep it "
                    "from being fenced when it dies."),
    cfg.StrOpt("previous_key_file", default=None,
               help="During a key rotation or the move from the shared key "
                    "to this host's own: the previous key (e.g. the shared "
                    "one), still accepted on requests from engines that "
                    "sign with it (beats are always signed with key_file). "
                    "Remove once every engine has stopped accepting it."),
    cfg.FloatOpt("replay_window", default=30.0, min=1, max=3600,
                 help="Seconds an engine's request may be old (or ahead) by "
                      "this host's clock; older ones are refused as stale, "
                      "as are repeated ones. An engine whose clock differs "
                      "from this host's by more cannot request restarts."),
    # -- facts ---------------------------------------------------------------
    cfg.StrOpt("compute_check", default="systemd", choices=CHECKS,
               help="How to tell whether nova-compute runs. The engine "
                    "uses it to say 'nova-compute down, host alive' and for "
                    "soft fencing; a wrong answer never fences a host."),
    cfg.ListOpt("compute_units",
                default=["openstack-nova-compute.service",
                         "nova-compute.service", "devstack@n-cpu.service"],
                help="systemd units that may run nova-compute, in order: "
                     "the first one systemd has loaded is checked (and "
                     "restarted by soft fencing). RDO, Debian/Ubuntu and "
                     "DevStack names by default. None loaded: unknown."),
    cfg.StrOpt("compute_pidfile", default="/run/nova/nova-compute.pid",
               help="With compute_check = pidfile: the pid file of "
                    "nova-compute. A stale file whose pid was reused by "
                    "another process reads as running."),
    cfg.StrOpt("libvirt_check", default="systemd", choices=CHECKS,
               help="How to tell whether libvirt's daemon runs (reported "
                    "to the engine as a fact; it decides nothing alone)."),
    cfg.ListOpt("libvirt_units",
                default=["libvirtd.service", "virtqemud.service"],
                help="systemd units that may run libvirt's daemon: the "
                     "first loaded one is checked (monolithic libvirtd or "
                     "the modular virtqemud)."),
    cfg.StrOpt("libvirt_pidfile", default="/run/libvirtd.pid",
               help="With libvirt_check = pidfile: libvirtd's pid file."),
    cfg.BoolOpt("count_guests", default=True,
                help="Report the number of running guests, read from "
                     "libvirt (python3-libvirt must be importable by the "
                     "agent; otherwise the count is sent as unknown)."),
    cfg.StrOpt("libvirt_uri", default="qemu:///system",
               help="libvirt connection URI for counting guests and "
                    "watching their events, opened read-only."),
    cfg.BoolOpt("guest_events", default=True,
                help="Watch libvirt's lifecycle events and send the "
                     "engines those of guests that broke by themselves: "
                     "stopped with detail failed or crashed, crashed, "
                     "paused on a watchdog or an I/O error (never a "
                     "normal shutdown or a destroy, which is how Nova "
                     "stops a server). The engine's instance repair "
                     "judges each against Nova's view of the server: "
                     "faster detection, never a repair Nova's view does "
                     "not call for. Needs python3-libvirt importable by "
                     "the agent; otherwise nothing is watched (logged at "
                     "start)."),
    cfg.StrOpt("system_uuid_file",
               default="/sys/class/dmi/id/product_uuid",
               help="File holding this machine's system UUID (the DMI "
                    "product_uuid; readable by root only), sent in every "
                    "beat. The engine fences this host only through a BMC "
                    "whose machine reports the same UUID (Redfish System "
                    "UUID, IPMI system GUID), and refuses a BMC that "
                    "reports another: an inventory entry pointing at "
                    "another live machine then leaves this host failed "
                    "instead of powering that machine off. Empty, or a "
                    "file that cannot be read: no UUID is sent, and the "
                    "engine says the identity of this host's BMCs is not "
                    "verified (with [fencing] require_verified_identity "
                    "this host is then never fenced)."),
    cfg.FloatOpt("facts_interval", default=10.0, min=0, max=3600,
                 help="Seconds a systemd or libvirt answer is reused before "
                      "asking again (pid files are read at every beat). "
                      "Each question starts a systemctl process: asking at "
                      "every beat would cost far more CPU than the beats. A "
                      "stopped nova-compute shows in the beats up to this "
                      "much later."),
    cfg.FloatOpt("check_timeout", default=2.0, min=0.1, max=60,
                 help="Seconds a systemctl or libvirt query may take before "
                      "the fact is sent as unknown."),
    # -- soft fencing -------------------------------------------------------
    cfg.ListOpt("control_addresses", default=[],
                help="Addresses (address:port) where the agent receives "
                     "engines' signed requests, e.g. to restart "
                     "nova-compute on a host whose agent beats while Nova "
                     "says its compute service is down. Empty: no request "
                     "is received. Bind the management address only; "
                     "requests are authenticated and replay-checked."),
    cfg.BoolOpt("restart_compute", default=False,
                help="Restart nova-compute when an engine asks (soft "
                     "fencing). Off: requests are refused and logged. A "
                     "restart interrupts operations nova-compute runs at "
                     "that moment (a migration's local steps, a spawn)."),
    cfg.BoolOpt("self_restart", default=False,
                help="Restart nova-compute on the agent's own decision "
                     "when it has been seen down for self_restart_after "
                     "seconds, without waiting for an engine. Shares the "
                     "restart_max limit with requested restarts."),
    cfg.FloatOpt("self_restart_after", default=60.0, min=1, max=86400,
                 help="Seconds nova-compute must be seen down before the "
                      "agent restarts it itself (with self_restart). Short: "
                      "races a deliberate stop by an operator or a package "
                      "upgrade."),
    cfg.IntOpt("restart_max", default=3, min=1, max=100,
               help="At most this many restarts of nova-compute (asked or "
                    "self-decided) per restart_window; more are refused and "
                    "logged. A nova-compute that keeps dying needs a human."),
    cfg.FloatOpt("restart_window", default=3600.0, min=60, max=604800,
                 help="Seconds over which restart_max counts."),
    cfg.ListOpt("restart_command",
                default=["systemctl", "--no-block", "restart", "{unit}"],
                help="Command restarting nova-compute, as a list of "
                     "arguments (no shell); {unit} is the first loaded unit "
                     "of compute_units (the first listed when none is "
                     "known). --no-block: systemd queues the restart and "
                     "the agent does not wait for nova-compute to stop."),
    cfg.FloatOpt("restart_timeout", default=30.0, min=1, max=600,
                 help="Seconds the restart command may run before it is "
                      "killed and the attempt counted as failed."),
    # -- orderly shutdown drains first (issue 38) --------------------------
    cfg.BoolOpt("drain_on_shutdown", default=False,
                help="Hold a systemd-logind delay inhibitor lock on "
                     "shutdown; when this host shuts down or reboots, ask "
                     "the engines to drain it (the drain an operator asks "
                     "for, then maintenance, with its preflight) and let "
                     "the shutdown go on once the acting engine says it is "
                     "drained, refuses, or shutdown_drain_timeout passes. "
                     "Needs the agent's unit allowed to call logind's "
                     "Inhibit (doc/agent.md) and the host's own key "
                     "(requests signed with the shared key are refused). "
                     "Unreachable logind: logged at start, beats go on, "
                     "nothing is drained."),
    cfg.FloatOpt("shutdown_drain_timeout", default=300.0, min=1,
                 max=86400,
                 help="Seconds a shutdown waits for the drain at most. "
                      "logind holds a shutdown no longer than its "
                      "InhibitDelayMaxSec (logind.conf, 5 s by default): "
                      "the wait is capped by it, whatever is set here "
                      "(logged at start), so raise InhibitDelayMaxSec to "
                      "at least this. A drain not done in time: the lock "
                      "is released anyway (logged) and the servers still "
                      "on the host stop with it."),
    # -- watchdog self-fencing (issue 37) ----------------------------------
    cfg.StrOpt("watchdog_device", default=None,
               help="The watchdog device the agent arms and feeds while "
                    "this host may live (/dev/watchdog: the hardware's, "
                    "or Linux softdog's). Unset: no watchdog, and the "
                    "engines never recover this host through the "
                    "'watchdog' fencing method. The agent resets this "
                    "host when it cannot hear an engine nor a majority of "
                    "its peers for isolation_timeout, or when an engine "
                    "condemns it; a crash of the agent resets it unless "
                    "systemd restarts the agent within watchdog_timeout "
                    "(doc/agent.md)."),
    cfg.IntOpt("watchdog_timeout", default=30, min=2, max=600,
               help="Seconds the watchdog waits unfed before it resets "
                    "this host (set on the device with WDIOC_SETTIMEOUT; "
                    "the device may round it, and the beats report what "
                    "it took)."),
    cfg.FloatOpt("isolation_timeout", default=20.0, min=2, max=3600,
                 help="Seconds without a fresh answer from an acting "
                      "engine or from a majority of the peers after which "
                      "the agent stops feeding the watchdog. The engines "
                      "count a silent, condemned host fenced no sooner "
                      "than this plus watchdog_timeout plus their margin "
                      "after its last beat."),
    cfg.FloatOpt("watchdog_check_interval", default=2.0, min=0.05, max=10,
                 help="Seconds between two decisions to feed the watchdog "
                      "(peers are probed every peer_interval). Keep it well "
                      "below watchdog_timeout."),
    cfg.StrOpt("nonce_file",
               default="/run/instanceha-agent/watchdog-nonces",
               help="Where the agent appends the nonces its beats carry "
                    "(with watchdog_device). Keep it on a file system "
                    "emptied at boot (/run): an agent restarted after a "
                    "crash then still obeys a poison pill made before its "
                    "restart, and a pill recorded before the host's last "
                    "boot is refused. Empty: not kept (a restarted agent "
                    "refuses earlier pills)."),
    cfg.ListOpt("peers", default=[],
                help="Peer agents, probed every peer_interval: "
                     "name=address:port items, name as Nova knows the "
                     "host; at most 16 (bounded fan-out). The beats tell "
                     "the engines which of them answer (peer witnesses: "
                     "a silent host most of its peers do not hear either "
                     "is fenced sooner), with or without a watchdog. "
                     "With a watchdog, they are asked, when the engines "
                     "cannot be heard, whether they hear one; with none, "
                     "only an engine keeps this host from resetting: "
                     "should every engine stop, every host without peers "
                     "resets."),
    cfg.ListOpt("peers_from", default=[],
                help="Candidate peer agents (name=address:port items, as "
                     "peers), for clouds too large to list each host's "
                     "peers by hand: every agent given the same list "
                     "probes the peer_count candidates that follow it on "
                     "a ring ordered by a hash of the names, so each host "
                     "is probed by exactly peer_count others whatever the "
                     "cloud's size (a deterministic random set; bounded "
                     "fan-out). Added after the peers listed in peers, up "
                     "to 16 in all. Give one rack's or aggregate's hosts "
                     "to keep peers close; this host's own entry is "
                     "skipped."),
    cfg.IntOpt("peer_count", default=5, min=1, max=16,
               help="How many peers each agent takes from peers_from."),
    cfg.FloatOpt("peer_interval", default=1.0, min=0.1, max=10,
                 help="Seconds between two rounds of probes to the peers "
                      "(each round sends one datagram to each peer). "
                      "Probing runs whenever peers or peers_from is set, "
                      "with or without a watchdog."),
    cfg.FloatOpt("peer_window", default=3.0, min=0.2, max=60,
                 help="A peer counts as heard while it answered a probe "
                      "sent no longer ago than this (seconds). The beats "
                      "tell the engines which peers are heard: a host "
                      "silent to the engines that most of its peers do "
                      "not hear either is fenced without waiting for "
                      "Nova (doc/agent.md). At least twice "
                      "peer_interval: one lost datagram must not make a "
                      "peer unheard."),
    cfg.StrOpt("peer_address", default=None,
               help="address:port this agent receives its peers' probes "
                    "and the engines' relayed pills on (needed with "
                    "peers)."),
    cfg.StrOpt("peer_key_file", default="/etc/instanceha/peer.key",
               help="The key signing probes and answers between peers (a "
                    "key file as key_file's shared form, the same on "
                    "every agent of one peer set, mode 0600)."),
    # -- logging ------------------------------------------------------------
    cfg.StrOpt("log_format", default="console",
               choices=[("console", "key=value lines"),
                        ("json", "one JSON object per line")],
               help="Format of the agent's log lines on stderr (the "
                    "journal under systemd)."),
    cfg.BoolOpt("debug", default=False,
                help="Log at debug level: every request and fact change, "
                     "not each beat."),
]


def register_opts(conf):
    conf.register_group(cfg.OptGroup(
        GROUP, title="instanceha heartbeat agent",
        help="The agent on each compute host: signed UDP beats to the "
             "engines, local facts, and nova-compute restarts on request."))
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    """For oslo-config-generator (namespace 'instanceha.agent')."""
    return [(GROUP, OPTS)]


def new_conf():
    """A fresh ConfigOpts with the agent's options registered."""
    conf = cfg.ConfigOpts()
    register_opts(conf)
    return conf


def split_address(text, default_port=None):
    """(host, port) of ``host:port`` or ``[v6]:port``; the port may be
    left out when ``default_port`` is given. Raises ValueError."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError("%r: expected [address]:port" % text)
        port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    if not port:
        if default_port is None:
            raise ValueError("%r: no port" % text)
        port = str(default_port)
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("%r: expected address:port" % text)
    return host, int(port)


def parse_paths(items):
    """[(name, local address or None)] from ``paths``; raises ValueError."""
    paths = []
    for item in items or ["default="]:
        name, sep, address = item.partition("=")
        name = name.strip()
        if not sep or not name or not all(
                c.isalnum() or c in "_.-" for c in name) or len(name) > 32:
            raise ValueError("%r: expected name=local_address (a name of "
                             "letters, digits, _ . -)" % item)
        if name in (n for n, _ in paths):
            raise ValueError("path %r named twice" % name)
        address = address.strip().strip("[]") or None
        paths.append((name, address))
    return paths


def parse_peers(items, limit=16):
    """[(name, host, port)] of ``peers`` (at most ``limit``; None: no
    limit, ``peers_from``); raises ValueError."""
    peers = []
    for item in items:
        name, sep, address = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError("%r: expected name=address:port" % item)
        host, port = split_address(address)
        peers.append((name, host, port))
    if limit is not None and len(peers) > limit:
        raise ValueError("at most %d peers (bounded fan-out), %d given"
                         % (limit, len(peers)))
    return peers


def _ring_key(name):
    return hashlib.sha256(b"instanceha-peer-ring:"
                          + name.encode("utf-8")).digest()


def ring_peers(host, candidates, count):
    """The ``count`` candidates ((name, host, port), ``peers_from``)
    after ``host`` on the ring of every name ordered by its hash, this
    host's own entry skipped: each host of a list that every agent is
    given is chosen by exactly ``count`` others (fewer when the list is
    shorter). Pure, deterministic."""
    by_name = {}
    for item in candidates:
        if item[0] != host:
            by_name.setdefault(item[0], item)
    ring = sorted(by_name, key=_ring_key)
    if not ring:
        return []
    me = _ring_key(host)
    start = bisect.bisect_right([_ring_key(n) for n in ring], me)
    return [by_name[ring[(start + i) % len(ring)]]
            for i in range(min(count, len(ring)))]


def peer_set(host, group):
    """[(name, host, port)] this agent probes: ``peers``, then the ring's
    choice from ``peers_from`` (see :func:`ring_peers`), names not
    repeated, at most 16; raises ValueError."""
    chosen = list(parse_peers(group.peers))
    if group.peers_from:
        names = {p[0] for p in chosen} | {host}
        for item in ring_peers(host, parse_peers(group.peers_from,
                                                 limit=None),
                               group.peer_count):
            if item[0] not in names:
                names.add(item[0])
                chosen.append(item)
    return chosen[:16]


def validate(conf):
    """Checks across options, run at start: raises cfg.Error naming the
    option."""
    group = conf.agent
    if not group.engines:
        raise cfg.Error("[agent] engines: must list at least one engine "
                        "address (host:port): beats have nowhere to go")
    for item, what in ([(e, "engines") for e in group.engines]
                       + [(c, "control_addresses")
                          for c in group.control_addresses]):
        try:
            split_address(item, DEFAULT_ENGINE_PORT
                          if what == "engines" else None)
        except ValueError as e:
            raise cfg.Error("[agent] %s: %s" % (what, e))
    try:
        parse_paths(group.paths)
    except ValueError as e:
        raise cfg.Error("[agent] paths: %s" % e)
    for name in ("peers", "peers_from"):
        if getattr(group, name) and not group.peer_address:
            raise cfg.Error("[agent] %s needs [agent] peer_address: the "
                            "peers' answers cannot arrive otherwise" % name)
    try:
        parse_peers(group.peers)
    except ValueError as e:
        raise cfg.Error("[agent] peers: %s" % e)
    try:
        parse_peers(group.peers_from, limit=None)
    except ValueError as e:
        raise cfg.Error("[agent] peers_from: %s" % e)
    if group.peer_window < 2 * group.peer_interval:
        raise cfg.Error("[agent] peer_window: at least twice peer_interval "
                        "(one lost datagram must not make a peer unheard)")
    if group.watchdog_device and \
            group.watchdog_check_interval * 3 > group.watchdog_timeout:
        raise cfg.Error("[agent] watchdog_check_interval: at most a third "
                        "of watchdog_timeout, or the host may reset "
                        "between two feeds")
    if group.restart_compute and not group.control_addresses:
        raise cfg.Error("[agent] restart_compute = true needs [agent] "
                        "control_addresses: requests cannot arrive "
                        "otherwise")
