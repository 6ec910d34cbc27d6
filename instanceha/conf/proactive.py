from oslo_config import cfg

from instanceha.conf import _group

GROUP = "proactive"

OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Proactive HA: the fencing readiness audit ([audit] "
                     "enabled) also reads each host's hardware health from "
                     "its BMC (Redfish Status.Health of the system, its "
                     "power supplies, fans and memory; IPMI sensor states "
                     "and event log), and a host degraded at [proactive] "
                     "severity is drained into maintenance through the "
                     "operator's drain (its preflight and HA admission). "
                     "Such a host is never fenced for its health, and is "
                     "not resumed when its health recovers: the operator "
                     "resumes it."),
    cfg.StrOpt("severity", default="Critical",
               choices=[("Warning", "drain a host with any component "
                                    "Warning or Critical"),
                        ("Critical", "drain only a host with a component "
                                     "Critical")],
               help="The worst hardware health at which a host is "
                    "drained."),
    cfg.IntOpt("max_concurrent", default=1, min=1,
               help="Proactive drains under way at once (hosts in "
                    "draining that proactive HA drained); a further "
                    "degraded host waits for one to end."),
    cfg.IntOpt("max_per_interval", default=2, min=1,
               help="Proactive drains started per [proactive] "
                    "rate_interval at most; a further degraded host "
                    "waits for the window to move on."),
    cfg.IntOpt("rate_interval", default=3600, min=1,
               help="Seconds of the window [proactive] max_per_interval "
                    "counts drains over."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Proactive HA: draining hosts whose hardware "
                       "degrades")


def validate(conf):
    """Proactive HA reads the health the audit reads: it needs it on."""
    if conf[GROUP].enabled and not conf.audit.enabled:
        raise cfg.Error("[%s] enabled needs [audit] enabled: the hardware "
                        "health is read by the fencing readiness audit"
                        % GROUP)
