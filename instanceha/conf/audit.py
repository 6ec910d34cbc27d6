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
]

register_opts, list_opts = _group.make(GROUP, OPTS,
                                       title="Fencing readiness audit")
