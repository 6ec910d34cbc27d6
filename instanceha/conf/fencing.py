from oslo_config import cfg

from instanceha.conf import _group

GROUP = "fencing"
OPTS = [
    cfg.StrOpt("inventory", default="/etc/instanceha/bmc.yaml",
               help="YAML file with each compute host's BMC (driver, address, "
                    "credentials). Validated at start; an error names the host "
                    "and field. Keep it readable by instanceha only: it holds "
                    "BMC passwords."),
    cfg.StrOpt("default_driver", default=None,
               help="Fencing driver for hosts missing from the inventory. "
                    "Unset means such a host cannot be fenced and goes to "
                    "'failed' instead of being evacuated."),
    cfg.BoolOpt("allow_unfenced", default=False,
                help="Allow the 'noop' fencing driver, which does NOT power "
                     "anything off. A host that is only unreachable may still "
                     "run its servers: evacuating it can corrupt their disks. "
                     "Only for test clouds."),
    cfg.FloatOpt("timeout", default=60.0, min=1, max=3600,
                 help="Seconds to wait for the BMC to report power Off after "
                      "the power-off request before fencing counts as failed."),
    cfg.FloatOpt("poll_interval", default=1.0, min=0.05, max=60,
                 help="Seconds between power-state reads while waiting for Off."),
    cfg.IntOpt("retries", default=3, min=1, max=20,
               help="Attempts at a BMC request that fails to connect before "
                    "fencing counts as failed."),
    cfg.BoolOpt("require_verified_identity", default=False,
                help="Power a host off only through a fencing method whose "
                     "BMC reports the system UUID the host's agent reports "
                     "(Redfish System UUID, IPMI system GUID, against the "
                     "host's DMI product_uuid). A BMC reporting another "
                     "UUID is refused whatever this says (the host goes "
                     "failed rather than powering another machine off). "
                     "Off (the default): a method whose identity cannot be "
                     "verified (no agent, an agent sending no UUID, a BMC "
                     "reporting none) is still used, and said 'identity not "
                     "verified' in status and 'instanceha check'; an "
                     "inventory entry pointing at another live machine "
                     "that reports no host name is then not caught. On: "
                     "such a host is never fenced, so never evacuated, "
                     "until its identity is verified."),
    cfg.BoolOpt("power_evidence", default=True,
                help="When a host's heartbeat is lost, read its BMC's power "
                     "state at once (a read, no action); a BMC reporting Off "
                     "is the second witness of death and fencing starts "
                     "without waiting for [detection] grace_period (or a "
                     "kdump delay: a host that is Off dumps nothing). A BMC "
                     "reporting Off alone, with Nova's heartbeat fresh, "
                     "never starts fencing."),
    cfg.FloatOpt("watchdog_margin", default=4.0, min=0, max=600,
                 help="The 'watchdog' fencing method (an agent that arms a "
                      "watchdog, doc/safety.md rule 25): seconds added to "
                      "the host's isolation timeout and watchdog timeout "
                      "before its silence counts as its death. It covers "
                      "what the engine cannot see (doc/agent.md, 'The "
                      "engine's margin'): the agent's last feed may follow "
                      "its last fresh input by up to one "
                      "watchdog_check_interval (a decision loop stalled "
                      "between reading its clock and feeding), the chip "
                      "counts in steps of up to 1 s, and the engine's and "
                      "the host's clocks run at rates that differ by at "
                      "most about 0.1% (0.1 s over a minute); the "
                      "network's delays need nothing (every input the "
                      "host counts on reached the engine before it, so "
                      "they only make the engine later). Default: the "
                      "agents' default watchdog_check_interval (2 s) + "
                      "2 s. Never set it below the agents' "
                      "watchdog_check_interval + 2 s."),
    cfg.FloatOpt("watchdog_wait_max", default=600.0, min=1, max=7200,
                 help="The 'watchdog' fencing method: seconds it waits at "
                      "most, after condemning a host, for the host's peers "
                      "to acknowledge the poison pill and for the deadline "
                      "to pass, before the method fails."),
]

register_opts, list_opts = _group.make(GROUP, OPTS, title="Fencing")
