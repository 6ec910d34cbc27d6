"""Per-host BMC settings, read from a YAML file and validated at start.

File format (path in ``[fencing] inventory``)::

    hosts:
      compute-0:
        driver: redfish            # redfish | ipmi | noop | ...
        address: https://10.0.0.5  # BMC address (URL for redfish, host for ipmi)
        username: admin
        password: secret           # never logged, never on a command line
        system_id: /redfish/v1/Systems/1   # redfish, optional
        verify: true               # redfish TLS: true, false or a CA bundle path
    defaults:                      # optional, merged under every host
      driver: redfish

Every error names the host and the field.
"""

import dataclasses
import urllib.parse
from typing import Any, Mapping

import yaml


class InventoryError(ValueError):
    pass


#: fields every entry may carry; a driver's own fields come from the
#: ``known_drivers`` mapping given to :func:`parse`
COMMON_FIELDS = {"driver", "address", "username", "password"}
NEEDS_ADDRESS = {"redfish", "ipmi"}


@dataclasses.dataclass(frozen=True)
class BMC:
    host: str
    driver: str
    address: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __str__(self):
        return "BMC(host=%s, driver=%s, address=%s)" % (
            self.host, self.driver, self.address)


_DEFAULT_PORTS = {"https": 443, "http": 80, "redfish": 443, "ipmi": 623}


def identity(bmc):
    """(host, port, system) naming one BMC and the system behind it,
    whatever host name the inventory files it under and however its address
    is spelt (case, trailing slash, default port); None when it names no
    BMC (noop). ``system`` is "" when the entry does not choose one."""
    if bmc is None or not bmc.address:
        return None
    address = bmc.address.strip()
    if "://" in address:
        parts = urllib.parse.urlsplit(address)
        host = (parts.hostname or "").lower()
        try:
            port = parts.port
        except ValueError:
            port = None
        port = port or _DEFAULT_PORTS.get(parts.scheme.lower())
    else:
        host = address.lower().strip("[]")
        port = bmc.options.get("port") or _DEFAULT_PORTS.get(bmc.driver)
    system = str(bmc.options.get("system_id") or "").strip().lower()
    return (host, str(port or ""), system.rstrip("/"))


def same_bmc(a, b):
    """Both entries reach one BMC (and one system behind it: an entry that
    chooses none reaches whichever system the BMC has)."""
    ia, ib = identity(a), identity(b)
    if ia is None or ib is None or ia[:2] != ib[:2]:
        return False
    return ia[2] == ib[2] or not ia[2] or not ib[2]


def shared(inventory):
    """[(address, [host, ...])] for BMCs that several entries reach."""
    hosts = sorted(inventory)
    groups = []
    for i, host in enumerate(hosts):
        mates = [other for other in hosts[i + 1:]
                 if same_bmc(inventory[host], inventory[other])]
        if mates and not any(host in g for _, g in groups):
            groups.append((inventory[host].address, [host] + mates))
    return groups


def parse(data, known_drivers):
    """Validate a loaded mapping and return {host: BMC}.

    ``known_drivers`` maps each driver name to the inventory fields it reads
    (a plain collection of names means drivers with no fields of their own).
    """
    if not isinstance(known_drivers, Mapping):
        known_drivers = {name: () for name in known_drivers}
    known_fields = set(COMMON_FIELDS).union(*map(set, known_drivers.values()))
    if not isinstance(data, Mapping) or not isinstance(data.get("hosts"), Mapping):
        raise InventoryError("inventory: top level must be a mapping with a "
                             "'hosts' mapping")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise InventoryError("inventory: 'defaults' must be a mapping")
    result = {}
    for host, entry in data["hosts"].items():
        host = str(host)
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise InventoryError("inventory: host %s: entry must be a mapping"
                                 % host)
        merged = dict(defaults)
        merged.update(entry)
        unknown = sorted(set(merged) - known_fields)
        if unknown:
            raise InventoryError("inventory: host %s: unknown field %s"
                                 % (host, unknown[0]))
        driver = merged.get("driver")
        if not driver:
            raise InventoryError("inventory: host %s: field driver is missing"
                                 % host)
        if driver not in known_drivers:
            raise InventoryError(
                "inventory: host %s: field driver: %r is not one of %s"
                % (host, driver, ", ".join(sorted(known_drivers))))
        if driver in NEEDS_ADDRESS and not merged.get("address"):
            raise InventoryError("inventory: host %s: field address is missing"
                                 % host)
        for field in ("address", "username", "password"):
            if field in merged and not isinstance(merged[field], str):
                raise InventoryError("inventory: host %s: field %s must be a "
                                     "string" % (host, field))
        options = {k: v for k, v in merged.items()
                   if k not in ("driver", "address", "username", "password")}
        result[host] = BMC(host=host, driver=driver,
                           address=merged.get("address", ""),
                           username=merged.get("username", ""),
                           password=merged.get("password", ""),
                           options=options)
    return result


def load(path, known_drivers):
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise InventoryError("inventory: cannot read %s: %s" % (path, e.strerror))
    except yaml.YAMLError as e:
        raise InventoryError("inventory: %s is not valid YAML: %s" % (path, e))
    return parse(data, known_drivers)
