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
    defaults:                      # optional, under every host and method
      driver: redfish

Every error names the host (and the method, counted from 1) and the field;
none holds a secret.
"""

import dataclasses
import functools
import ipaddress
import os
import socket
import stat
import urllib.parse
from typing import Any, Mapping

import structlog
import yaml

LOG = structlog.get_logger("instanceha.inventory")


class InventoryError(ValueError):
    pass


#: where a password may come from; an entry (or a method, or ``defaults``)
#: sets at most one of them
SECRET_FIELDS = ("password", "password_file", "password_env")
#: fields every entry may carry; a driver's own fields come from the
#: ``known_drivers`` mapping given to :func:`parse`
COMMON_FIELDS = {"driver", "address", "username", "methods",
                 *SECRET_FIELDS}
NEEDS_ADDRESS = {"redfish", "ipmi"}
#: fields that are not driver options (everything else lands in BMC.options)
_NOT_OPTIONS = set(COMMON_FIELDS)


@dataclasses.dataclass(frozen=True)
class BMC:
    """One host's fencing entry.

    The entry's own fields are its first fencing method; ``fallbacks`` holds
    the methods tried after it (empty for an entry with one method).
    ``methods`` lists every method in order, each a plain BMC whose own
    ``methods`` is ``(itself,)``; for a one-method entry ``bmc.methods ==
    (bmc,)``. Drivers are always given one of ``methods``.
    """

    host: str
    driver: str
    address: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fallbacks: tuple = dataclasses.field(default=(), repr=False)

    def __post_init__(self):
        if self.fallbacks:
            first = dataclasses.replace(self, fallbacks=())
            methods = (first,) + tuple(self.fallbacks)
        else:
            methods = (self,)
        object.__setattr__(self, "_methods", methods)

    @property
    def methods(self):
        return self._methods

    def __str__(self):
        text = "BMC(host=%s, driver=%s, address=%s" % (
            self.host, self.driver, self.address)
        if self.fallbacks:
            text += ", then %s" % ", ".join(
                "%s %s" % (m.driver, m.address) if m.address else m.driver
                for m in self.fallbacks)
        return text + ")"


_DEFAULT_PORTS = {"https": 443, "http": 80, "redfish": 443, "ipmi": 623}


def entry_for(inventory, host, default_driver=None):
    """The host's entry, else one for ``[fencing] default_driver`` (when
    set), else None: the host cannot be fenced."""
    bmc = inventory.get(host)
    if bmc is None and default_driver:
        bmc = BMC(host=host, driver=default_driver)
    return bmc


def _identity(bmc):
    if bmc.driver == "bmh":
        # A BareMetalHost: one Kubernetes API (URL, or the kubeconfig that
        # names it), one namespace/name (the name defaults to the host's).
        api = str(bmc.options.get("api_url") or bmc.options.get("kubeconfig")
                  or ("in-cluster" if bmc.options.get("in_cluster") else ""))
        api = api.strip().lower().rstrip("/")
        name = "%s/%s" % (bmc.options.get("namespace") or "",
                          bmc.options.get("name") or bmc.host)
        return ("bmh:" + api, "", name.lower()) if api else None
    if not bmc.address:
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
        params = bmc.options.get("params") or {}
        # fence_agent: the agent's own port parameter, if any
        agent_port = next((params[k] for k in ("ipport", "port", "ip_port")
                           if isinstance(params, Mapping) and k in params),
                          None)
        port = (bmc.options.get("port") or agent_port
                or _DEFAULT_PORTS.get(bmc.driver))
    system = str(bmc.options.get("system_id") or "").strip().lower()
    return (host, str(port or ""), system.rstrip("/"))


def identities(bmc):
    """[(host, port, system)] of every method of ``bmc`` that names a BMC,
    in method order (see :func:`identity`)."""
    if bmc is None:
        return []
    return [i for i in map(_identity, bmc.methods) if i is not None]


def identity(bmc):
    """(host, port, system) naming one BMC and the system behind it,
    whatever host name the inventory files it under and however its address
    is spelt (case, trailing slash, default port); None when it names no
    BMC (noop). ``system`` is "" when the entry does not choose one.

    For an entry with several methods this is the first method that names a
    BMC (so ``identity(bmc) is None`` still means "no method reaches any
    BMC"); :func:`identities` lists them all."""
    found = identities(bmc)
    return found[0] if found else None


def method_key(method):
    """A stable text naming one fencing method of an entry: its driver
    and the BMC it reaches (see :func:`identity`), so that evidence kept
    about it (instanceha.policy.proof) follows the BMC, not its spelling,
    and a changed entry starts with none."""
    ident = _identity(method)
    if ident is None:
        return "%s:%s" % (method.driver, method.address or method.host)
    return "%s:%s" % (method.driver, "|".join(ident))


@functools.lru_cache(maxsize=4096)
def resolve(host):
    """The addresses a BMC's host part stands for: itself for an IP
    address, else what the name resolves to (and the name itself, so a
    name that does not resolve still equals itself). Cached for the
    process: one machine entered once by IP and once by DNS name is one
    BMC."""
    try:
        return frozenset({str(ipaddress.ip_address(host))})
    except ValueError:
        pass
    found = {host}
    try:
        for info in socket.getaddrinfo(host, None):
            found.add(str(ipaddress.ip_address(info[4][0].split("%")[0])))
    except (OSError, ValueError, UnicodeError):
        pass
    return frozenset(found)


def _same_host(a, b, resolver):
    if a == b:
        return True
    if resolver is None or not a or not b:
        return False
    return bool(resolver(a) & resolver(b))


def _same_identity(ia, ib, resolver=None):
    if ia[1] != ib[1] or not _same_host(ia[0], ib[0], resolver):
        return False
    return ia[2] == ib[2] or not ia[2] or not ib[2]


def same_bmc(a, b, resolver=None):
    """Both entries reach one BMC (and one system behind it: an entry that
    chooses none reaches whichever system the BMC has): true when any
    method of one reaches the BMC of any method of the other. With
    ``resolver`` (e.g. :func:`resolve`), a BMC entered by IP address and
    by a DNS name of that address is one BMC."""
    theirs = identities(b)
    return any(_same_identity(mine, t, resolver)
               for mine in identities(a) for t in theirs)


def shared(inventory, resolver=None):
    """[(address, [host, ...])] for BMCs that several entries reach (by any
    of their methods): one group per BMC, ``address`` as the first host's
    method spells it. A host whose methods reach two shared BMCs is in two
    groups."""
    hosts = sorted(inventory)
    groups = []
    for i, host in enumerate(hosts):
        for method in inventory[host].methods:
            mine = _identity(method)
            if mine is None:
                continue
            mates = [other for other in hosts[i + 1:]
                     if any(_same_identity(mine, theirs, resolver)
                            for theirs in identities(inventory[other]))]
            group = [host] + mates
            if mates and not any(set(group) <= set(g) for _, g in groups):
                groups.append((method.address, group))
    return groups


# -- secrets -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModeWarning:
    """A file holding a secret that users other than its owner may read.
    Names the file and its mode, never what it holds."""

    path: str
    mode: int
    what: str           # "password file" or "inventory"

    def __str__(self):
        return ("%s %s is readable by its group or others (mode %04o); "
                "chmod 600 it" % (self.what, self.path, self.mode))


def _readable_by_others(mode):
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


class _Secrets:
    """Reads password files and variables once per parse, noting files
    with a loose mode."""

    def __init__(self, base_dir, environ):
        self.base_dir = base_dir
        self.environ = os.environ if environ is None else environ
        self.files = {}
        self.warnings = []

    def from_file(self, where, path):
        if not os.path.isabs(path) and self.base_dir:
            path = os.path.join(self.base_dir, path)
        if path in self.files:
            return self.files[path]
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                raw = f.read()
        except OSError as e:
            raise InventoryError("%s: field password_file: cannot read %s: %s"
                                 % (where, path, e.strerror or e))
        except ValueError as e:     # a NUL in the path
            raise InventoryError("%s: field password_file: cannot read %r: "
                                 "%s" % (where, path, e))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InventoryError("%s: field password_file: %s is not UTF-8 "
                                 "text" % (where, path))
        text = text.rstrip("\r\n")
        if not text:
            raise InventoryError("%s: field password_file: %s is empty"
                                 % (where, path))
        if _readable_by_others(mode):
            self.warnings.append(ModeWarning(path, stat.S_IMODE(mode),
                                             "password file"))
        self.files[path] = text
        return text

    def from_env(self, where, name):
        value = self.environ.get(name)
        if value is None:
            raise InventoryError("%s: field password_env: environment "
                                 "variable %s is not set" % (where, name))
        if not value:
            raise InventoryError("%s: field password_env: environment "
                                 "variable %s is empty" % (where, name))
        return value


def _sources(level):
    return [f for f in SECRET_FIELDS if f in level]


def _check_sources(where, level):
    found = _sources(level)
    if len(found) > 1:
        raise InventoryError("%s: fields %s and %s are both set; a password "
                             "comes from one of %s" % (
                                 where, found[0], found[1],
                                 ", ".join(SECRET_FIELDS)))
    for field in found:
        if not isinstance(level[field], str):
            raise InventoryError("%s: field %s must be a string"
                                 % (where, field))
        if field != "password" and not level[field]:
            raise InventoryError("%s: field %s is empty" % (where, field))


# -- parsing -----------------------------------------------------------------

def _merge(levels):
    """Fields of ``levels`` (least specific first), except that the password
    source comes only from the most specific level that names one."""
    merged = {}
    for level in levels:
        if _sources(level):
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
    if "password_file" in merged:
        password = secrets.from_file(where, merged["password_file"])
    elif "password_env" in merged:
        password = secrets.from_env(where, merged["password_env"])
    else:
        password = merged.get("password", "")
    options = {k: v for k, v in merged.items() if k not in _NOT_OPTIONS}
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
    if "methods" in defaults:
        raise InventoryError("inventory: defaults: field methods belongs to "
                             "a host, not to defaults")
    _check_sources("inventory: defaults", defaults)
    secrets = _Secrets(base_dir, environ)
    result = {}
    for host, entry in data["hosts"].items():
        host = str(host)
        where = "inventory: host %s" % host
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise InventoryError("%s: entry must be a mapping" % where)
        _check_sources(where, entry)
        levels = [defaults, {k: v for k, v in entry.items() if k != "methods"}]
        if "methods" not in entry:
            merged = _merge(levels)
            result[host] = _method(where, host, merged, known_drivers,
                                   known_fields, secrets)
            continue
        listed = entry["methods"]
        if not isinstance(listed, (list, tuple)) or not listed:
            raise InventoryError("%s: field methods must be a non-empty list "
                                 "of mappings" % where)
        methods = []
        for index, method in enumerate(listed, 1):
            mwhere = "%s: method %d" % (where, index)
            if not isinstance(method, Mapping):
                raise InventoryError("%s: must be a mapping" % mwhere)
            if "methods" in method:
                raise InventoryError("%s: field methods cannot be nested"
                                     % mwhere)
            _check_sources(mwhere, method)
            merged = _merge(levels + [method])
            methods.append(_method(mwhere, host, merged, known_drivers,
                                   known_fields, secrets))
        result[host] = dataclasses.replace(methods[0],
                                           fallbacks=tuple(methods[1:]))
    return result, secrets.warnings, _holds_inline(data)


def _holds_inline(data):
    """Whether the (valid) inventory writes a password itself, anywhere."""
    levels = [data.get("defaults") or {}]
    for entry in data["hosts"].values():
        levels.append(entry or {})
        levels.extend((entry or {}).get("methods") or ())
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
        raise InventoryError("inventory: cannot read %s: %s"
                             % (path, e.strerror or e))
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
    inv, warnings, inline = _parse(data, known_drivers, base_dir, environ)
    if inline and _readable_by_others(mode):
        warnings.insert(0, ModeWarning(path, stat.S_IMODE(mode), "inventory"))
    return inv, warnings


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
