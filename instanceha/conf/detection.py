from oslo_config import cfg

from instanceha.conf import _group

GROUP = "detection"
OPTS = [
    cfg.FloatOpt("poll_interval", mutable=True,
                 default=10.0, min=0.1, max=3600,
                 help="Seconds between reconciler passes, at most: each "
                      "pass starts between 0.8 and 1 times this after the "
                      "last one ended, at random, so that reads fall at "
                      "varied times after Nova's heartbeats and Nova's "
                      "clock is pinned closely (compute heartbeats often "
                      "come in step). Each pass is one os-services call. "
                      "Polling is the safety net for missed "
                      "events; a dead compute sends no notification, so this "
                      "plus 'delta' bounds detection time without events."),
    cfg.FloatOpt("delta", mutable=True, default=30.0, min=1, max=86400,
                 help="A compute service whose updated_at is older than this "
                      "many seconds is suspect even if Nova still says up. "
                      "Age is measured on Nova's clock, not this node's: "
                      "Nova's now is estimated from the updated_at of the "
                      "services Nova calls up, taken from the clock most "
                      "rows are stamped with, so a minority of writers "
                      "running ahead (one nova-conductor without NTP) "
                      "cannot make the other hosts look stale. "
                      "Keep it above Nova's report_interval; too low fences "
                      "hosts that are merely slow to report."),
    cfg.FloatOpt("grace_period", mutable=True, default=10.0, min=0, max=3600,
                 help="Seconds a host stays suspect before it is fenced, so a "
                      "late heartbeat can clear it. Lower means faster "
                      "recovery and more risk of fencing a live host."),
    cfg.FloatOpt("clock_skew_warning", mutable=True,
                 default=60.0, min=1, max=86400,
                 help="Log a clock_skew warning when this node's clock and "
                      "Nova's differ by more than this many seconds "
                      "(estimated each pass as local time minus Nova's now "
                      "as the service rows' updated_at show it; it reads "
                      "within a fraction of a poll interval of the true "
                      "difference). Staleness "
                      "('delta') is judged on Nova's clock, so skew does not "
                      "make live hosts look dead; but this node's timestamps "
                      "(logs, journal, disabled_reason) no longer line up "
                      "with Nova's. Too low warns on normal report lag; too "
                      "high hides a broken NTP setup. Fix NTP rather than "
                      "raising it."),
    cfg.FloatOpt("writer_skew_warning", mutable=True,
                 default=5.0, min=0.5, max=86400,
                 help="Log a writer_clock_skew warning when some service "
                      "rows are stamped by a clock more than this many "
                      "seconds ahead of or behind the clock of most rows "
                      "(Nova's heartbeats are written by nova-conductor; "
                      "one conductor without NTP stamps the rows it "
                      "writes). The skew is always shown in status "
                      "(writer_skew_ahead, writer_skew_behind). Nova's "
                      "now is taken from the majority, so a host written "
                      "ahead has its death seen that much later, one "
                      "written behind that much earlier: above 'delta' "
                      "minus Nova's report_interval, its live host looks "
                      "stale. Fix NTP rather than raising it."),
    cfg.FloatOpt("full_report_interval", mutable=True,
                 default=60.0, min=0, max=86400,
                 help="Seconds between reconciler passes that hand the "
                      "engine every compute host's row. The passes between "
                      "hand over only the rows whose verdict changed "
                      "(heartbeating, lost, forced down; status, disabled "
                      "reason, zone, aggregates), and every row of a host "
                      "not quietly active (being proven dead or recovered, "
                      "watched by its agent, a BMC reading Off or a kdump "
                      "message pending): at thousands of hosts most rows "
                      "say nothing new. 0 hands over every row at every "
                      "pass."),
    cfg.BoolOpt("stale_reread", mutable=True, default=True,
                help="Read a host's compute service row again, alone, at "
                     "the moment its heartbeat goes stale ('delta' after "
                     "its updated_at, on Nova's clock as estimated) when "
                     "that moment falls between two reconciler passes, "
                     "instead of waiting for the next pass: a dead "
                     "compute is seen up to a poll_interval sooner. Only "
                     "hosts whose heartbeat is late are read this way (a "
                     "live compute heartbeats first), each with one small "
                     "os-services call filtered by host. The row is judged "
                     "exactly as a pass judges it. Off: staleness is seen "
                     "at the passes only."),
    cfg.IntOpt("stale_reread_limit", mutable=True, default=50, min=1,
               max=100000,
               help="At most this many hosts are planned for a re-read "
                    "between two passes ('stale_reread'): the earliest to "
                    "go stale; the others are judged at the next pass. "
                    "Bounds the calls to Nova when many hosts die at "
                    "once."),
    cfg.FloatOpt("tick_interval", mutable=True, default=1.0, min=0.05, max=60,
                 help="How often the engine re-evaluates time-based decisions "
                      "(retry after back-off, cleanup re-check, a decision "
                      "held by the threshold). A suspect host's decision "
                      "(the grace period's end) is taken at its own "
                      "deadline, not on a tick."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Failure detection")
