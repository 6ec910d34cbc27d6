from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group

GROUP = "instance_repair"
#: the repair actions, by risk (instanceha.policy.instance_repair)
ACTIONS = ("start", "hard_reboot", "cold_migrate", "rebuild")

OPTS = [
    cfg.BoolOpt("enabled", default=False,
                help="Repair single servers that break on a healthy host: "
                     "a guest that stopped by itself or crashed (Nova's "
                     "power-state sync stopped it, not a user), a server "
                     "that fell into ERROR. Found by Nova's notifications "
                     "(instance.power_off, instance.update, *.error, added "
                     "to [notifications] event_types while this is on) and "
                     "by the sweep (sweep_interval); repaired by the "
                     "engine up the ladder in actions, only on a host the "
                     "engine sees active (never one suspect, fenced, "
                     "draining or in maintenance). A user's own stop is "
                     "never undone. On, the repair levels restart, reboot, "
                     "migrate and rebuild become valid values of "
                     "[recovery] repair_key. Every attempt is journalled "
                     "and marked in the server's metadata "
                     "(instanceha:instance_repair.*); see "
                     "doc/instance-repair.md. Off: nothing is repaired."),
    cfg.ListOpt("actions",
                default=["start", "hard_reboot", "cold_migrate"],
                item_type=types.String(choices=list(ACTIONS)),
                help="The repair ladder, tried in this order while the "
                     "server stays broken, in the order of risk: 'start' "
                     "(a stopped server; level restart), 'hard_reboot' "
                     "(level reboot), 'cold_migrate' (to another host, then "
                     "start; level migrate), 'rebuild' (from its image, "
                     "losing local disks; level rebuild and allow_rebuild). "
                     "A server's repair level caps how far up it goes."),
    cfg.IntOpt("max_repairs", default=3, min=1,
               help="Repair actions one server may get within window "
                    "seconds; one more needed marks it failed, and nothing "
                    "more is tried until an operator clears it "
                    "('instanceha repair --clear SERVER')."),
    cfg.IntOpt("window", default=3600, min=60,
               help="Seconds over which max_repairs is counted; the "
                    "failures of a server older than this are forgotten "
                    "and its ladder starts again at the first action."),
    cfg.IntOpt("min_uptime", default=60, min=0,
               help="Seconds a repaired server must stay ACTIVE before the "
                    "action counts as a success; going down sooner counts "
                    "as a failure and the next action is tried."),
    cfg.IntOpt("action_timeout", default=300, min=10,
               help="Seconds one repair action may take to bring the "
                    "server ACTIVE (min_uptime comes on top); later, it "
                    "counts as failed (timeout) and the next action is "
                    "tried."),
    cfg.IntOpt("hold_count", default=20, min=0,
               help="Cloud-wide hold: this many servers breaking within "
                    "hold_window seconds hold every repair (a storage or "
                    "network outage must not turn into hundreds of "
                    "reboots), in status and metrics like the storm hold. "
                    "0 turns the absolute count off."),
    cfg.IntOpt("hold_percent", default=5, min=0, max=100,
               help="Cloud-wide hold: this percentage of the servers "
                    "watched breaking within hold_window seconds holds "
                    "every repair too (with at least hold_min_failures "
                    "servers). 0 turns the percentage off."),
    cfg.IntOpt("hold_min_failures", default=3, min=1,
               help="The hold_percent rule holds only with at least this "
                    "many servers breaking: in a small cloud one or two "
                    "are already several percent."),
    cfg.IntOpt("hold_window", default=600, min=10,
               help="Seconds within which breaking servers count towards "
                    "the cloud-wide hold (hold_count, hold_percent)."),
    cfg.BoolOpt("allow_rebuild", default=False,
                help="Allow the 'rebuild' action (from the server's image: "
                     "its local disks are lost). Besides this, 'rebuild' "
                     "must be in actions and the server's repair level "
                     "must be rebuild."),
    cfg.ListOpt("excluded_projects", default=[],
                help="Project ids whose servers instanceha never repairs "
                     "nor evacuates: services that fail over by themselves "
                     "(the Octavia amphorae's project, for one); repairing "
                     "or moving their servers behind their back breaks "
                     "them. Applies to both paths, whether or not instance "
                     "repair is enabled: instance repair, and the host "
                     "path (a lost host's such servers stay on it, "
                     "journalled as skipped with the reason)."),
    cfg.ListOpt("excluded_tags", default=[],
                help="Server tags, or tags of the server's image, that keep "
                     "a server out of instance repair and out of "
                     "evacuation, for service-owned servers (Octavia tags "
                     "its amphora image with its amp_image_tag, e.g. "
                     "'amphora'). Applies to both paths, whether or not "
                     "instance repair is enabled; set, the host path reads "
                     "the Glance image of each server it evacuates."),
    cfg.IntOpt("sweep_interval", default=60, min=5,
               help="Seconds between two sweeps of Nova's SHUTOFF and "
                    "ERROR servers and their instance actions: the "
                    "fallback that finds a broken server whose "
                    "notification was lost (or every one, without "
                    "notifications or without Nova's [notifications] "
                    "notify_on_state_change). A lost notification delays a "
                    "repair by up to this long; each sweep costs two "
                    "server listings (three with hold_percent) and one "
                    "instance-action read per server that changed."),
    cfg.StrOpt("restart_group_key",
               default="instanceha:restart_group",
               help="Server metadata key holding its restart group, an "
                    "integer 0 or more: within one project, the servers of "
                    "group N+1 are sent only once every server of the "
                    "lower groups is ACTIVE (or given up). Servers without "
                    "it wait for nobody and nobody waits for them. Applies "
                    "to both paths, whether or not instance repair is "
                    "enabled: the repairs, and the evacuate requests of "
                    "lost hosts' servers (across the hosts this "
                    "instanceha is evacuating)."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Repairing single servers on healthy hosts")


def validate(conf):
    """The actions keep the order of risk, once each; rebuild needs its
    opt-in; the group key is a name."""
    g = conf[GROUP]
    actions = list(g.actions)
    if len(set(actions)) != len(actions):
        raise cfg.Error("[%s] actions: %s names an action twice"
                        % (GROUP, ",".join(actions)))
    ranks = [ACTIONS.index(a) for a in actions]
    if ranks != sorted(ranks):
        raise cfg.Error("[%s] actions: %s is not in the order of risk "
                        "(%s)" % (GROUP, ",".join(actions),
                                  ", ".join(ACTIONS)))
    if "rebuild" in actions and not g.allow_rebuild:
        raise cfg.Error("[%s] actions lists rebuild, which loses the "
                        "server's local disks: set allow_rebuild = true to "
                        "mean it, or remove it" % GROUP)
    key = g.restart_group_key
    if not key or key != key.strip():
        raise cfg.Error("[%s] restart_group_key: must be a non-empty name "
                        "without blanks around it, not %r" % (GROUP, key))
