"""The engine's options for the hosts' heartbeat agents (group
``[agent]`` of the engine's configuration).

Not to be confused with :mod:`instanceha.conf.agent`: the options of the
agent itself, a process of its own on each compute host with its own
file. The engines hold the master key (``master_key_file``) from which
each host's own key is derived; each agent holds its host's key only
(written by ``instanceha agent-key HOST``). During the move from the
shared key of older deployments, the engines also accept that key
(``key_file``, ``accept_shared_key``). They share the ports: agents send
beats to ``listen_addresses`` here, engines send requests to the agents'
``control_addresses`` (port ``request_port`` here).
"""

from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group
from instanceha.conf import agent as agent_conf

GROUP = "agent"
#: Where agents send beats unless told otherwise (the agent's default).
DEFAULT_PORT = agent_conf.DEFAULT_ENGINE_PORT

OPTS = [
    cfg.ListOpt("listen_addresses", default=[],
                help="Addresses where this engine receives the agents' "
                     "signed beats, as address or address:port "
                     "([v6addr]:port for IPv6; the port defaults to %d; 0 "
                     "binds a free one, for tests). One listener per "
                     "network the agents send over (management, storage). "
                     "Empty: no listener, hosts are judged by Nova alone, "
                     "as without agents. Beats are authenticated, so a "
                     "wildcard address is allowed, but naming each "
                     "network's address keeps stray traffic off."
                     % DEFAULT_PORT),
    cfg.StrOpt("master_key_file", default=None,
               help="File holding the master key (one line of at least 32 "
                    "bytes, e.g. openssl rand -hex 32, mode 0600), the "
                    "same on every engine and never on a compute host. "
                    "Each host's own key is derived from it and the host's "
                    "name ('instanceha agent-key HOST --output FILE' "
                    "writes it for that host's agent); a beat, guest event "
                    "or request signed with one host's key speaks for that "
                    "host only, so root on one compute host cannot keep "
                    "another from being fenced. Whoever reads this file "
                    "can forge every host's beats. Unset: only the shared "
                    "key_file is used (one key for every host)."),
    cfg.StrOpt("previous_master_key_file", default=None,
               help="During a rotation of the master key: the previous "
                    "master, whose derived host keys are still accepted "
                    "(two keys per host; status shows the hosts still on "
                    "it). Remove once every agent has its new key."),
    cfg.StrOpt("key_file", default=None,
               help="The shared key of deployments before per-host keys "
                    "(one line of at least 32 bytes, mode 0600, the same "
                    "secret as the agents' key_file): one key for every "
                    "host, so whoever holds it, root on any compute host, "
                    "can forge any host's beats and keep a dead host from "
                    "being fenced. Accepted while accept_shared_key is "
                    "true. A missing, unreadable, short or "
                    "group/world-readable file stops the start with its "
                    "path named. One of key_file and master_key_file is "
                    "required when listen_addresses is set."),
    cfg.StrOpt("previous_key_file", default=None,
               help="During a rotation of the shared key: the previous "
                    "shared key, still accepted with key_file (status "
                    "shows the hosts still signing with it). Remove once "
                    "every agent has the new key."),
    cfg.BoolOpt("accept_shared_key", default=True,
                help="Accept beats and guest events signed with the shared "
                     "key_file (and sign requests with it to the hosts "
                     "whose agents still do): the window of the "
                     "move to per-host keys (doc/agent.md, 'Upgrading to "
                     "per-host keys'). While true, root on any host holding "
                     "the shared key can still speak for every host; "
                     "status and /metrics count the hosts still on it "
                     "(hosts_on_shared_key) and each is logged once "
                     "(agent_shared_key_used). Set false once that count "
                     "is 0: beats naming the shared key are then dropped "
                     "as shared_key. With master_key_file unset the "
                     "shared key is the only key and this must stay true."),
    cfg.FloatOpt("silence_timeout", default=3.0, min=0.1, max=3600,
                 help="Seconds without an authenticated beat on a path "
                      "before that path counts as silent; a host silent on "
                      "every path for this long is reported silent (a "
                      "suspect for fast detection, corroborated before any "
                      "fencing). Keep it at several times the agents' "
                      "interval (1 s): shorter reports hosts silent on "
                      "ordinary packet loss."),
    cfg.FloatOpt("replay_window", default=30.0, min=1, max=3600,
                 help="Seconds a beat's send time may drift from what the "
                      "host's clock has shown before the beat is refused "
                      "as stale (held back and sent again). A steady "
                      "clock skew is learned per host and boot, so this "
                      "alone does not prove a beat recent: the veto "
                      "rests on the challenges a beat echoes "
                      "(challenge_interval, challenge_window)."),
    cfg.FloatOpt("challenge_interval", default=2.0, min=0.1, max=60,
                 help="Seconds between this engine's challenges: a signed "
                      "random nonce sent to every host it hears, to the "
                      "address and port each path's beats come from. A "
                      "beat keeps a host from being fenced (the veto) only "
                      "when it echoes one of this engine's last "
                      "challenge_window nonces, so a beat held back or "
                      "recorded and sent later vetoes for at most "
                      "challenge_interval x challenge_window seconds. "
                      "Longer: more time for such a beat; shorter: more "
                      "datagrams (one per host and path each interval). "
                      "Beats of an agent that does not echo challenges "
                      "(an older version) are shown as unproven and never "
                      "veto."),
    cfg.IntOpt("challenge_window", default=3, min=1, max=10,
               help="How many of this engine's latest challenges a beat may "
                    "echo and still be proven fresh. 1 refuses a beat "
                    "sent before the latest challenge reached its agent "
                    "(a healthy host's beats turn unproven at each "
                    "challenge, and lose their veto whenever one "
                    "challenge datagram is lost); 3 tolerates two lost in "
                    "a row. Larger keeps a held-back beat usable longer "
                    "(challenge_interval x challenge_window seconds)."),
    cfg.FloatOpt("cliff_share", default=0.3, min=0.0, max=1.0,
                 help="Share (0..1) of the hosts whose agents were beating "
                      "that, once fallen silent within cliff_window "
                      "seconds, makes a 'cliff': this engine is likely cut "
                      "off from them rather than they all died, and "
                      "fencing on the agents' silence is held."),
    cfg.FloatOpt("cliff_window", default=10.0, min=0.1, max=3600,
                 help="Seconds within which silences are counted together "
                      "for cliff_share."),
    cfg.IntOpt("cliff_min_hosts", default=3, min=1,
               help="A cliff needs at least this many hosts fallen silent "
                    "within cliff_window, so that one or two deaths in a "
                    "small cloud are not taken for a cut-off engine."),
    cfg.PortOpt("request_port", default=7412,
                help="UDP port where agents receive signed requests (their "
                     "control_addresses). A request goes to the address "
                     "the host's last beat came from, on this port."),
    cfg.BoolOpt("restart_compute", default=False,
                help="Soft fencing: ask the agent of a host that beats "
                     "while Nova says its nova-compute is down to restart "
                     "nova-compute (the agent must allow it too, with its "
                     "own restart_compute). Off: such a host is only "
                     "reported and never fenced."),
    cfg.IntOpt("restart_max", default=3, min=1, max=100,
               help="At most this many restart requests per host per "
                    "restart_window; then the host is left to a human."),
    cfg.FloatOpt("restart_window", default=3600.0, min=60, max=604800,
                 help="Seconds over which restart_max counts."),
    cfg.FloatOpt("nova_report_interval", default=10.0, min=0.1, max=3600,
                 help="Nova's [DEFAULT] report_interval: a running "
                      "nova-compute's heartbeat in Nova advances at least "
                      "this often. A host whose agent fell silent is fenced "
                      "only once Nova has missed a heartbeat it owed (this "
                      "long, or longer if the host's heartbeats were seen "
                      "further apart, plus a poll interval, after the last "
                      "one seen), or a BMC that may prove it dead reads "
                      "Off; a heartbeat Nova records after the silence "
                      "means the host lives (never fenced for it)."),
    cfg.IntOpt("peer_witnesses", default=2, min=1, max=16,
               help="Peer witnesses (the agents' [agent] peers): a host "
                    "whose agent fell silent on every path is taken as "
                    "corroborated at once, without waiting for the "
                    "heartbeat Nova owes, when at least this many of the "
                    "agents that list it as a peer, and a majority of "
                    "them, report in beats made after its last beat (the "
                    "whole of their hearing window after it) that they do "
                    "not hear it either, and none that it does. It is "
                    "then fenced (powered off, or its watchdog's deadline "
                    "awaited) as any other: never evacuated before. Fewer "
                    "reporting peers: Nova's owed heartbeat is awaited as "
                    "without peers."),
    cfg.FloatOpt("peer_corroborated_grace", default=3.0,
                 min=0, max=3600,
                 help="The grace period, counted from the host's last "
                      "beat, of a silence its peers corroborate (see "
                      "peer_witnesses), instead of [detection] "
                      "grace_period when shorter: the peers' fresh reports "
                      "already rule out a late heartbeat of a host that "
                      "merely paused."),
]


