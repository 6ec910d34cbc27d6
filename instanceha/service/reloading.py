"""SIGHUP: the mutable options and the BMC inventory read again; what
cannot change while running is named, and a broken file changes
nothing."""

from typing import Any, Callable, Tuple

import structlog

from instanceha import conf as conf_pkg
from instanceha.conf import reload as conf_reload
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.engine.engine import Engine
from instanceha.sdnotify import Notifier
from instanceha.service.inventory import Inventory, check_inventory, \
    warn_shared

LOG = structlog.get_logger("instanceha.service")


class Reloader:
    """Reads ``conf``'s files and the BMC inventory again for ``engine``,
    starting from ``inventory`` (the one in use), and tells systemd
    through ``notifier`` (``ready()``: READY=1 was sent)."""

    def __init__(self, conf: Any, engine: Engine, inventory: Inventory,
                 notifier: Notifier, ready: Callable[[], bool]) -> None:
        self.conf = conf
        self._engine = engine
        #: the BMC inventory in use
        self.inventory = inventory
        self._notifier = notifier
        self._ready = ready

    def reload(self) -> Tuple[conf_reload.Outcome, inventory_mod.Reloaded]:
        """SIGHUP: re-read the configuration files (mutable options) and
        the BMC inventory, telling systemd (RELOADING=1, then READY=1).
        Returns (config Outcome, inventory reload result)."""
        if self._ready():
            self._notifier.reloading()
        try:
            config = self.reload_config()
            inventory = self._reload_inventory()
        finally:
            if self._ready():
                self._notifier.ready("reloaded the configuration")
            else:
                # READY=1 still waits for the first reconcile pass.
                self._notifier.status("reloaded the configuration; starting")
        return config, inventory

    def reload_config(self) -> conf_reload.Outcome:
        """Apply the mutable options changed in the configuration files;
        a changed immutable option keeps its value and is named in a
        warning; a file that would not start the service changes
        nothing. One log line per decision."""
        files = ",".join(conf_pkg.config_files(self.conf)) or None
        r = conf_reload.reload(self.conf)
        if not r.ok:
            LOG.error("config_reload_failed", files=files, reason=r.error,
                      effect="the configuration in use stays, unchanged")
            return r
        if r.applied:
            # The engine keeps what it derived from the options.
            self._engine.reload_settings()
            LOG.info("config_reloaded", files=files,
                     changed=conf_reload.describe(r.applied),
                     reason="SIGHUP: mutable options applied")
        if r.ignored:
            LOG.warning("config_change_ignored", files=files,
                        options=",".join("%s.%s" % (c[0], c[1])
                                         for c in r.ignored),
                        changed=conf_reload.describe(r.ignored),
                        reason="not mutable: the value in use stays until "
                               "a restart")
        if not r.applied and not r.ignored:
            LOG.info("config_reloaded", files=files, changed=None,
                     reason="SIGHUP: no option changed")
        return r

    def _reload_inventory(self) -> inventory_mod.Reloaded:
        """Read the BMC inventory again. A broken file (or one this
        service must refuse) keeps the inventory in use, and says why."""
        path = self.conf.fencing.inventory
        r = inventory_mod.reload(path, fencing_pkg.FIELDS, self.inventory,
                                 check=lambda inv: check_inventory(self.conf,
                                                                   inv))
        if not r.ok:
            LOG.error("inventory_reload_failed", path=path, reason=r.error,
                      effect="the previous inventory stays in use")
            return r
        self.inventory = r.inventory
        self._engine.ctx.inventory = r.inventory
        self._engine.ctx.index_bmcs()
        LOG.info("inventory_reloaded", path=path, hosts=len(r.inventory),
                 added=",".join(r.added) or None,
                 removed=",".join(r.removed) or None,
                 changed=",".join(r.changed) or None,
                 reason="SIGHUP")
        warn_shared(r.inventory)
        return r
