"""Per-host BMC settings, read from a YAML file and validated at start.

File format (path in ``[fencing] inventory``; the whole format, secrets,
fencing methods and reloading are described in ``doc/inventory.md``)::

    hosts:
      compute-0:
        driver: redfish            # redfish | ipmi | noop | ...
        address: https://10.0.0.5  # BMC address (URL for redfish, host for ipmi)
        username: admin
        password_file: /etc/instanceha/bmc/compute-0.pass   # or password_env,
                                   # or password (inline); never logged
        system_id: /redfish/v1/Systems/1   # redfish, optional
        verify: true               # redfish TLS: true, false or a CA bundle path
      compute-1:                   # several methods, tried in order
        username: admin            # fields beside methods apply to each method
        password_env: BMC_PASS_COMPUTE1
        methods:
          - {driver: redfish, address: https://10.0.0.6}
          - {driver: ipmi, address: 10.0.1.6}
      compute-2:                   # fencing levels: each a method or a
        levels:                    # set of methods that must all succeed
          - {driver: redfish, address: https://10.0.0.7, password: x}
          - - {driver: watchdog}
            - {driver: ceph_blocklist, addresses: [10.0.2.7],
               protects: [volumes]}
    defaults:                      # optional, under every host and method
      driver: redfish

Every error names the host (and the method, counted from 1) and the field;
none holds a secret.

The entry itself is :mod:`~instanceha.drivers.fencing.inventory_entry`,
the passwords' sources :mod:`~instanceha.drivers.fencing.inventory_secrets`,
and which entries reach one BMC
:mod:`~instanceha.drivers.fencing.inventory_identity`; their public names
stay importable from here.
"""

import dataclasses
import os
import stat
import urllib.parse
from typing import Mapping

import structlog
import yaml

from instanceha.drivers.fencing import ceph_options
from instanceha.drivers.fencing.inventory_entry import BMC, InventoryError
from instanceha.drivers.fencing.inventory_secrets import (
    SECRET_FIELDS, ModeWarning, Secrets, check_sources, readable_by_others,
    sources)
# Re-exported: callers and tests use them as inventory.<name>.
from instanceha.drivers.fencing.inventory_entry import entry_for  # noqa: F401
from instanceha.drivers.fencing.inventory_identity import (  # noqa: F401
    identities, identity, method_key, resolve, same_bmc, shared)

LOG = structlog.get_logger("instanceha.inventory")

#: fields every entry may carry; a driver's own fields come from the
#: ``known_drivers`` mapping given to :func:`parse`
COMMON_FIELDS = {"driver", "address", "username", "methods", "levels",
                 *SECRET_FIELDS}
NEEDS_ADDRESS = {"redfish", "ipmi"}
#: a driver's own check of its options (``check(where, options)`` raises
#: InventoryError naming the field and the fix), run when the file is read
OPTION_CHECKS = {"ceph_blocklist": ceph_options.check}
#: drivers that log in to the BMC: an entry needs a password source
NEEDS_PASSWORD = NEEDS_ADDRESS
#: fields that are not driver options (everything else lands in BMC.options)
_NOT_OPTIONS = set(COMMON_FIELDS)

# -- parsing -----------------------------------------------------------------

def _merge(levels):
    """Fields of ``levels`` (least specific first), except that the password
    source comes only from the most specific level that names one."""
    merged = {}
    for level in levels:
        if sources(level):
            for field in SECRET_FIELDS:
                merged.pop(field, None)
        merged.update(level)
    return merged


