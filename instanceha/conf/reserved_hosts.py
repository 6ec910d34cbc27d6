from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group
from instanceha.util.marker import MARKER

GROUP = "reserved_hosts"
OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Bring reserved hosts in when a host is lost: spare "
                     "compute hosts kept disabled (see reason_prefix and "
                     "hosts) are enabled so that the lost host's servers "
                     "have room. Off: reserved hosts are left alone."),
    cfg.StrOpt("reason_prefix", default="reserved",
               help="A disabled compute service whose disabled reason "
                    "starts with this word, followed by the end of the "
                    "reason, ':' or a blank, is a reserved host "
                    "('reserved', 'reserved: rack 4'; not 'Reserved' or "
                    "'reservedX'). Case-sensitive. Mark a host with: "
                    "openstack compute service set --disable "
                    "--disable-reason reserved HOST nova-compute"),
    cfg.ListOpt("hosts", default=[],
                help="Hosts that are reserved whenever they are disabled, "
                     "whatever their disabled reason (except one written "
                     "by instanceha). Remove a host from this list before "
                     "disabling it for maintenance, or instanceha may "
                     "bring it in."),
    cfg.ListOpt("match", default=["zone"],
                item_type=types.String(choices=["zone", "aggregate"]),
                help="What a reserved host must share with the lost host to "
                     "replace it: 'zone' (its availability zone) and/or "
                     "'aggregate' (at least one host aggregate; a lost host "
                     "in none falls back to its zone). Empty: any reserved "
                     "host in the cloud."),
    cfg.IntOpt("per_failed_host", default=1, min=1, max=1000,
               help="Reserved hosts brought in per lost host when its "
                    "servers' needs are not known (capacity preflight off "
                    "or sizes unavailable). With the preflight's figures, "
                    "as many are brought in as cover what is missing."),
    cfg.IntOpt("max_per_failed_host", default=0, min=0, max=1000,
               help="Never bring in more than this many reserved hosts for "
                    "one lost host, so that one failure cannot use up the "
                    "reserve. 0: no cap beyond the matching reserved "
                    "hosts."),
    cfg.BoolOpt("target", default=False,
                help="Aim the lost host's evacuations at the reserved hosts "
                     "brought in for it. Nova's scheduler still checks each "
                     "request (instanceha never forces a host): a server "
                     "the reserved hosts cannot take fails with "
                     "NoValidHost and waits. Off: the reserved hosts are "
                     "only enabled and the scheduler places servers "
                     "anywhere."),
    cfg.BoolOpt("return_to_reserve", default=False,
                help="Once a lost host is back in service, disable the "
                     "reserved hosts brought in for it again, with the "
                     "reason they had before (or '<reason_prefix>: "
                     "returned by instanceha'). Servers that landed on "
                     "them stay there. Off: they stay enabled."),
    cfg.ListOpt("exclude_aggregates", default=[],
                help="Host aggregates ignored by match 'aggregate' (an "
                     "aggregate holding every host, for example). "
                     "[recovery] global_aggregate is always excluded."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Reserved hosts enabled to replace a lost host")


def validate(conf):
    """The prefix must be a word that cannot match instanceha's own
    reasons; the cap cannot be below the count; target needs the feature on
    (return_to_reserve does not: hosts brought in before the feature was
    turned off are still returned)."""
    r = conf[GROUP]
    p = r.reason_prefix
    if not p or p != p.strip():
        raise cfg.Error("[%s] reason_prefix: must be a non-empty word "
                        "without blanks around it, not %r" % (GROUP, p))
    if p.startswith(MARKER) or MARKER.startswith(p):
        raise cfg.Error("[%s] reason_prefix %r would match the reasons "
                        "instanceha writes ('%s ...')" % (GROUP, p, MARKER))
    if r.max_per_failed_host and r.max_per_failed_host < r.per_failed_host:
        raise cfg.Error("[%s] max_per_failed_host (%d) is below "
                        "per_failed_host (%d)" % (
                            GROUP, r.max_per_failed_host,
                            r.per_failed_host))
    for name in list(r.hosts) + list(r.exclude_aggregates):
        if not name or name != name.strip():
            raise cfg.Error("[%s] %r is not a host or aggregate name"
                            % (GROUP, name))
    if r.target and not r.enabled:
        raise cfg.Error("[%s] target is on but enabled is off: no reserved "
                        "host is ever brought in to aim at" % GROUP)
