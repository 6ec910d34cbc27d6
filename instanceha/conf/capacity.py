from oslo_config import cfg
from oslo_config import types

from instanceha.conf import _group

GROUP = "capacity"
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Check, before evacuating a fenced host's servers, "
                     "which of them the hosts in scope have room for "
                     "(Placement's usable and used vCPU, RAM and disk). A "
                     "server no host can take waits for capacity (the "
                     "host's status names what is missing) instead of "
                     "being sent into a certain NoValidHost; the others go "
                     "as usual. Servers whose size is unknown are never "
                     "held back, and Nova's scheduler still picks every "
                     "destination. Off: every server is sent and Nova "
                     "decides alone."),
    cfg.StrOpt("scope", default="cloud",
               choices=[("cloud", "every enabled, up compute host"),
                        ("zone", "hosts in the lost host's availability "
                                 "zone (all hosts when its zone is "
                                 "unknown)"),
                        ("aggregate", "hosts sharing a host aggregate with "
                                      "the lost host (its zone when it is "
                                      "in none)")],
               help="Which hosts count as room for a lost host's servers. "
                    "'cloud' is never stricter than Nova's scheduler. Use "
                    "'zone' or 'aggregate' only when the servers cannot "
                    "leave their zone or aggregate anyway (servers booted "
                    "into a zone, aggregate isolation filters): otherwise "
                    "servers would wait although Nova could place them "
                    "elsewhere."),
    cfg.IntOpt("headroom_percent", default=0, min=0, max=90,
               help="Percentage of each destination's usable vCPU, RAM and "
                    "disk that the preflight keeps free: servers that "
                    "would eat into it wait for capacity. 0: a host may be "
                    "filled to what Placement allows."),
    cfg.ListOpt("resources", default=["vcpus", "ram", "disk"],
                item_type=types.String(choices=["vcpus", "ram", "disk"]),
                help="Resources the preflight checks. Leave out 'disk' when "
                     "Placement's disk figures do not say where servers "
                     "will land (for example local disk reported while "
                     "servers live on shared storage); hosts that report "
                     "no disk at all are never held to it anyway."),
    cfg.ListOpt("exclude_aggregates", default=[],
                help="Host aggregates that do not make hosts neighbours for "
                     "scope 'aggregate' (an aggregate holding every host, "
                     "for example). [recovery] global_aggregate is always "
                     "excluded."),
]

register_opts, list_opts = _group.make(
    GROUP, OPTS, title="Capacity check before evacuating a lost host")


def validate(conf):
    """The preflight needs at least one resource to check; aggregate names
    must be names."""
    c = conf[GROUP]
    if c.enabled and not c.resources:
        raise cfg.Error("[%s] enabled is on but resources is empty: list "
                        "at least one of vcpus, ram, disk, or turn the "
                        "preflight off" % GROUP)
    for name in c.exclude_aggregates:
        if not name or name != name.strip():
            raise cfg.Error("[%s] exclude_aggregates: %r is not an "
                            "aggregate name" % (GROUP, name))
