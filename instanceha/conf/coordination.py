"""[coordination]: several replicas, one of which acts (doc/replicas.md)."""

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "coordination"
OPTS = [
    cfg.StrOpt("backend_url", default=None, secret=True,
               help="tooz URL of the coordination backend shared by every "
                    "replica of this instanceha, e.g. redis://host:6379 "
                    "or etcd3+http://host:2379 (the etcd3gw driver). Unset "
                    "(default): this process is the only one and acts "
                    "alone. Set: the replicas elect one member that acts "
                    "for every host; the others stand by, connected and "
                    "ready, and one of them takes over when the acting "
                    "member's lease runs out. All replicas must share one "
                    "[journal] connection (MySQL or PostgreSQL). A backend "
                    "that cannot be reached at start stops the start with "
                    "a one-line error (exit status 2)."),
    cfg.StrOpt("group", default="instanceha",
               help="Name of the tooz group and of the leadership lock: "
                    "the replicas serving one cloud share it; two clouds "
                    "using one backend need two names."),
    cfg.IntOpt("lease", default=15, min=2, max=600,
               help="Seconds the acting member's leadership lasts at the "
                    "backend without a renewal. A member that dies (or "
                    "freezes) is replaced about twice this long after its "
                    "last renewal: the lock expires after one lease, and "
                    "the newly elected member waits one more before it "
                    "acts, in case the backend forgot the lease early "
                    "(a Redis restart). Shorter is a faster takeover, "
                    "longer tolerates longer backend hiccups. Whole "
                    "seconds: etcd leases are."),
    cfg.FloatOpt("margin", default=5.0, min=0.5, max=300,
                 help="The acting member stops acting when this many "
                      "seconds of its lease are left without a renewal, "
                      "and exits (its service manager restarts it as a "
                      "standby). It covers clock-rate differences between "
                      "this host and the backend and the time a request "
                      "takes to reach Nova or a BMC. Must be below "
                      "'lease'."),
    cfg.FloatOpt("heartbeat_interval", default=2.0, min=0.1, max=60,
                 help="Seconds between two renewals of the membership and, "
                      "on the acting member, of the leadership; also how "
                      "often a standby tries to take the leadership. At "
                      "most half of lease - margin, so that one failed "
                      "renewal does not end the leadership."),
]


def validate(conf):
    c = conf.coordination
    if c.margin >= c.lease:
        raise cfg.Error("[coordination] margin (%s) must be below lease (%s)"
                        % (c.margin, c.lease))
    if c.heartbeat_interval > (c.lease - c.margin) / 2.0:
        raise cfg.Error("[coordination] heartbeat_interval (%s) must be at "
                        "most half of lease - margin (%s)"
                        % (c.heartbeat_interval, (c.lease - c.margin) / 2.0))


register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Coordination of several replicas",
    help_text="With backend_url set, the replicas elect one acting member "
              "through tooz; see doc/replicas.md.")
