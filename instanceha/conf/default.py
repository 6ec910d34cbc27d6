from oslo_config import cfg

from instanceha.conf import _group

OPTS = [
    cfg.StrOpt("cloud", default="instanceha",
               help="Name of the cloud entry in clouds.yaml (found through "
                    "openstacksdk's usual search path or OS_CLIENT_CONFIG_FILE) "
                    "holding the admin credentials instanceha uses for Nova. "
                    "The account must be allowed to force services down and "
                    "evacuate servers."),
    cfg.StrOpt("clouds_file", default=None,
               help="Path of a clouds.yaml to read instead of openstacksdk's "
                    "search path. Keep it readable by instanceha only: it "
                    "holds credentials."),
    cfg.FloatOpt("api_timeout", default=30.0, min=1, max=600,
                 help="Seconds before a Nova API request is abandoned and "
                      "retried with back-off."),
    cfg.IntOpt("api_read_retries", default=2, min=0, max=10,
               help="Times a Nova read (GET) that failed transiently (HTTP "
                    "5xx, no answer within api_timeout, connection "
                    "refused) is sent again at once, after 0.25 s then "
                    "0.5 s ..., before the call counts as failed. An "
                    "action makes several reads, so without this a Nova "
                    "API failing a share of calls fails whole actions "
                    "into their back-off. Writes (force-down, evacuate, "
                    "...) are never re-sent here: one answered 500 may "
                    "have been applied; the engine checks Nova's state "
                    "before it asks again."),
    cfg.IntOpt("action_retries", default=10, min=1, max=1000,
               help="Attempts at an action (fence, isolate, evacuate, "
                    "cleanup check) that keeps failing with an error a "
                    "retry may cure (Nova or a BMC unreachable), with "
                    "back-off doubling up to 60 s, before its host goes to "
                    "'failed' for an operator (a cleanup check keeps "
                    "waiting). Bounds retry loops."),
    cfg.FloatOpt("nova_cache_ttl", default=60.0, min=0, max=86400,
                 help="Seconds the Nova driver keeps what changes rarely "
                      "(host aggregates and their metadata, Glance images and "
                      "their properties) before reading it again; 0 reads "
                      "it on every use. instanceha's own changes (an "
                      "aggregate metadata key it removes) are seen at once; "
                      "an operator's change may take this long to be "
                      "seen."),
    cfg.IntOpt("workers", default=8, min=1, max=256,
               help="Size of the worker pool that runs fencing, isolation, "
                    "evacuation and cleanup checks. Each host is handled by at "
                    "most one worker at a time, so this bounds how many hosts "
                    "are recovered in parallel."),
    cfg.StrOpt("status_file", default="/var/lib/instanceha/status.json",
               help="File the engine rewrites with every host's state, since "
                    "when and why, read by 'instanceha status'. Empty disables "
                    "it."),
    cfg.StrOpt("log_format", default="console", choices=["console", "json"],
               help="Log rendering: key=value lines for a terminal or journald "
                    "(console), or one JSON object per line (json)."),
    cfg.FloatOpt("watchdog_stall_timeout", default=300.0, min=10,
                 max=86400,
                 help="Seconds without a reconcile pass attempt (one that "
                      "succeeds or one that fails, e.g. Nova unreachable) "
                      "after which the engine counts as stuck. Under "
                      "systemd with WatchdogSec (etc/systemd/"
                      "instanceha.service) a stuck engine stops sending "
                      "WATCHDOG=1 and systemd restarts it. Keep it well "
                      "above [detection] poll_interval plus the time one "
                      "os-services call may take with its retries "
                      "(api_timeout); too low restarts a service that is "
                      "only slow."),
    cfg.FloatOpt("startup_retry_max_interval", default=30.0, min=1,
                 max=3600,
                 help="Longest pause, in seconds, between two attempts at "
                      "a backend that does not answer at start (the "
                      "journal database, the coordination backend): the "
                      "start waits for it, the pause doubling from 1 s up "
                      "to this, and says what it waits for in 'instanceha "
                      "status', GET /status, /healthz and systemd's "
                      "STATUS=. After a site power loss the databases may "
                      "start after instanceha; a backend that refuses (a "
                      "wrong password, an unknown driver or database) "
                      "stops the start instead (exit status 2)."),
    cfg.BoolOpt("debug", default=False,
                help="Log ignored events and every API call at debug level."),
]

register_opts, list_opts = _group.make(None, OPTS)
