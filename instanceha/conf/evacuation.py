from oslo_config import cfg

from instanceha.conf import _group

GROUP = "evacuation"
OPTS = [
    cfg.IntOpt("concurrency", mutable=True, default=10, min=1, max=1000,
               help="Evacuations of one host's servers in flight at once. "
                    "Higher is faster but loads the scheduler and the "
                    "destination hosts more."),
    cfg.FloatOpt("server_timeout", default=600.0, min=1, max=86400,
                 help="Seconds one server's evacuation may take (migration "
                      "reaching 'done') before it counts as failed."),
    cfg.FloatOpt("poll_interval", default=1.0, min=0.05, max=60,
                 help="Seconds between checks of evacuation progress."),
    cfg.FloatOpt("event_fallback_interval", default=10.0, min=0.1,
                 max=3600,
                 help="While Nova's notifications arrive (see "
                      "[notifications]), evacuations are tracked by their "
                      "instance.* events and Nova's migration list is read "
                      "only this often, as a safety net for lost events. "
                      "Without notifications, poll_interval applies."),
    cfg.StrOpt("microversion", default="2.94",
               help="Compute API microversion used for the evacuate call. "
                    "From 2.95 Nova leaves evacuated servers SHUTOFF; 2.94 "
                    "keeps an ACTIVE server ACTIVE."),
    cfg.FloatOpt("retry_backoff", mutable=True,
                 default=30.0, min=0.1, max=86400,
                 help="Seconds before evacuation is retried when no host had "
                      "capacity; doubled after each attempt up to "
                      "retry_backoff_max."),
    cfg.FloatOpt("retry_backoff_max", mutable=True,
                 default=600.0, min=0.1, max=86400,
                 help="Upper bound of the no-capacity retry delay."),
    cfg.IntOpt("max_attempts", mutable=True, default=5, min=1, max=1000,
               help="Evacuation attempts for a host (no capacity) before it "
                    "is left 'failed' for an operator. Bounds retry loops."),
    cfg.IntOpt("server_retries", default=3, min=0, max=100,
               help="Times one server's evacuation is sent again after a "
                    "failure a retry may cure: its destination died during "
                    "the rebuild (sent again only once that host is forced "
                    "down, so it never runs twice at once), or Nova's API "
                    "failed (5xx, unreachable). A server that exhausts them "
                    "counts as failed and its host goes 'failed'. Failures "
                    "a retry cannot cure (server deleted, request refused, "
                    "rebuild error on a live host) are never retried."),
    cfg.FloatOpt("server_retry_delay", default=5.0, min=0.1, max=3600,
                 help="Seconds before a server whose rebuild failed (its "
                      "destination died) is sent again; doubled after each "
                      "retry of that server, up to retry_backoff_max. A "
                      "request Nova's API failed is sent again after the "
                      "host's other servers."),
    cfg.FloatOpt("proof_max_age", default=30.0, min=1, max=3600,
                 help="A proof of death is never reused: every evacuation "
                      "pass first proves the source host dead again (a "
                      "fresh BMC read says Off, and Nova has recorded no "
                      "heartbeat from it since it was fenced). Within a "
                      "pass, servers still to send after this many seconds "
                      "since the last proof (a wait for capacity, for the "
                      "concurrency gate, for an unanswered request) are "
                      "sent only after the host is proven dead again. A "
                      "host not proven dead gets nothing sent and is "
                      "watched again (pending: cleanup check if it reports "
                      "back, else fenced again after [policy] "
                      "resume_boot_time plus the grace period)."),
    cfg.FloatOpt("unanswered_request_wait", default=60.0, min=0, max=3600,
                 help="Seconds to wait after an evacuate request got no "
                      "answer (a timeout, a connection cut once sent, a "
                      "gateway's 502 or 504) before checking the server "
                      "and sending it again. Such a request may still be "
                      "queued in a load balancer or nova-api's backlog and "
                      "take effect later, and Nova accepts evacuating a "
                      "server that is already rebuilding: sent again too "
                      "soon, the server is rebuilt twice. Set it above the "
                      "longest time a request can wait before nova-api "
                      "handles it (load balancer queue and server "
                      "timeouts). A refused connection or an error answer "
                      "waits only the server_retry_delay back-off."),
    cfg.FloatOpt("stall_timeout", default=180.0, min=5, max=86400,
                 help="Seconds an evacuation may stay 'accepted' (no "
                      "destination has claimed it) before instanceha asks "
                      "Nova's instance actions whether the conductor sent "
                      "it to a compute that never took it. It is then sent "
                      "again only if every host that could have been its "
                      "destination (schedulable when it was sent, down "
                      "now) is forced down. Too short risks judging a slow "
                      "but live destination; a known destination (from "
                      "the migration or a notification) needs no wait."),
    cfg.BoolOpt("leave_disabled", default=False,
                help="When a fenced host returns and Nova has completed every "
                     "evacuation migration from it, unset forced_down but "
                     "leave the service disabled for an operator to enable."),
    cfg.FloatOpt("cleanup_check_interval", mutable=True,
                 default=5.0, min=0.1, max=3600,
                 help="Seconds between checks that a returned host's "
                      "evacuation migrations are all 'completed'."),
    cfg.FloatOpt("stale_rebuild_wait", default=120.0, min=0, max=86400,
                 help="A host that died with rebuilds cast to it (servers "
                      "instanceha then sent elsewhere) runs them when its "
                      "compute starts again; Nova then sets those servers "
                      "to error although they run elsewhere. When such a "
                      "host returns, instanceha waits up to this many "
                      "seconds for each old rebuild to run, resets a "
                      "server it put in error back to active, then puts "
                      "the host back in service."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Evacuation")
