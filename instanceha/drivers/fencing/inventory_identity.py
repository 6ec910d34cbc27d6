"""Which inventory entries reach one BMC (and one system behind it).

:func:`identity` names the BMC an entry reaches however its address is
spelt; :func:`same_bmc` and :func:`shared` compare entries (by every
fencing method), with :func:`resolve` when an IP address and a DNS name
may be one machine; :func:`method_key` names one method for the evidence
kept about it.
"""

import functools
import ipaddress
import socket
import urllib.parse
from typing import Mapping


_DEFAULT_PORTS = {"https": 443, "http": 80, "redfish": 443, "ipmi": 623}


def method_identity(bmc):
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
    return [i for i in map(method_identity, bmc.methods) if i is not None]


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
    ident = method_identity(method)
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
            mine = method_identity(method)
            if mine is None:
                continue
            mates = [other for other in hosts[i + 1:]
                     if any(_same_identity(mine, theirs, resolver)
                            for theirs in identities(inventory[other]))]
            group = [host] + mates
            if mates and not any(set(group) <= set(g) for _, g in groups):
                groups.append((method.address, group))
    return groups