def split_listen_address(text):
    """(address, port) of one ``listen_addresses`` item; raises
    ValueError naming it."""
    host, port = agent_conf.split_address(text, DEFAULT_PORT)
    try:
        types.HostAddress()(host)
    except ValueError:
        raise ValueError("%r: %r is not an IP address or host name"
                         % (text, host))
    return host, port


def listen_addresses(group):
    """[(address, port)] of ``group.listen_addresses``; raises
    ValueError."""
    return [split_listen_address(item) for item in group.listen_addresses]


def validate(conf):
    """Checks across options, run at start: raises cfg.Error naming the
    option. The key files are read by the heartbeat source when it is
    built (:func:`instanceha.heartbeat.keys.load_keyring`: a problem
    names the file)."""
    group = conf.agent
    if not group.listen_addresses:
        return
    try:
        bound = listen_addresses(group)
    except ValueError as e:
        raise cfg.Error("[agent] listen_addresses: %s" % e)
    if len(set(bound)) != len(bound):
        raise cfg.Error("[agent] listen_addresses: an address is listed "
                        "twice")
    if not group.key_file and not group.master_key_file:
        raise cfg.Error("[agent] master_key_file: must be set (or the "
                        "shared key_file of older deployments) when [agent] "
                        "listen_addresses is: beats are authenticated with "
                        "it")
    if not group.accept_shared_key and not group.master_key_file:
        raise cfg.Error("[agent] accept_shared_key = false needs [agent] "
                        "master_key_file: no key would be accepted")
    if group.previous_master_key_file and not group.master_key_file:
        raise cfg.Error("[agent] previous_master_key_file needs [agent] "
                        "master_key_file")
    if group.previous_key_file and not group.key_file:
        raise cfg.Error("[agent] previous_key_file needs [agent] key_file")


register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Heartbeat agents",
    help_text="The hosts' heartbeat agents (instanceha-agent): where beats "
              "are received, the master key (each host's own key derived "
              "from it) and the shared key of older deployments, when a "
              "host counts as silent, "
              "and soft fencing (restarting nova-compute).")
