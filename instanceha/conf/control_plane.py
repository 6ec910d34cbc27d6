from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group

GROUP = "control_plane"
BINARIES = ("nova-scheduler", "nova-conductor")
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Check the control plane an evacuation needs (Nova's "
                     "API, nova-scheduler, nova-conductor, Placement) and "
                     "hold every new fencing decision while it is not "
                     "ready; work already in flight finishes. Disabling "
                     "it lets instanceha power off hosts whose servers "
                     "then cannot be rebuilt anywhere: the worst outcome "
                     "of an HA service."),
    cfg.FloatOpt("poll_interval", default=10.0, min=0.1, max=3600,
                 help="Seconds between checks. Each check is one "
                      "os-services call per service in 'services' and one "
                      "Placement read. Longer means a control-plane fault "
                      "is noticed later, and hosts may be fenced in "
                      "between."),
    cfg.IntOpt("failures", default=3, min=1, max=100,
               help="Consecutive failed Placement checks after which the "
                    "control plane counts as not ready. Fewer failures "
                    "keep the last verdict, so one transient error does "
                    "not flap the status. 1 holds fencing on any single "
                    "error; higher lets fencing go on for about failures "
                    "x poll_interval while Placement is unreachable. "
                    "Nova's own API is not counted this way: one failed "
                    "call holds fencing at once (see view_max_age)."),
    cfg.FloatOpt("view_max_age", default=0.0, min=0, max=3600,
                 help="A power-off needs a fresh, whole view of Nova: the "
                      "last read of Nova's services (the reconciler's "
                      "or this monitor's) succeeded at most this many "
                      "seconds ago, and no call to Nova's API failed "
                      "(HTTP 5xx, no answer) since that read started. "
                      "Otherwise every new fencing decision is held: "
                      "during an API outage a power-off only lengthens "
                      "the outage, since nothing can be isolated or "
                      "evacuated until the API answers. 0: one and a half "
                      "[detection] poll_interval. Higher lets a host be "
                      "powered off on an older view of Nova; below the "
                      "poll interval holds fencing between passes."),
    cfg.ListOpt("services", default=list(BINARIES),
                item_type=types.String(choices=BINARIES),
                help="Nova services of which at least one must be up "
                     "(judged like compute heartbeats: Nova's state, and "
                     "staleness on Nova's clock against [detection] "
                     "delta). A service Nova does not list at all (a "
                     "cells v2 layout whose super-conductor has no row) is "
                     "not judged. Removing one lets fencing go on while "
                     "no evacuation can be scheduled or carried out."),
    cfg.BoolOpt("check_placement", default=True,
                help="Check that Placement answers (any answer below HTTP "
                     "500 to a small read); unanswered 'failures' times in "
                     "a row, fencing is held: the scheduler cannot place "
                     "any evacuated server. With no Placement endpoint in "
                     "the catalog or clouds.yaml the check is skipped, "
                     "with a warning. Disabling it lets fencing go on "
                     "while no server can be placed."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Control-plane readiness",
    help_text="No fencing while the services an evacuation needs are down.")
