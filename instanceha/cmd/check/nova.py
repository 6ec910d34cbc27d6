"""Check 3: Nova through clouds.yaml, its maximum microversion and its
compute services."""

from instanceha.cmd.check.report import FAIL, OK, WARN
from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova import NovaDriver


def nova_driver(conf):
    """The compute driver ``instanceha run`` would use."""
    return NovaDriver(conf)


def check_nova(conf, report, compute_factory):
    try:
        compute = compute_factory(conf)
    except base.ComputeError as e:
        report.add(FAIL, "nova", e)
        return None, None
    mv = getattr(compute, "max_microversion", None)
    try:
        services = compute.list_services()
    except base.ComputeError as e:
        report.add(FAIL, "nova", "cannot list compute services: %s" % e)
        return compute, None
    up = sum(1 for s in services if s.state == "up" and not s.forced_down)
    report.add(OK, "nova", "cloud %r: max microversion %s, evacuate at %s; "
               "%d compute service(s), %d up"
               % (conf.cloud, ".".join(str(p) for p in mv) if mv else "?",
                  conf.evacuation.microversion, len(services), up))
    if not services:
        report.add(WARN, "nova", "Nova lists no compute service: nothing "
                   "to protect yet")
    return compute, services
