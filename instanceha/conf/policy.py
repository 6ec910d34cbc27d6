from oslo_config import cfg

from instanceha.conf import _group

GROUP = "policy"
OPTS = [
    cfg.IntOpt("threshold", default=50, min=0, max=100,
               help="When more than this percentage of compute hosts look "
                    "dead at once, fence and evacuate none of them: that is a "
                    "network partition or a control-plane fault, not host "
                    "failures. 100 disables the check."),
    cfg.IntOpt("min_hosts_for_threshold", default=2, min=1, max=100000,
               help="The threshold applies only when at least this many "
                    "compute hosts are known."),
    cfg.BoolOpt("recover_disabled_hosts", default=False,
                help="Recover (fence, evacuate) a compute service that "
                     "someone else disabled (disabled_reason not starting "
                     "with 'instanceha:'). Off: such a host is left to its "
                     "operator and shown as 'disabled by operator: "
                     "<reason>'. On: it is recovered, and when it comes "
                     "back its original disabled state and reason are "
                     "restored instead of enabling it."),
    cfg.FloatOpt("resume_boot_time", default=300.0, min=0, max=86400,
                 help="Seconds a host gets to boot and report in after it "
                      "leaves maintenance or a suspension (operator resume "
                      "or expiry), on top of the grace period, before it "
                      "can be fenced. Too short powers off a host that is "
                      "still booting after planned work."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Safety policy")
