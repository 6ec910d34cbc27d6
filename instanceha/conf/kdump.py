from oslo_config import cfg

from instanceha.conf import _group

GROUP = "kdump"
OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Listen for fence_kdump messages. A message from a "
                     "suspect host proves it is dead (its dump kernel runs no "
                     "guests), so it is evacuated without a power-off. Only "
                     "enable when hosts send fence_kdump and the UDP port is "
                     "reachable from them alone: anyone who can send from a "
                     "compute host's address can trigger its evacuation."),
    cfg.HostAddressOpt("listen_address", default="0.0.0.0",
                       help="Address the UDP listener binds. '::' listens on "
                            "IPv6 and IPv4. Bind the management network only; "
                            "packets carry no authentication."),
    cfg.PortOpt("port", default=7410,
                help="UDP port for fence_kdump messages (fence_kdump_send "
                     "-p). 0 binds a free port (tests). Must match what the "
                     "hosts' kdump configuration sends to, or no message "
                     "arrives and hosts are power-fenced instead."),
    cfg.StrOpt("action", default="evacuate", choices=["evacuate", "wait"],
               help="What a kdump message from a suspect host does. "
                    "'evacuate': the host counts as fenced and its servers "
                    "are evacuated at once. 'wait': the host is not "
                    "power-fenced while it keeps dumping (the dump is kept), "
                    "and evacuation waits until messages stop for 'timeout' "
                    "seconds; recovery is slower."),
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
                     "wrong host. Entries win over name resolution."),
    cfg.BoolOpt("resolve_names", default=True,
                help="Also resolve compute host names (as Nova reports them) "
                     "to find each host's address. Wrong or shared DNS "
                     "records attribute a packet to the wrong host; an "
                     "address claimed by two hosts is ignored."),
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

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="fence_kdump listener",
    help_text="Detect crashed hosts by the fence_kdump messages their dump "
              "kernel sends.")
