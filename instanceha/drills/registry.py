"""The drills by name: what each shows in one line, and where it lives.

Imports nothing of instanceha: ``instanceha demo --list`` reads it
without loading the engine or the simulator.
"""

import collections

Scenario = collections.namedtuple("Scenario", "name summary target")

#: In the order ``--list`` prints them. ``target`` is "module:function"
#: under instanceha.drills; the function takes a Drill and returns the
#: verdict's text (raising DrillFailed when the world says otherwise).
SCENARIOS = (
    Scenario("host-death",
             "a host hangs: powered off, its servers rebuilt elsewhere, "
             "back in service once Nova confirms the cleanup",
             "host_death:host_death"),
    Scenario("compute-death",
             "only nova-compute dies, the host lives (its agent beats): "
             "never powered off, nothing moved",
             "host_death:compute_death"),
    Scenario("kdump",
             "a kernel crash sends fence_kdump: left on while it dumps, "
             "powered off as soon as the dump is over",
             "kdump:kdump"),
    Scenario("kdump-trusted",
             "[kdump] action = evacuate (trusted kdump network): fenced on "
             "its messages, evacuated while it dumps, never off",
             "kdump:kdump_trusted"),
    Scenario("storm",
             "more hosts die at once than the threshold allows: held, "
             "nothing fenced, until 'resume --storm'",
             "storm:storm"),
    Scenario("cascade",
             "two destinations die during the rebuild: those servers are "
             "sent again, every host recovered, none rebuilt twice",
             "cascade:cascade"),
    Scenario("bmc-unreachable",
             "a host dies with its BMC unreachable: held in fencing, "
             "nothing moves; once the BMC answers: off, evacuated",
             "bmc:bmc_unreachable"),
    Scenario("drain",
             "planned drain: servers live-migrated away, host in "
             "maintenance, 'resume' puts it back",
             "drain:drain"),
    Scenario("instance-crash",
             "a server's guest crashes on a healthy host: started again "
             "where it is; a server its owner stopped stays stopped",
             "instance_crash:instance_crash"),
)

#: Behaviours a drill will show once the engine does them: (name, why).
PENDING = ()


def names():
    return [s.name for s in SCENARIOS]


def lookup(name):
    """The Scenario called ``name``, or None."""
    for s in SCENARIOS:
        if s.name == name:
            return s
    return None


def unknown_text(name):
    """The error for a name that is no drill: it and the valid ones."""
    return ("no scenario %r; the scenarios are: %s (instanceha demo --list "
            "describes them)" % (name, ", ".join(names())))


def listing():
    """``--list``: one line per drill, then the pending ones."""
    width = max(len(n) for n in names())
    lines = ["%-*s  %s" % (width, s.name, s.summary) for s in SCENARIOS]
    for name, why in PENDING:
        lines.append("(not yet: %s: %s)" % (name, why))
    return "\n".join(lines)
