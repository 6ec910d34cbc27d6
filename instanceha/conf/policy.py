from oslo_config import cfg

from instanceha.conf import _group

GROUP = "policy"
OPTS = [
    cfg.IntOpt("threshold", mutable=True, default=50, min=0, max=100,
               help="When more than this percentage of compute hosts look "
                    "dead at once, fence and evacuate none of them: that is a "
                    "network partition or a control-plane fault, not host "
                    "failures. 100 disables the check."),
    cfg.IntOpt("min_hosts_for_threshold", mutable=True,
               default=2, min=1, max=100000,
               help="The threshold applies only when at least this many "
                    "compute hosts are known (per zone, with "
                    "threshold_per_zone)."),
    cfg.FloatOpt("storm_window", mutable=True, default=600.0, min=0, max=86400,
                 help="Seconds a host still counts as lost for the "
                      "threshold after its recovery ended (evacuated) or "
                      "failed. Hosts dying a few seconds or minutes apart "
                      "(a rack losing power host by host) then count as "
                      "one storm. 0 counts only hosts being recovered now; "
                      "too short lets a slow storm fence more hosts than "
                      "the threshold allows."),
    cfg.BoolOpt("threshold_per_zone", mutable=True, default=False,
                help="Also apply the threshold within each availability "
                     "zone (Nova's service zone): a zone losing more than "
                     "'threshold' percent of its hosts holds fencing there "
                     "even when the cloud as a whole is below it."),
    cfg.BoolOpt("threshold_per_aggregate", mutable=True, default=False,
                help="Also apply the threshold within each Nova host "
                     "aggregate (a rack, a power domain, a top-of-rack "
                     "switch modelled as an aggregate): an aggregate losing "
                     "more than 'threshold' percent of its hosts holds "
                     "fencing of its hosts. Needs read access to Nova's "
                     "os-aggregates API; read once per reconcile pass."),
    cfg.IntOpt("fence_rate_hosts", default=20, min=1, max=100000,
               help="At most this many hosts are fenced per "
                    "fence_rate_interval (a token bucket, bursts up to "
                    "this many). Hosts beyond it wait in 'suspect', in "
                    "order of detection, with a reason saying so."),
    cfg.FloatOpt("fence_rate_interval", default=60.0, min=1, max=86400,
                 help="Seconds over which fence_rate_hosts hosts may be "
                      "fenced."),
    cfg.IntOpt("flap_count", mutable=True, default=3, min=0, max=1000,
               help="A host lost this many times within flap_window (it "
                    "went down and came back) is held in 'suspect' on its "
                    "next loss instead of being fenced again and again, "
                    "and reported; 'instanceha resume HOST' recovers it. "
                    "0 disables the check."),
    cfg.FloatOpt("flap_window", mutable=True, default=600.0, min=1, max=86400,
                 help="Seconds over which losses count for flap_count."),
    cfg.BoolOpt("recover_disabled_hosts", mutable=True, default=False,
                help="Recover (fence, evacuate) a compute service that "
                     "someone else disabled (disabled_reason not starting "
                     "with 'instanceha:'). Off: such a host is left to its "
                     "operator and shown as 'disabled by operator: "
                     "<reason>'. On: it is recovered, and when it comes "
                     "back its original disabled state and reason are "
                     "restored instead of enabling it."),
    cfg.FloatOpt("resume_boot_time", mutable=True,
                 default=300.0, min=0, max=86400,
                 help="Seconds a host gets to boot and report in after it "
                      "leaves maintenance or a suspension (operator resume "
                      "or expiry), on top of the grace period, before it "
                      "can be fenced. Too short powers off a host that is "
                      "still booting after planned work."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Safety policy")
