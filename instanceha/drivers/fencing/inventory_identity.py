"""Which inventory entries reach one BMC (and one system behind it).

:func:`identity` names the BMC an entry reaches however its address is
spelt; :func:`same_bmc` and :func:`shared` compare entries (by every
fencing method), with :func:`resolve` when an IP address and a DNS name
may be one machine; :func:`method_key` names one method for the evidence
kept about it.
"""

import bisect
import functools
import ipaddress
import socket
import urllib.parse
from collections.abc import Mapping


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
    and a changed entry starts with none. Kept on the method (an entry is
    frozen): status names every host's methods at each write."""
    held = getattr(method, "__dict__", {}).get("_method_key")
    if held is not None:
        return held
    ident = method_identity(method)
    if ident is None:
        key = "%s:%s" % (method.driver, method.address or method.host)
    else:
        key = "%s:%s" % (method.driver, "|".join(ident))
    try:
        object.__setattr__(method, "_method_key", key)
    except (AttributeError, TypeError):    # no instance dict: not kept
        pass
    return key


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
    groups.

    The answer is the pairwise one (each method of each host, in host
    order, against every later host's methods, by the rules of
    :func:`same_bmc`), found through an index instead of by comparing
    every pair: entries are filed under (port, host as spelt) and, with
    ``resolver``, under (port, each address the host resolves to), each
    split by system; a method then meets only the entries that can reach
    its BMC. "One BMC" is not transitive (an entry without a system meets
    every system of its BMC; two names may share one address each with a
    third), so groups are what each method meets, never merged classes.
    ``resolver`` is asked once per host name, and only for names the
    pairwise comparison would ask about: a name at a port where another
    entry names a different, non-empty host."""
    hosts = sorted(inventory)
    found = [[(m, method_identity(m)) for m in inventory[h].methods]
             for h in hosts]
    resolved = _resolved_names(found, resolver)
    index = {}
    for j, methods in enumerate(found):
        for _, ident in methods:
            if ident is None:
                continue
            for key in _keys(ident, resolved):
                lst = index.setdefault(key, {}).setdefault(ident[2], [])
                if not lst or lst[-1] != j:
                    lst.append(j)
    groups = []
    member_of = {}          # host -> [set of a group it is in]
    for i, (host, methods) in enumerate(zip(hosts, found)):
        for method, mine in methods:
            if mine is None:
                continue
            mates = set()
            for key in _keys(mine, resolved):
                by_system = index.get(key, {})
                if mine[2]:
                    lists = (by_system.get(mine[2], ()), by_system.get("", ()))
                else:
                    lists = by_system.values()
                for lst in lists:
                    mates.update(lst[bisect.bisect_right(lst, i):])
            if not mates:
                continue
            group = [host] + [hosts[j] for j in sorted(mates)]
            # a group holding this one holds ``host``
            if any(g.issuperset(group) for g in member_of.get(host, ())):
                continue
            groups.append((method.address, group))
            members = set(group)
            for h in group:
                member_of.setdefault(h, []).append(members)
    return groups


def _resolved_names(found, resolver):
    """{(port, host): addresses} for the names the pairwise comparison
    resolves: each non-empty host at a port where at least two entries name
    non-empty hosts and at least two such hosts differ (there some entry's
    host meets a different host of another entry); {} without ``resolver``.
    Each name is asked once."""
    if resolver is None:
        return {}
    by_port = {}            # port -> ({host}, {entry})
    for j, methods in enumerate(found):
        for _, ident in methods:
            if ident is not None and ident[0]:
                names, entries = by_port.setdefault(ident[1], (set(), set()))
                names.add(ident[0])
                entries.add(j)
    addresses = {}
    resolved = {}
    for port, (names, entries) in by_port.items():
        if len(names) < 2 or len(entries) < 2:
            continue
        for name in sorted(names):
            if name not in addresses:
                addresses[name] = resolver(name)
            resolved[(port, name)] = addresses[name]
    return resolved


def _keys(ident, resolved):
    """Where an identity is filed and looked up: its host as spelt (equal
    hosts are one BMC), and each address its host resolves to when the
    port's hosts are resolved (two hosts sharing one address are one
    BMC)."""
    host, port = ident[0], ident[1]
    keys = [(port, "=", host)]
    for address in resolved.get((port, host), ()):
        keys.append((port, "~", address))
    return keys
