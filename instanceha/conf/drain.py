from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group

GROUP = "drain"
#: what makes a running server not live-migratable (see doc/drain.md)
BLOCKERS = ("pci", "vgpu", "accelerator", "vtpm")

OPTS = [
    cfg.IntOpt("concurrency", default=2, min=1,
               help="Migrations in flight at once from one host being "
                    "drained (live and cold together)."),
    cfg.IntOpt("max_concurrent", default=4, min=1,
               help="Migrations in flight at once across every host being "
                    "drained; caps [drain] concurrency when several hosts "
                    "drain together."),
    cfg.StrOpt("shutoff", default="migrate",
               choices=[("migrate", "cold-migrate stopped servers and "
                                    "confirm the migration: they stay "
                                    "stopped"),
                        ("leave", "leave stopped servers on the host and "
                                  "report them")],
               help="What a drain does with the host's stopped (SHUTOFF) "
                    "servers."),
    cfg.StrOpt("opt_out_tag", default="instanceha:no-drain",
               help="A server with this tag, or with this metadata key set "
                    "to true, is never moved by a drain: the preflight "
                    "refuses the drain and names it (with --force it is "
                    "left on the host and reported). Nova tags cannot hold "
                    "'/' or ','."),
    cfg.IntOpt("ha_reserve_hosts", default=1, min=0,
               help="HA admission: after the drain, the hosts left (in each "
                    "availability zone the drained servers go to) must "
                    "still be able to take the servers of their N largest "
                    "hosts if those failed. 0 turns the check off."),
    cfg.IntOpt("stuck_timeout", default=300, min=1,
               help="Seconds a migration may go without progress before it "
                    "is counted as stuck and [drain] stuck_action is "
                    "taken."),
    cfg.StrOpt("stuck_action", default="abort",
               choices=[("abort", "abort the live migration and retry it "
                                  "later"),
                        ("force_complete", "force the live migration to "
                                           "complete (the guest is paused "
                                           "for the last copy)")],
               help="What is done with a live migration stuck for [drain] "
                    "stuck_timeout seconds."),
    cfg.IntOpt("stuck_retries", default=2, min=0,
               help="How many times a server whose migration got stuck is "
                    "tried again before it is left on the host and "
                    "reported."),
    cfg.IntOpt("poll_interval", default=5, min=1,
               help="Seconds between two looks at a draining host: its "
                    "servers, the migrations in flight, what may be sent "
                    "next."),
    cfg.ListOpt("live_blockers", default=list(BLOCKERS),
                item_type=types.String(choices=list(BLOCKERS)),
                help="What makes the preflight count a running server as "
                     "not live-migratable: 'pci' (flavor extra spec "
                     "pci_passthrough:alias), 'vgpu' (resources:VGPU), "
                     "'accelerator' (accel:device_profile), 'vtpm' (flavor "
                     "hw:tpm_version/hw:tpm_model or image "
                     "hw_tpm_version/hw_tpm_model). Drop one your Nova "
                     "live-migrates."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Draining a host for planned maintenance")


def validate(conf):
    """The opt-out tag must be something Nova accepts as a tag."""
    tag = conf[GROUP].opt_out_tag
    if not tag or tag != tag.strip() or "/" in tag or "," in tag \
            or len(tag) > 60:
        raise cfg.Error("[%s] opt_out_tag: %r is not a Nova server tag "
                        "(1 to 60 characters, no '/' or ',', no blanks "
                        "around it)" % (GROUP, tag))
