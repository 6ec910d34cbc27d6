from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group

GROUP = "recovery"
OPTS = [
    # -- evacuable tagging (instanceha.policy.evacuable) ----------------------
    cfg.BoolOpt("evacuable_tagging", mutable=True, default=False,
                help="Evacuate only the servers tagged evacuable. Off: every "
                     "server of a lost host is evacuated. On: the key "
                     "evacuable_key is looked up on the server (metadata or "
                     "tag), its image (property or tag), its flavor (extra "
                     "spec) and its host's aggregates (metadata); the "
                     "nearest that says true or false wins. See "
                     "doc/policy.md."),
    cfg.StrOpt("evacuable_key", mutable=True, default="evacuable",
               help="The metadata key, image property, flavor extra spec "
                    "and tag that marks a server evacuable. Matched "
                    "exactly (case-sensitive, no substring match); values "
                    "'true' or 'false' in any case, anything else is "
                    "reported and ignored."),
    cfg.ListOpt("evacuable_sources", mutable=True,
                default=["server", "image", "flavor", "aggregate"],
                item_type=types.String(choices=["server", "image", "flavor",
                                                "aggregate"]),
                help="Where evacuable_key is looked up (precedence is "
                     "always server, image, flavor, aggregate). Leave out "
                     "'server' so that only operators (image, flavor and "
                     "aggregate owners) decide: server metadata and tags "
                     "are writable by the server's owner."),
    cfg.BoolOpt("evacuable_when_untagged", mutable=True, default=False,
                help="With evacuable_tagging on, evacuate a server on which "
                     "no source says true or false. Off (upstream "
                     "InstanceHA's behaviour): only servers tagged true are "
                     "evacuated. On: every server is evacuated unless "
                     "tagged false."),
    # -- repair levels and suspensions (instanceha.policy.repair) -------------
    cfg.StrOpt("repair_level", mutable=True, default="evacuate",
               choices=[("none", "nothing automatic unless a nearer scope "
                                 "says evacuate"),
                        ("evacuate", "evacuate servers of a fenced host "
                                     "unless a nearer scope says none")],
               help="The repair level of a server when neither the server's "
                    "metadata, its host's aggregates nor the global "
                    "aggregate set repair_key."),
    cfg.StrOpt("repair_key", mutable=True, default="instanceha:repair",
               help="Metadata key (server and host aggregate) that sets the "
                    "repair level: 'none' or 'evacuate'. A malformed value "
                    "counts as 'none' at that scope and is reported."),
    cfg.StrOpt("suspend_key", mutable=True,
               default="instanceha:suspended_until",
               help="Metadata key (server and host aggregate) that suspends "
                    "automatic repair: an ISO-8601 time (UTC unless it has "
                    "an offset) or 'forever'. Effective at any scope until "
                    "it expires; a malformed value suspends until fixed."),
    cfg.BoolOpt("remove_expired_markers", mutable=True, default=True,
                help="Remove a suspension marker (suspend_key) whose time "
                     "has passed from the server or aggregate metadata "
                     "where it was found, when a recovery consults it. The "
                     "value is read again just before the removal and a "
                     "marker changed since (renewed by an operator) is "
                     "left alone. Off: expired markers stay, are ignored "
                     "and reported at each recovery."),
    cfg.StrOpt("global_aggregate", mutable=True, default=None,
               help="Name of a host aggregate whose metadata (repair_key, "
                    "suspend_key) is the global scope: the farthest, "
                    "applying to every server. Its hosts do not matter; "
                    "it can have none. Unset: no global scope, "
                    "repair_level is the default."),
    cfg.BoolOpt("server_may_raise_level", mutable=True, default=True,
                help="A server's own repair_key may raise its level above "
                     "the level its aggregates or the global scope give "
                     "(nearest scope wins). Off: a server may only lower "
                     "it; server metadata is writable by the server's "
                     "owner."),
    # -- order (instanceha.policy.order) --------------------------------------
    cfg.StrOpt("priority_key", mutable=True, default="instanceha:priority",
               help="Metadata key (or flavor extra spec, see "
                    "priority_sources) holding a server's evacuation "
                    "priority: an integer, higher first, 0 when unset or "
                    "malformed. Equal priorities go oldest server first."),
    cfg.ListOpt("priority_sources", mutable=True, default=["server"],
                item_type=types.String(choices=["server", "flavor"]),
                help="Where priority_key is looked up; the server's "
                     "metadata wins over the flavor's extra spec when both "
                     "are listed. Use only 'flavor' so that tenants cannot "
                     "raise their own servers' priority."),
    cfg.IntOpt("max_inflight", mutable=True, default=0, min=0, max=100000,
               help="Evacuations in flight across all hosts at once "
                    "([evacuation] concurrency is the limit per host). "
                    "0: no cap across hosts."),
    cfg.BoolOpt("strict_priority", mutable=True, default=False,
                help="Never send a server while one of higher priority "
                     "waits (for its host's limit). Off: servers of other "
                     "hosts go ahead when a host is at its limit."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Which servers are recovered, and in what order")


def validate(conf):
    """Keys must be names; the repair and suspension keys must differ."""
    r = conf[GROUP]
    for name in ("evacuable_key", "repair_key", "suspend_key",
                 "priority_key"):
        value = getattr(r, name)
        if not value or value != value.strip():
            raise cfg.Error("[%s] %s: must be a non-empty name without "
                            "blanks around it, not %r" % (GROUP, name, value))
    if r.repair_key == r.suspend_key:
        raise cfg.Error("[%s] repair_key and suspend_key must differ"
                        % GROUP)
    if r.evacuable_tagging and not r.evacuable_sources:
        raise cfg.Error("[%s] evacuable_tagging is on but "
                        "evacuable_sources is empty" % GROUP)
