"""[audit]: the fencing readiness audit (can every host still be fenced?)."""

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "audit"
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Check every compute host Nova knows, at start and "
                     "every 'interval' seconds: it has a fencing inventory "
                     "entry, its BMC answers a power-state read with the "
                     "configured credentials (no power action), and the "
                     "BMC does not report Off while Nova reports the "
                     "compute up (an entry pointing at another machine). "
                     "A host that fails is 'unprotected': shown in status, "
                     "GET /status and /metrics, and logged once per "
                     "change."),
    cfg.FloatOpt("interval", default=300.0, min=1, max=86400,
                 help="Seconds between audits (each one jittered by up "
                      "to 'jitter' of this, so BMCs are not all read in the "
                      "same second by every replica). The first audit runs "
                      "at start."),
    cfg.FloatOpt("jitter", default=0.1, min=0, max=0.5,
                 help="Fraction of 'interval' by which each wait is "
                      "randomly lengthened or shortened."),
    cfg.IntOpt("concurrency", default=8, min=1, max=256,
               help="BMCs read at once during an audit."),
    cfg.FloatOpt("hosts_per_second", default=20.0, min=0, max=10000,
                 help="At most this many hosts audited per second (each "
                      "costs a power-state and an identity read per fencing "
                      "method), so that an audit of thousands of BMCs never "
                      "takes the process from detection: at 5,000 hosts one "
                      "audit then takes about 4 minutes. Keep it above the "
                      "number of hosts divided by 'interval'. 0: no limit "
                      "(only 'concurrency' bounds the reads)."),
    cfg.FloatOpt("max_pause", default=600.0, min=0, max=86400,
                 help="While hosts are in recovery (suspect, fencing, "
                      "fenced, evacuating), the audit's and the power "
                      "watch's BMC reads wait, so that a storm keeps the "
                      "process and the network; at most this many seconds "
                      "in a row. After that they go on at "
                      "'hosts_per_second', skipping only the hosts "
                      "instanceha is handling (not running untouched) and "
                      "those sharing a BMC with one, until no host is in "
                      "recovery. A host held by its agent's veto stays "
                      "suspect as long as the veto lasts: without this "
                      "bound no BMC of the cloud would be checked "
                      "meanwhile (a rotated password, a recabled BMC "
                      "found only on the day of a failure), and the power "
                      "watch would see no power loss. 0: never wait, only "
                      "skip those hosts (the audit then competes with a "
                      "storm's recoveries for the process)."),
    cfg.FloatOpt("power_watch_interval", default=0.0, min=0, max=3600,
                 help="0 (default): off. Else read every host's BMC power "
                      "state this often (a read, no action). A host whose "
                      "BMC goes from On to Off (power or PSU loss) has its "
                      "heartbeat judged with power_off_delta instead of "
                      "[detection] delta, and with the heartbeat lost it is "
                      "fenced without the grace period ([fencing] "
                      "power_evidence): recovery starts within about "
                      "power_off_delta instead of delta + grace_period. "
                      "Costs one BMC read per host per interval."),
    cfg.FloatOpt("power_off_delta", default=20.0, min=1, max=86400,
                 help="With power_watch_interval: a host whose BMC reports "
                      "Off counts as lost once Nova has no heartbeat from "
                      "it for this many seconds. Must stay above Nova's "
                      "report_interval (10 s by default) with margin: a "
                      "host whose inventory entry points at a machine that "
                      "is off keeps heartbeating and must never look "
                      "lost."),
]

register_opts, list_opts = _group.make(GROUP, OPTS,
                                       title="Fencing readiness audit")
