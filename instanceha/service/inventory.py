"""The BMC inventory as this service takes it: parsed, then refused where
parsing allows what a running service must not do (noop without
allow_unfenced), and shared BMCs warned about."""

from typing import Any, Mapping

import structlog

from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.drivers.fencing.inventory_entry import BMC
from instanceha.errors import ConfigError

LOG = structlog.get_logger("instanceha.service")


#: the BMC inventory: {host name: its entry}
Inventory = Mapping[str, BMC]


def check_inventory(conf: Any, inv: Inventory) -> None:
    """Refuse what parsing allows but this service must not run with."""
    for bmc in inv.values():
        if any(m.driver == "noop" for m in bmc.methods) \
                and not conf.fencing.allow_unfenced:
            raise ConfigError(
                "inventory: host %s: driver noop does not fence; set "
                "[fencing] allow_unfenced = true to allow it (test clouds "
                "only)" % bmc.host)


def warn_shared(inv: Inventory) -> None:
    for address, hosts in inventory_mod.shared(inv):
        LOG.warning("bmc_shared", hosts=",".join(hosts), address=address,
                    reason="several inventory entries reach one BMC: "
                           "powering it off for one host kills the others; "
                           "refused while another of them is up. Remove "
                           "the entry of a renamed host's old name")


def load_inventory(conf: Any) -> Inventory:
    inv = inventory_mod.load(conf.fencing.inventory, fencing_pkg.FIELDS)
    check_inventory(conf, inv)
    warn_shared(inv)
    return inv
