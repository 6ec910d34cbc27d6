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
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Safety policy")
