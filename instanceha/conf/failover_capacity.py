from oslo_config import cfg

from instanceha.conf import _group

GROUP = "failover_capacity"
OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Measure, every 'interval' seconds, how many of the "
                     "largest hosts of each availability zone, host "
                     "aggregate and reserved pool (and of the cloud) can "
                     "fail at once with every server the recovery policy "
                     "would evacuate still placed on the others, by "
                     "Placement's counts ([capacity] resources and "
                     "headroom_percent, reserved hosts as configured in "
                     "[reserved_hosts]). Shown by 'instanceha capacity', "
                     "in status and as instanceha_failover_capacity_hosts "
                     "in /metrics. Each measure reads every server of the "
                     "cloud from Nova (its pages of 1,000), the host "
                     "aggregates and Placement, and changes nothing; its "
                     "CPU is about 50 microseconds per server (20 s for "
                     "400,000 servers), which is why it is off unless "
                     "turned on. Off: nothing is read or shown."),
    cfg.FloatOpt("interval", default=600.0, min=10.0,
                 help="Seconds between two measures (and after a failed "
                      "read). Its reads are those of a list of every "
                      "server: on a large cloud, keep it in minutes."),
    cfg.IntOpt("min_priority", default=None,
               help="Count only servers whose evacuation priority "
                    "([recovery] priority_key, see doc/policy.md) is at "
                    "least this: the loss of lower ones may leave them "
                    "waiting for capacity without lowering the measure. "
                    "Unset: every server the policy would evacuate "
                    "counts."),
    cfg.IntOpt("max_hosts", default=100, min=1,
               help="Never search above this many failed hosts per scope: "
                    "a scope that can lose more reads 'at least "
                    "max_hosts' (capped)."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Failover capacity: how many hosts can fail at once")
