"""A fencing driver that fences nothing. For test clouds only.

It refuses to exist unless ``[fencing] allow_unfenced = true``, and every
call logs at error level that the host was NOT powered off.
"""

import structlog

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.noop")


class NoopDriver(base.FencingDriver):
    name = "noop"

    def __init__(self, conf):
        if not conf.fencing.allow_unfenced:
            raise ValueError(
                "fencing driver 'noop' does not power hosts off; it is allowed "
                "only with [fencing] allow_unfenced = true (test clouds only)")

    def power_off(self, bmc):
        LOG.error("host_not_fenced", host=bmc.host, driver=self.name,
                  reason="noop driver: the host was NOT powered off; its "
                         "servers may still be running")

    def power_state(self, bmc):
        return base.PowerState.UNKNOWN