def _method(where, host, merged, known_drivers, known_fields, secrets):
    # Keys are whatever YAML made of them (numbers too): sorted as text.
    unknown = sorted(set(merged) - known_fields, key=repr)
    if unknown:
        raise InventoryError("%s: unknown field %s" % (where, unknown[0],))
    driver = merged.get("driver")
    if not driver:
        raise InventoryError("%s: field driver is missing" % where)
    if not isinstance(driver, str) or driver not in known_drivers:
        raise InventoryError(
            "%s: field driver: %r is not one of %s"
            % (where, driver, ", ".join(sorted(known_drivers))))
    if driver in NEEDS_ADDRESS and not merged.get("address"):
        raise InventoryError("%s: field address is missing" % where)
    for field in ("address", "username"):
        if field in merged and not isinstance(merged[field], str):
            raise InventoryError("%s: field %s must be a string"
                                 % (where, field))
    if "://" in merged.get("address", ""):
        try:
            # identity() splits it for the same-BMC checks: a URL it
            # cannot split ("https://[10.0.0.5") is refused here.
            urllib.parse.urlsplit(merged["address"].strip())
        except ValueError as e:
            raise InventoryError("%s: field address: not a valid URL: %s"
                                 % (where, e))
    if driver in NEEDS_PASSWORD and not sources(merged):
        raise InventoryError(
            "%s: no password given: add the field password_file (a file "
            "holding it), password_env (an environment variable holding "
            "it) or password; without one the BMC refuses every request "
            "(HTTP 401)" % where)
    if "password_file" in merged:
        password = secrets.from_file(where, merged["password_file"])
    elif "password_env" in merged:
        password = secrets.from_env(where, merged["password_env"])
    else:
        password = merged.get("password", "")
    options = {k: v for k, v in merged.items() if k not in _NOT_OPTIONS}
    check = OPTION_CHECKS.get(driver)
    if check is not None:
        check(where, options)
    return BMC(host=host, driver=driver, address=merged.get("address", ""),
               username=merged.get("username", ""), password=password,
               options=options)


def _parse(data, known_drivers, base_dir, environ):
    if not isinstance(known_drivers, Mapping):
        known_drivers = {name: () for name in known_drivers}
    known_fields = set(COMMON_FIELDS).union(*map(set, known_drivers.values()))
    if not isinstance(data, Mapping) or not isinstance(data.get("hosts"), Mapping):
        raise InventoryError("inventory: top level must be a mapping with a "
                             "'hosts' mapping")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise InventoryError("inventory: 'defaults' must be a mapping")
    for field in ("methods", "levels"):
        if field in defaults:
            raise InventoryError("inventory: defaults: field %s belongs to "
                                 "a host, not to defaults" % field)
    check_sources("inventory: defaults", defaults)
    secrets = Secrets(base_dir, environ)
    result, errors = {}, []
    for host, entry in data["hosts"].items():
        try:
            result[str(host)] = _entry(str(host), entry, defaults,
                                       known_drivers, known_fields, secrets)
        except InventoryError as e:
            errors.extend(e.errors)
    if errors:
        raise InventoryError(errors)
    return result, secrets.warnings, _holds_inline(data)


def _entry(host, entry, defaults, known_drivers, known_fields, secrets):
    """One host's BMC; raises InventoryError naming the host (every
    method's error, each a line)."""
    where = "inventory: host %s" % host
    if entry is None:
        entry = {}
    if not isinstance(entry, Mapping):
        raise InventoryError("%s: entry must be a mapping" % where)
    check_sources(where, entry)
    if "methods" in entry and "levels" in entry:
        raise InventoryError(
            "%s: fields methods and levels both given: keep one (levels "
            "replaces methods: each method of methods is a level of its "
            "own)" % where)
    base = [defaults, {k: v for k, v in entry.items()
                       if k not in ("methods", "levels")}]
    if "levels" in entry:
        return _levels(where, host, entry["levels"], base, known_drivers,
                       known_fields, secrets)
    if "methods" not in entry:
        return _method(where, host, _merge(base), known_drivers,
                       known_fields, secrets)
    listed = entry["methods"]
    if not isinstance(listed, (list, tuple)) or not listed:
        raise InventoryError("%s: field methods must be a non-empty list "
                             "of mappings" % where)
    methods, errors = [], []
    for index, method in enumerate(listed, 1):
        mwhere = "%s: method %d" % (where, index)
        try:
            methods.append(_one(mwhere, host, method, base, known_drivers,
                                known_fields, secrets))
        except InventoryError as e:
            errors.extend(e.errors)
    if errors:
        raise InventoryError(errors)
    return dataclasses.replace(methods[0], fallbacks=tuple(methods[1:]))


