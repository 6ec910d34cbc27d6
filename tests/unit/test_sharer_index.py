"""The indexes behind the shared-machine check at each fence (actions.
live_sharers): the hosts whose entries reach one BMC (Context.bmc_mates)
and the hosts whose BMCs reported one system UUID (EvidenceStore.
same_machine_hosts) are exactly what comparing every entry finds, and
follow changes of the inventory and of the evidence."""

import dataclasses

from hypothesis import given, settings, strategies as st

from instanceha.drivers.fencing import inventory
from instanceha.drivers.fencing.inventory import BMC
from instanceha.engine.evidence import EvidenceStore
from instanceha.journal.store import Journal
from tests.unit.test_engine import World

ADDRESSES = ["https://10.0.0.1", "https://10.0.0.1:443/", "https://10.0.0.2",
             "10.0.0.1", "https://LOCALHOST", "https://127.0.0.1"]
SYSTEMS = ["", "sys-a", "sys-b"]

#: System UUIDs as BMCs report them (canonical text).
U1, U2, U3 = ("0f3c2b1a-1111-4a5b-8c9d-%012d" % i for i in (1, 2, 3))


def _entry(host, picks):
    methods = tuple(BMC(host=host, driver="redfish", address=ADDRESSES[a],
                        options={"system_id": SYSTEMS[s]} if SYSTEMS[s]
                        else {}) for a, s in picks)
    return dataclasses.replace(methods[0], fallbacks=methods[1:])


entries = st.lists(st.lists(st.tuples(
    st.integers(0, len(ADDRESSES) - 1), st.integers(0, len(SYSTEMS) - 1)),
    min_size=1, max_size=2), min_size=1, max_size=7)


@settings(max_examples=60, deadline=None)
@given(entries)
def test_mates_hold_every_entry_reaching_one_bmc(picks):
    w = World(hosts=1, servers=0)
    w.ctx.inventory = {"h%d" % i: _entry("h%d" % i, p)
                       for i, p in enumerate(picks)}
    for name, bmc in w.ctx.inventory.items():
        brute = {other for other, e in w.ctx.inventory.items()
                 if other != name
                 and inventory.same_bmc(bmc, e, inventory.resolve)}
        mates = w.ctx.bmc_mates(name, bmc)
        # Every entry reaching one BMC, maybe more (not transitive), each
        # of which the caller compares.
        assert brute <= mates and name not in mates
        assert {m for m in mates if inventory.same_bmc(
            bmc, w.ctx.inventory[m], inventory.resolve)} == brute


def test_mates_follow_an_entry_changed_in_place_and_a_default_entry():
    w = World(hosts=1, servers=0)
    a = BMC(host="a", driver="redfish", address="https://10.0.0.1")
    w.ctx.inventory = {"a": a,
                       "b": BMC(host="b", driver="redfish",
                                address="https://10.0.0.2")}
    assert w.ctx.bmc_mates("a", a) == set()
    w.ctx.inventory["b"] = BMC(host="b", driver="redfish",
                               address="https://10.0.0.1/")
    assert w.ctx.bmc_mates("a", a) == {"b"}
    # A host without an entry of its own (the default driver's entry):
    # compared with every entry.
    default = BMC(host="c", driver="redfish", address="https://10.0.0.1")
    assert w.ctx.bmc_mates("c", default) == {"a", "b"}


def test_hosts_reporting_one_system_uuid_are_found_and_forgotten():
    store = EvidenceStore(Journal("sqlite://"), lambda: 0.0)
    ipmi = BMC(host="a", driver="ipmi", address="10.0.0.9")
    redfish = BMC(host="b", driver="redfish", address="https://10.0.0.8")
    other = BMC(host="c", driver="redfish", address="https://10.0.0.7")
    key = inventory.method_key
    store.identity_key("a", key(ipmi), {"uuids": [U1.upper()]})
    store.identity_key("b", key(redfish), {"uuids": [U1, U2]})
    store.identity_key("c", key(other), {"uuids": [U3]})
    assert store.same_machine_hosts(ipmi) == {"b"}
    assert store.same_machine_hosts(redfish) == {"a"}
    assert store.same_machine_hosts(other) == set()
    assert store.same_machine(ipmi, redfish)
    # b's BMC now reports another machine: a and b are no longer one.
    store.identity_key("b", key(redfish), {"uuids": [U3]})
    assert store.same_machine_hosts(ipmi) == set()
    assert store.same_machine_hosts(other) == {"b"}
    assert store.same_machine_hosts(None) == set()


def test_the_index_is_rebuilt_from_the_journal():
    journal = Journal("sqlite://")
    first = EvidenceStore(journal, lambda: 0.0)
    a = BMC(host="a", driver="ipmi", address="10.0.0.9")
    b = BMC(host="b", driver="redfish", address="https://10.0.0.8")
    first.identity_key("a", inventory.method_key(a), {"uuids": [U1]})
    first.identity_key("b", inventory.method_key(b), {"uuids": [U1]})
    again = EvidenceStore(journal, lambda: 0.0)
    assert again.load() == 2
    assert again.same_machine_hosts(a) == {"b"}


def test_the_index_is_made_once_for_many_fences_at_once(monkeypatch):
    # 20 hosts dying together: their fences all ask at once. The index is
    # made at start (index_bmcs) and then shared: each fence making its
    # own cost 0.15 s of CPU at 20,000 hosts, one after another.
    import threading
    w = World(hosts=1, servers=0)
    w.ctx.inventory = {"h%d" % i: BMC(host="h%d" % i, driver="redfish",
                                      address="https://10.0.1.%d" % i)
                       for i in range(20)}
    made = []
    real = inventory.shared

    def shared(*args, **kw):
        made.append(1)
        return real(*args, **kw)
    monkeypatch.setattr(inventory, "shared", shared)
    w.ctx.index_bmcs()
    answers = {}

    def fence(name):
        answers[name] = w.ctx.bmc_mates(name, w.ctx.inventory[name])
    threads = [threading.Thread(target=fence, args=(n,))
               for n in w.ctx.inventory]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == {n: set() for n in w.ctx.inventory}
    assert len(made) == 1
