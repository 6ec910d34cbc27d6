"""Fencing drivers, loaded by name from the BMC inventory's ``driver`` field.

Each entry is imported only when an inventory names it, so a deployment
without IPMI hosts never needs ipmitool, and one without BareMetalHosts
never imports kubernetes.
"""

import importlib
import threading

import structlog

LOG = structlog.get_logger("instanceha.fencing")

DRIVERS = {
    "redfish": "instanceha.drivers.fencing.redfish:RedfishDriver",
    "ipmi": "instanceha.drivers.fencing.ipmi:IPMIDriver",
    "noop": "instanceha.drivers.fencing.noop:NoopDriver",
    "fence_agent": "instanceha.drivers.fencing.fence_agent:FenceAgentDriver",
    "bmh": "instanceha.drivers.fencing.bmh:BareMetalHostDriver",
    "watchdog": "instanceha.drivers.fencing.watchdog:WatchdogDriver",
    "ceph_blocklist":
        "instanceha.drivers.fencing.ceph_blocklist:CephBlocklistDriver",
}

#: inventory fields each driver reads besides driver, address, username and
#: password (the inventory refuses a field no driver reads). Each driver's
#: module documents its own.
FIELDS = {
    "redfish": {"system_id", "verify", "timeout", "auth", "cert_file",
                "key_file", "reset_type"},
    "ipmi": {"port", "cipher_suite", "timeout", "interface", "password_via"},
    "noop": set(),
    "fence_agent": {"agent", "params", "agent_timeout"},
    "bmh": {"namespace", "name", "kubeconfig", "context", "api_url",
            "ca_file", "insecure", "token_file", "in_cluster", "timeout"},
    "watchdog": set(),
    "ceph_blocklist": {"addresses", "protects", "ceph_conf"},
}


def load_driver(name, conf, **deps):
    """Instantiate the driver called ``name`` with the service's conf and
    those of ``deps`` it names in its ``needs`` (the ``watchdog`` method's
    heartbeat listener)."""
    try:
        target = DRIVERS[name]
    except KeyError:
        raise ValueError("unknown fencing driver %r (known: %s)"
                         % (name, ", ".join(sorted(DRIVERS))))
    module_name, cls_name = target.split(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    wanted = {key: deps[key] for key in getattr(cls, "needs", ())
              if key in deps}
    return cls(conf, **wanted)


class Fencers:
    """The loaded drivers, one per name, made by ``factory(name)`` on
    first use; thread-safe. :meth:`close` releases what they hold open
    (Redfish sessions)."""

    def __init__(self, factory):
        self._factory = factory
        self._drivers = {}
        self._lock = threading.Lock()

    def get(self, name):
        with self._lock:
            if name not in self._drivers:
                self._drivers[name] = self._factory(name)
            return self._drivers[name]

    def close(self):
        with self._lock:
            drivers = list(self._drivers.values())
        for driver in drivers:
            close = getattr(driver, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as e:   # noqa: BLE001 - best effort at stop
                    LOG.warning("fencing_driver_close_failed",
                                driver=getattr(driver, "name", "?"),
                                reason=str(e))