def _one(where, host, method, base, known_drivers, known_fields, secrets):
    """One method of ``methods`` or of a level."""
    if not isinstance(method, Mapping):
        raise InventoryError("%s: must be a mapping" % where)
    for field in ("methods", "levels"):
        if field in method:
            raise InventoryError("%s: field %s cannot be nested"
                                 % (where, field))
    check_sources(where, method)
    return _method(where, host, _merge(base + [method]), known_drivers,
                   known_fields, secrets)


_LEVELS_FORM = (
    "field levels must be a non-empty list whose items are each a "
    "mapping (one method, e.g. {driver: redfish, address: ...}) or a "
    "non-empty list of mappings (a set of methods that must all succeed, "
    "e.g. [{driver: watchdog}, {driver: ceph_blocklist, ...}])")


def _levels(where, host, listed, base, known_drivers, known_fields,
            secrets):
    """The ``levels:`` form: each item one method or a set (a list)."""
    if not isinstance(listed, (list, tuple)) or not listed:
        raise InventoryError("%s: %s" % (where, _LEVELS_FORM))
    methods, grouping, errors = [], [], []
    for lindex, level in enumerate(listed, 1):
        lwhere = "%s: level %d" % (where, lindex)
        if isinstance(level, Mapping):
            level = [level]
            names = [lwhere]
        elif isinstance(level, (list, tuple)) and level:
            names = ["%s: method %d" % (lwhere, i)
                     for i in range(1, len(level) + 1)]
        else:
            errors.append("%s: %s" % (lwhere, _LEVELS_FORM))
            continue
        grouping.append(len(level))
        for mwhere, method in zip(names, level):
            try:
                methods.append(_one(mwhere, host, method, base,
                                    known_drivers, known_fields, secrets))
            except InventoryError as e:
                errors.extend(e.errors)
    if errors:
        raise InventoryError(errors)
    return dataclasses.replace(methods[0], fallbacks=tuple(methods[1:]),
                               grouping=tuple(grouping))


def _holds_inline(data):
    """Whether the (valid) inventory writes a password itself, anywhere."""
    levels = [data.get("defaults") or {}]
    for entry in data["hosts"].values():
        levels.append(entry or {})
        levels.extend((entry or {}).get("methods") or ())
        for level in (entry or {}).get("levels") or ():
            levels.extend([level] if isinstance(level, Mapping) else level)
    return any(level.get("password") for level in levels)


def parse(data, known_drivers, *, base_dir=None, environ=None):
    """Validate a loaded mapping and return {host: BMC}.

    ``known_drivers`` maps each driver name to the inventory fields it reads
    (a plain collection of names means drivers with no fields of their own).
    Relative ``password_file`` paths are taken from ``base_dir`` (default:
    the working directory); ``password_env`` names are looked up in
    ``environ`` (default: ``os.environ``). Password files that others may
    read are logged as warnings (:func:`read` returns them instead).
    """
    inv, warnings, _ = _parse(data, known_drivers, base_dir, environ)
    _log(warnings)
    return inv


