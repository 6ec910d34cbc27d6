from oslo_config import cfg

from instanceha.conf import _group

GROUP = "api"
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Serve the operator API: GET /status, /healthz, "
                     "/metrics (Prometheus) and POST /hosts/<host>/suspend, "
                     "/maintenance, /resume. It has no authentication: keep "
                     "it on a loopback or management address."),
    cfg.HostAddressOpt("listen_address", default="127.0.0.1",
                       help="Address the operator API binds to. Anyone who "
                            "can reach it can suspend or resume recovery of "
                            "a host."),
    cfg.PortOpt("port", default=7411,
                help="TCP port of the operator API (0 picks a free port; "
                     "the chosen one is written to the status file)."),
    cfg.FloatOpt("stale_after", default=120.0, min=1, max=86400,
                 help="/healthz answers 503 when the reconciler has not "
                      "completed a pass for this many seconds (Nova "
                      "unreachable or the engine stuck)."),
    cfg.FloatOpt("max_suspend_seconds", default=604800.0, min=1,
                 help="Longest suspension, in seconds, that POST "
                      "/hosts/<host>/suspend (and 'instanceha suspend "
                      "--seconds') accepts; longer ones are refused, so a "
                      "typo cannot switch a host's HA off for years. A "
                      "suspension without end needs an explicit "
                      "{\"forever\": true} ('--forever'). Default: 7 days."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Operator API")
