import ipaddress

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "kdump"
OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Listen for fence_kdump messages from crashed hosts. By "
                     "default a message only delays the power-off until the "
                     "dump is written (see 'action'); it never replaces it. "
                     "Requires 'listen_address'."),
    cfg.HostAddressOpt("listen_address", default=None,
                       help="Address of the kdump network the UDP listener "
                            "binds (required when enabled; nothing is bound "
                            "by default). fence_kdump packets carry no "
                            "authentication: bind an address only compute "
                            "hosts can reach. A wildcard address (0.0.0.0, "
                            "::) is refused with action = evacuate."),
    cfg.PortOpt("port", default=7410,
                help="UDP port for fence_kdump messages (fence_kdump_send "
                     "-p). 0 binds a free port (tests). Must match what the "
                     "hosts' kdump configuration sends to, or no message "
                     "arrives and hosts are power-fenced instead."),
    cfg.StrOpt("action", default="fence_after_dump",
               choices=[("fence_after_dump",
                         "a dumping host is powered off once the dump is "
                         "over (no message for 'timeout' seconds) or after "
                         "'max_dump_time'; safe against forged packets"),
                        ("evacuate",
                         "a message from a suspect host counts as proof of "
                         "death: evacuated WITHOUT power-off. Trusts every "
                         "sender on the kdump network: a forged packet gets "
                         "a live host's servers rebuilt elsewhere while "
                         "they still run. Needs host_map (a packet is "
                         "attributed only through it, never by name "
                         "resolution); refused on a wildcard address"),
                        ("wait", "deprecated name of fence_after_dump")],
               help="What a fence_kdump message from a suspect host does."),
    cfg.FloatOpt("max_dump_time", default=600.0, min=1, max=86400,
                 help="With action = fence_after_dump: the longest a dump "
                      "may hold the power-off, from its first message; then "
                      "the host is powered off even if messages keep "
                      "coming (a forged or stuck sender cannot hold "
                      "recovery for ever). Each second here can delay "
                      "recovery of a dumping host."),
    cfg.FloatOpt("fence_delay", default=0.0, min=0, max=3600,
                 help="Seconds a suspect host is given to start sending "
                      "kdump messages before it is power-fenced. A power-off "
                      "destroys a dump in progress; each second here delays "
                      "recovery of hosts that do not dump."),
    cfg.FloatOpt("timeout", default=60.0, min=1, max=86400,
                 help="Seconds after the last kdump message during which the "
                      "host counts as dumping. fence_kdump_send repeats "
                      "every 10 s by default (-i); keep this well above that "
                      "interval or a dumping host may be power-fenced."),
    cfg.DictOpt("host_map", default={},
                help="Explicit compute host name to source IP map, e.g. "
                     "'compute1:192.0.2.11,compute2:192.0.2.12'. Packets "
                     "carry no host name: a wrong address here evacuates the "
                     "wrong host. Entries win over name resolution. "
                     "Required with action = evacuate, which attributes "
                     "packets through this map only."),
    cfg.BoolOpt("resolve_names", default=True,
                help="Also resolve compute host names (as Nova reports them) "
                     "to find each host's address. Wrong or shared DNS "
                     "records attribute a packet to the wrong host; an "
                     "address claimed by two hosts is ignored. Used with "
                     "the delaying action (fence_after_dump) only: with "
                     "action = evacuate a resolved name would skip a live "
                     "host's power-off, so only host_map counts there."),
    cfg.FloatOpt("resolve_interval", default=300.0, min=1, max=86400,
                 help="Seconds between re-resolving compute host names. Too "
                      "long keeps a stale address after renumbering; too "
                      "short loads DNS. A packet from an unknown address "
                      "also triggers a refresh, at most every "
                      "'min_resolve_interval' seconds."),
    cfg.FloatOpt("min_resolve_interval", default=5.0, min=0, max=3600,
                 help="Lower bound between refreshes triggered by packets "
                      "from unknown addresses, so junk traffic cannot flood "
                      "DNS."),
]

def is_wildcard(address):
    """True for an address that binds every interface (0.0.0.0, ::, ::0,
    ::ffff:0.0.0.0, ...)."""
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    except ValueError:
        return str(address) in ("", "*")      # a host name binds one address
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_unspecified or bool(mapped and mapped.is_unspecified)


def attributes_by_name(group):
    """Whether a packet may be attributed to a host through name
    resolution: only when it merely delays the power-off. With action =
    evacuate it skips the power-off, and a wrong DNS record would then
    evacuate a live host: only the operator's host_map counts."""
    return bool(group.resolve_names) and group.action != "evacuate"


def validate(conf):
    """Checks across options, run at start: raises cfg.Error naming the
    problem."""
    group = conf.kdump
    if not group.enabled:
        return
    if not group.listen_address:
        raise cfg.Error("[kdump] listen_address: must be set when [kdump] "
                        "enabled = true: name the kdump network's address "
                        "(nothing is bound by default)")
    if group.action == "evacuate" and is_wildcard(group.listen_address):
        raise cfg.Error("[kdump] listen_address: %r is a wildcard address; "
                        "action = evacuate trusts every packet it receives, "
                        "so it must listen on the kdump network's address "
                        "only" % group.listen_address)
    if group.action == "evacuate" and not group.host_map:
        raise cfg.Error("[kdump] action = evacuate needs [kdump] host_map: "
                        "it evacuates without power-off on a packet's "
                        "source address alone, so each host's kdump "
                        "address must be written there (name resolution "
                        "is not trusted for it); or use action = "
                        "fence_after_dump")


register_opts, list_opts = _group.make(
    GROUP, OPTS, title="fence_kdump listener",
    help_text="Detect crashed hosts by the fence_kdump messages their dump "
              "kernel sends.")