def read(path, known_drivers, *, environ=None):
    """Load and validate the inventory file at ``path`` without logging:
    return ``({host: BMC}, [ModeWarning])``. Relative password files are
    taken from the inventory file's directory. Raises InventoryError."""
    try:
        with open(path) as f:
            mode = os.fstat(f.fileno()).st_mode
            data = yaml.safe_load(f)
    except OSError as e:
        raise InventoryError(unreadable(path, e))
    except UnicodeDecodeError:
        raise InventoryError("inventory: %s is not UTF-8 text" % path)
    except yaml.YAMLError as e:
        raise InventoryError("inventory: %s is not valid YAML: %s" % (path, e))
    except (ValueError, RecursionError) as e:
        # PyYAML builds some values with Python's constructors (a date out
        # of range, an integer past the digit limit raise ValueError) and
        # nests recursively (a deep nesting exhausts the stack).
        raise InventoryError("inventory: %s is not valid YAML: %s: %s"
                             % (path, type(e).__name__, e))
    base_dir = os.path.dirname(os.path.abspath(path))
    try:
        inv, warnings, inline = _parse(data, known_drivers, base_dir,
                                       environ)
    except InventoryError as e:
        # Each line names the file: "inventory: PATH: host ...".
        raise InventoryError([
            "inventory: %s:%s" % (path, line[len("inventory:"):])
            if line.startswith("inventory:") else line
            for line in e.errors])
    if inline and readable_by_others(mode):
        warnings.insert(0, ModeWarning(path, stat.S_IMODE(mode), "inventory"))
    return inv, warnings


def unreadable(path, e):
    """One line for an inventory file that cannot be read (``e``: its
    OSError), naming the option and what to do."""
    if isinstance(e, IsADirectoryError) or os.path.isdir(path):
        why = "is a directory: give the inventory file's path"
    elif isinstance(e, PermissionError):
        why = ("permission denied: make it readable by the service's user "
               "(this process runs as uid %d), e.g. chown that user and "
               "chmod 600" % os.geteuid())
    elif isinstance(e, FileNotFoundError):
        why = "no such file: create it (doc/inventory.md) or fix the path"
    else:
        why = "cannot read it: %s" % (e.strerror or e)
    return "inventory: [fencing] inventory %s: %s" % (path, why)


def load(path, known_drivers, *, environ=None):
    """Load and validate the inventory file at ``path``; return {host: BMC}.
    Secret files others may read (and the inventory itself, when it holds
    inline passwords) are logged as warnings. Raises InventoryError."""
    inv, warnings = read(path, known_drivers, environ=environ)
    _log(warnings)
    return inv


def _log(warnings):
    for w in warnings:
        LOG.warning("secret_file_readable", path=w.path, mode="%04o" % w.mode,
                    file=w.what, reason=str(w))


# -- reloading ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Reloaded:
    """What :func:`reload` did. ``inventory`` is the one to use from now on:
    the new one, or on ``error`` the unchanged current one."""

    inventory: Mapping[str, BMC]
    error: str = None
    warnings: tuple = ()
    added: tuple = ()
    removed: tuple = ()
    changed: tuple = ()

    @property
    def ok(self):
        return self.error is None


def reload(path, known_drivers, current, *, check=None, environ=None):
    """Read the inventory at ``path`` again (for SIGHUP) and return a
    :class:`Reloaded`. On any error (unreadable file, invalid entry, missing
    secret, or ``check(new_inventory)`` raising) the result holds
    ``current`` unchanged and the error's text; nothing is raised.
    ``check`` is where the caller refuses what parsing allows (e.g. a noop
    entry without ``[fencing] allow_unfenced``). Warnings are logged, as by
    :func:`load`; the caller logs the error and the summary."""
    try:
        new, warnings = read(path, known_drivers, environ=environ)
        if check is not None:
            check(new)
    except InventoryError as e:
        return Reloaded(inventory=current, error=str(e))
    except Exception as e:   # noqa: BLE001 - any error keeps the current one
        return Reloaded(inventory=current,
                        error="%s: %s" % (type(e).__name__, e))
    _log(warnings)
    old = dict(current or {})
    return Reloaded(
        inventory=new, warnings=tuple(warnings),
        added=tuple(sorted(set(new) - set(old))),
        removed=tuple(sorted(set(old) - set(new))),
        changed=tuple(sorted(h for h in set(new) & set(old)
                             if new[h] != old[h])))
