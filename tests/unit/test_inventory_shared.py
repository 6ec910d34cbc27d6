"""inventory_identity.shared(): the BMCs several entries reach, found
through an index; its answers are the pairwise comparison's (kept here as
the reference), on a large inventory and on random small ones."""

import dataclasses
import random

from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing import inventory_identity as ident
from instanceha.drivers.fencing.inventory import BMC


def pairwise_shared(inv, resolver=None):
    """The former shared(): every method of every host against every later
    host's methods. The reference the indexed one must agree with."""
    hosts = sorted(inv)
    groups = []
    for i, host in enumerate(hosts):
        for method in inv[host].methods:
            mine = ident.method_identity(method)
            if mine is None:
                continue
            mates = [other for other in hosts[i + 1:]
                     if any(ident._same_identity(mine, theirs, resolver)
                            for theirs in ident.identities(inv[other]))]
            group = [host] + mates
            if mates and not any(set(group) <= set(g) for _, g in groups):
                groups.append((method.address, group))
    return groups


class Resolver:
    """A DNS stand-in: names map to address sets, IPs to themselves; counts
    the names asked."""

    def __init__(self, names):
        self.names = names
        self.asked = []

    def __call__(self, host):
        self.asked.append(host)
        if host in self.names:
            return frozenset({host} | set(self.names[host]))
        return frozenset({host})


def _redfish(host, address, system=None, fallbacks=()):
    options = {"system_id": system} if system else {}
    return BMC(host=host, driver="redfish", address=address, options=options,
               fallbacks=tuple(fallbacks))


def test_large_inventory_groups_by_address_and_by_name():
    inv = {}
    for n in range(5000):
        host = "c%05d" % n
        inv[host] = _redfish(host, "https://10.%d.%d.%d" % (
            n // 65536, n // 256 % 256, n % 256))
    # c00010's BMC entered again for c04000, spelt differently
    inv["c04000"] = _redfish("c04000", "HTTPS://10.0.0.10:443/")
    # c00020's BMC entered by name for c04001 (the name resolves to it)
    inv["c04001"] = _redfish("c04001", "https://bmc-20.example")
    # a chassis: three entries, one BMC, different systems, one without
    inv["c04002"] = _redfish("c04002", "https://chassis", "/Systems/1")
    inv["c04003"] = _redfish("c04003", "https://chassis", "/Systems/2")
    inv["c04004"] = _redfish("c04004", "https://chassis")
    # a second method reaching c00030's BMC by IPMI
    inv["c04005"] = _redfish(
        "c04005", "https://10.200.0.1",
        fallbacks=[BMC(host="c04005", driver="ipmi", address="10.0.0.30")])
    inv["c00031"] = BMC(host="c00031", driver="ipmi", address="10.0.0.30")
    resolver = Resolver({"bmc-20.example": ["10.0.0.20"]})

    expected_common = [("https://10.0.0.10", ["c00010", "c04000"]),
                       ("10.0.0.30", ["c00031", "c04005"]),
                       ("https://chassis", ["c04002", "c04004"]),
                       ("https://chassis", ["c04003", "c04004"])]
    assert ident.shared(inv) == expected_common
    got = ident.shared(inv, resolver)
    assert got == [expected_common[0],
                   ("https://10.0.0.20", ["c00020", "c04001"]),
                   *expected_common[1:]]
    # each name asked once, not once per pair
    assert sorted(resolver.asked) == sorted(set(resolver.asked))


def test_names_are_resolved_only_where_pairs_would_compare_them():
    inv = {"a": _redfish("a", "https://bmc-a"),
           "b": BMC(host="b", driver="ipmi", address="bmc-b"),
           "c": _redfish("c", "https://bmc-c", fallbacks=[
               _redfish("c", "https://bmc-d")])}
    resolver = Resolver({})
    assert ident.shared(inv, resolver) == []
    # b's port is its own, c's two methods are one entry: only the
    # redfish names of different entries meet
    assert sorted(resolver.asked) == ["bmc-a", "bmc-c", "bmc-d"]
    resolver = Resolver({})
    pairwise_shared(inv, resolver)
    assert set(resolver.asked) == {"bmc-a", "bmc-c", "bmc-d"}


def test_one_name_one_bmc_is_not_transitive():
    # n1 and n2 share an address, n2 and n3 share another: n1 and n3 are
    # not one BMC, so the groups stay apart
    inv = {h: _redfish(h, "https://" + name)
           for h, name in (("a", "n1"), ("b", "n2"), ("c", "n3"))}
    resolver = Resolver({"n1": ["10.0.0.1"], "n2": ["10.0.0.1", "10.0.0.2"],
                         "n3": ["10.0.0.2"]})
    assert ident.shared(inv, resolver) == [("https://n1", ["a", "b"]),
                                           ("https://n2", ["b", "c"])]


_ADDRESSES = ["https://r1", "https://R1/", "https://r1:8443", "https://r2",
              "https://10.0.0.1", "http://r1", "https://n1", "https://n2",
              "https://", "10.0.0.1", "r1", "n1", "n3"]
_SYSTEMS = [None, None, "/Systems/1", "/Systems/1/", "/Systems/2"]
_NAMES = {"n1": ["10.0.0.1"], "n2": ["10.0.0.1", "10.0.0.2"],
          "n3": ["10.0.0.2"], "r1": ["10.0.0.3"], "r2": ["10.0.0.3"]}


def _random_method(rng, host):
    kind = rng.choice(["redfish", "redfish", "ipmi", "fence_agent", "bmh",
                       "noop"])
    if kind == "noop":
        return BMC(host=host, driver="noop")
    if kind == "bmh":
        options = {"api_url": rng.choice(["https://k8s:6443", "https://K8S",
                                          ""]),
                   "namespace": "m", "name": rng.choice(["x", "y", None])}
        return BMC(host=host, driver="bmh", options=options)
    address = rng.choice(_ADDRESSES)
    options = {}
    system = rng.choice(_SYSTEMS)
    if system:
        options["system_id"] = system
    if kind == "ipmi":
        address = address.split("://")[-1].rstrip("/") or "r1"
        if rng.random() < 0.3:
            options["port"] = rng.choice([623, 6230])
    if kind == "fence_agent":
        address = address.split("://")[-1].rstrip("/") or "r1"
        options["params"] = {"ipport": rng.choice([443, 623, 6230])}
    return BMC(host=host, driver=kind, address=address, options=options)


def _random_inventory(rng):
    inv = {}
    for _ in range(rng.randint(0, 12)):
        host = "h%d" % rng.randint(0, 30)
        methods = [_random_method(rng, host)
                   for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        inv[host] = dataclasses.replace(methods[0],
                                        fallbacks=tuple(methods[1:]))
    return inv


def test_indexed_agrees_with_pairwise_on_random_inventories():
    rng = random.Random(20240611)
    for _ in range(3000):
        inv = _random_inventory(rng)
        assert ident.shared(inv) == pairwise_shared(inv), inv
        new, old = Resolver(_NAMES), Resolver(_NAMES)
        assert ident.shared(inv, new) == pairwise_shared(inv, old), inv
        # the names asked are the ones the pairwise comparison asks (it may
        # skip one once an earlier method of that entry already matched)
        assert set(old.asked) <= set(new.asked), inv
        assert len(new.asked) == len(set(new.asked))


def test_reexported_from_inventory():
    assert inventory.shared is ident.shared
