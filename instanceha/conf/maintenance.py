"""[maintenance]: what happens when a drained host is put back in
service (``instanceha resume HOST``): the smoke test that must pass
before it is re-enabled, and the fail-back of the servers the drain moved."""

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "maintenance"

OPTS = [
    cfg.BoolOpt("fail_back", default=False,
                help="When a drained host is resumed, live-migrate the "
                     "servers its drain moved back onto it, in order, with "
                     "the drain's stuck handling ([drain] stuck_timeout, "
                     "stuck_action, stuck_retries). 'instanceha resume "
                     "HOST --fail-back' or '--no-fail-back' decides for "
                     "one resume."),
    cfg.BoolOpt("smoke_test", default=False,
                help="When a drained host is put back, boot a small "
                     "server forced onto it (availability zone "
                     "'ZONE:HOST'), wait until it is ACTIVE and delete it. "
                     "Nova boots nothing on a disabled compute, so the "
                     "host is enabled for the test (the scheduler may "
                     "place servers there meanwhile); a failure disables "
                     "it again and puts it in state failed with the "
                     "reason. Needs smoke_flavor and smoke_image."),
    cfg.StrOpt("smoke_flavor", default="",
               help="Flavor (id) of the smoke test's server: the smallest "
                    "one the host accepts."),
    cfg.StrOpt("smoke_image", default="",
               help="Image (id) of the smoke test's server."),
    cfg.StrOpt("smoke_network", default="",
               help="Network (id) for the smoke test's server; empty: no "
                    "network (microversion 2.37 'none')."),
    cfg.FloatOpt("smoke_timeout", default=300.0, min=5, max=3600,
                 help="Seconds the smoke test's server has to become "
                      "ACTIVE; longer (or ERROR) fails the test."),
]

register_opts, list_opts = _group.make(GROUP, OPTS,
                                       title="Maintenance: putting a "
                                             "drained host back")


def validate(conf):
    """A clear error for a smoke test that cannot run."""
    m = conf[GROUP]
    if m.smoke_test and not (m.smoke_flavor and m.smoke_image):
        raise cfg.Error("[%s] smoke_test = true needs smoke_flavor and "
                        "smoke_image (the server it boots)" % GROUP)
