"""Fencing levels (Pacemaker's topology): the inventory's ``levels:`` form
(each level one method or a set of methods that must all succeed), the
chain through them, and what a level of storage fencing only proves."""

import pytest
from structlog.testing import capture_logs

from instanceha.drivers.fencing import FIELDS as KNOWN
from instanceha.drivers.fencing import chain, inventory
from instanceha.drivers.fencing.base import (HOST, STORAGE, BmcUnreachable,
                                             FenceError, FencingDriver,
                                             PowerState)
from instanceha.drivers.fencing.inventory_entry import InventoryError

KNOWN = dict(KNOWN, watchdog=set())
REDFISH = {"driver": "redfish", "address": "https://10.0.0.5",
           "password": "pw-SECRET"}
CEPH = {"driver": "ceph_blocklist", "addresses": ["10.0.1.5"],
        "protects": ["volumes"]}
WATCHDOG = {"driver": "watchdog"}


class Power(FencingDriver):
    name = "redfish"

    def __init__(self, calls, fail=None):
        self.calls, self.fail = calls, fail

    def power_off(self, bmc):
        self.calls.append(("off", bmc.driver))
        if self.fail is not None:
            raise self.fail

    def power_state(self, bmc):
        return PowerState.OFF


class Storage(FencingDriver):
    """A storage fencing method that keeps its entries."""
    name = "ceph_blocklist"
    proves = STORAGE

    def __init__(self, calls, fail=None):
        self.calls, self.fail = calls, fail
        self.listed = set()

    def fence(self, bmc):
        self.calls.append(("fence", bmc.driver))
        if self.fail is not None:
            raise self.fail
        self.listed.update(bmc.options["addresses"])

    def still_fenced(self, bmc):
        gone = set(bmc.options["addresses"]) - self.listed
        return "gone: %s" % sorted(gone) if gone else None

    def unfence(self, bmc):
        self.calls.append(("unfence", bmc.driver))
        self.listed.difference_update(bmc.options["addresses"])

    def power_off(self, bmc):
        raise AssertionError("storage fencing powers nothing off")

    def power_state(self, bmc):
        return PowerState.UNKNOWN


class Watchdog(FencingDriver):
    """Proves death by time: nothing to power, the host reset itself."""
    name = "watchdog"
    proves = HOST

    def __init__(self, calls, fail=None):
        self.calls, self.fail = calls, fail

    def fence(self, bmc):
        self.calls.append(("fence", bmc.driver))
        if self.fail is not None:
            raise self.fail

    def power_off(self, bmc):
        raise AssertionError("a watchdog powers nothing off")

    def power_state(self, bmc):
        return PowerState.UNKNOWN


def _fencer(fails=None):
    calls = []
    fails = fails or {}
    drivers = {"redfish": Power(calls, fails.get("redfish")),
               "ceph_blocklist": Storage(calls, fails.get("ceph_blocklist")),
               "watchdog": Watchdog(calls, fails.get("watchdog"))}
    return drivers.__getitem__, calls, drivers


def _entry(levels, **host):
    return inventory.parse({"hosts": {"compute-0": dict(
        host, levels=levels)}}, KNOWN)["compute-0"]


def _errors(data):
    with pytest.raises(InventoryError) as e:
        inventory.parse(data, KNOWN)
    return e.value.errors


# -- the inventory -----------------------------------------------------------

def test_levels_hold_single_methods_and_sets():
    bmc = _entry([REDFISH, [WATCHDOG, CEPH]])
    assert [[m.driver for m in level] for level in bmc.levels] == \
        [["redfish"], ["watchdog", "ceph_blocklist"]]
    # Only the method with a BMC is read for power and evidence.
    assert [m.driver for m in bmc.methods] == ["redfish"]
    assert [m.driver for m in bmc.all_methods] == \
        ["redfish", "watchdog", "ceph_blocklist"]
    assert bmc.levels[1][1].options == {"addresses": ["10.0.1.5"],
                                        "protects": ["volumes"]}
    assert "levels: redfish https://10.0.0.5; watchdog + ceph_blocklist" \
        in str(bmc)


def test_the_methods_form_is_one_level_per_method():
    bmc = inventory.parse({"hosts": {"c": {"password": "x", "methods": [
        {"driver": "redfish", "address": "https://a"},
        {"driver": "ipmi", "address": "b"}]}}}, KNOWN)["c"]
    assert [[m.driver for m in lv] for lv in bmc.levels] == \
        [["redfish"], ["ipmi"]]
    assert bmc.grouping == ()


def test_host_fields_apply_to_each_method_of_a_level():
    bmc = _entry([{"driver": "redfish", "address": "https://a"},
                  [{"driver": "redfish", "address": "https://b"}, CEPH]],
                 username="admin", password="pw")
    assert {m.username for m in bmc.all_methods} == {"admin"}


@pytest.mark.parametrize("entry, error", [
    ({"methods": [REDFISH], "levels": [REDFISH]},
     "inventory: host c: fields methods and levels both given: keep one "
     "(levels replaces methods: each method of methods is a level of its "
     "own)"),
    ({"levels": []}, "inventory: host c: field levels must be a non-empty"),
    ({"levels": [REDFISH, []]},
     "inventory: host c: level 2: field levels must be a non-empty list"),
    ({"levels": [REDFISH, "redfish"]},
     "inventory: host c: level 2: field levels must be a non-empty list"),
    ({"levels": [[REDFISH, {"driver": "ceph_blocklist",
                            "addresses": ["10.0.1.5"]}]]},
     "inventory: host c: level 1: method 2: field protects is missing: "
     "say what of the host's servers is on this Ceph"),
    ({"levels": [{"driver": "ceph_blocklist", "protects": ["volumes"]}]},
     "inventory: host c: level 1: field addresses is missing: list the "
     "host's Ceph client addresses"),
    ({"levels": [dict(CEPH, addresses="10.0.1.5")]},
     "inventory: host c: level 1: field addresses must be a list"),
    ({"levels": [dict(CEPH, addresses=["ceph-0"])]},
     "inventory: host c: level 1: field addresses: 'ceph-0' is not an IP "
     "address or an IP:port/nonce client address; write an IP"),
    ({"levels": [dict(CEPH, protects=["rbd"])]},
     "inventory: host c: level 1: field protects: 'rbd' is not one of "
     "volumes, ephemeral"),
    ({"levels": [dict(REDFISH, levels=[REDFISH])]},
     "inventory: host c: level 1: field levels cannot be nested"),
])
def test_a_bad_level_is_one_line_naming_it_and_the_fix(entry, error):
    errors = _errors({"hosts": {"c": entry}})
    assert len(errors) == 1 and errors[0].startswith(error), errors


def test_levels_belong_to_a_host_not_to_defaults():
    assert _errors({"defaults": {"levels": [REDFISH]}, "hosts": {"c": {}}}) \
        == ["inventory: defaults: field levels belongs to a host, not to "
            "defaults"]


def test_ceph_addresses_are_read_as_ceph_lists_them():
    from instanceha.drivers.fencing import ceph_options
    assert ceph_options.normalize("10.0.1.5") == "10.0.1.5:0/0"
    assert ceph_options.normalize("fd00::5") == "[fd00::5]:0/0"
    assert ceph_options.normalize("10.0.1.5:6800/42") == "10.0.1.5:6800/42"
    assert ceph_options.normalize("[fd00::5]:1/2") == "[fd00::5]:1/2"
    with pytest.raises(ValueError):
        ceph_options.normalize("10.0.1.5:99999/1")


# -- the chain -----------------------------------------------------------------

def test_the_first_level_fences_as_one_method_did():
    fencer, calls, _ = _fencer()
    out = chain.fence(_entry([REDFISH, [WATCHDOG, CEPH]]), fencer)
    assert calls == [("off", "redfish")]
    assert (out.level, out.levels, out.scope) == (1, 2, HOST)
    assert out.describe() == ("fenced by level 1 (redfish "
                              "https://10.0.0.5)")


def test_a_set_fences_only_when_every_method_succeeds():
    fencer, calls, _ = _fencer({"redfish": BmcUnreachable("no answer")})
    with capture_logs() as logs:
        out = chain.fence(_entry([REDFISH, [WATCHDOG, CEPH]]), fencer)
    assert calls == [("off", "redfish"), ("fence", "watchdog"),
                     ("fence", "ceph_blocklist")]
    # The watchdog proves the host down: the level is not storage-only.
    assert (out.level, out.index, out.scope, out.protects) == \
        (2, 2, HOST, ())
    assert out.level_methods == ("watchdog", "ceph_blocklist")
    assert out.describe() == (
        "fenced by level 2 (watchdog + ceph_blocklist) after level 1 "
        "(redfish https://10.0.0.5) failed: no answer")
    detail = out.detail()
    assert (detail["level"], detail["levels"], detail["scope"]) == \
        (2, 2, HOST)
    assert detail["failed_methods"][0]["kind"] == "level"
    assert [e["event"] for e in logs] == ["fence_method_failed",
                                          "fenced_by_fallback"]


def test_a_method_failing_in_a_set_fails_its_level():
    fencer, calls, _ = _fencer({"watchdog": FenceError("never armed")})
    with pytest.raises(chain.FenceChainError) as e:
        chain.fence(_entry([[WATCHDOG, CEPH]]), fencer)
    # The set stops at the failing method; no level proved anything.
    assert calls == [("fence", "watchdog")]
    assert str(e.value) == (
        "host compute-0: no fencing level succeeded: level 1 (watchdog + "
        "ceph_blocklist): method 1 of the level (watchdog): never armed")


def test_a_set_failing_after_its_storage_method_undoes_it():
    fencer, calls, drivers = _fencer({"watchdog": FenceError("not due")})
    with capture_logs() as logs:
        with pytest.raises(chain.FenceChainError):
            chain.fence(_entry([[CEPH, WATCHDOG]]), fencer)
    assert calls == [("fence", "ceph_blocklist"), ("fence", "watchdog"),
                     ("unfence", "ceph_blocklist")]
    assert drivers["ceph_blocklist"].listed == set()
    assert "fence_set_undone" in [e["event"] for e in logs]


def test_a_level_of_storage_fencing_only_proves_only_storage():
    fencer, calls, drivers = _fencer({"redfish": FenceError("refused")})
    bmc = _entry([REDFISH, CEPH])
    out = chain.fence(bmc, fencer)
    assert (out.level, out.scope, out.protects) == (2, STORAGE, ("volumes",))
    assert out.describe().endswith(
        "; storage fencing only (the host may still run): only servers "
        "whose disks are on the fenced storage (volumes) may be evacuated")
    assert chain.still_fenced(bmc, 2, fencer) is None
    drivers["ceph_blocklist"].listed.clear()       # expired in Ceph
    assert chain.still_fenced(bmc, 2, fencer) == "gone: ['10.0.1.5']"
    assert "no longer in the inventory" in chain.still_fenced(bmc, 3,
                                                              fencer)
    # A level without storage fencing cannot be re-proven this way.
    assert "no fencing without power" in chain.still_fenced(bmc, 1, fencer)


def test_unfence_undoes_every_storage_method_and_names_failures():
    fencer, calls, drivers = _fencer()
    bmc = _entry([REDFISH, [WATCHDOG, CEPH]])
    drivers["ceph_blocklist"].listed.add("10.0.1.5")
    chain.unfence(bmc, fencer)
    # Power methods and the watchdog are left alone; the blocklist goes.
    assert calls == [("unfence", "ceph_blocklist")]
    assert drivers["ceph_blocklist"].listed == set()

    def broken(name):
        raise ValueError("driver %s refused to load" % name)
    with pytest.raises(FenceError) as e:
        chain.unfence(bmc, broken)
    assert str(e.value) == (
        "host compute-0: unfence failed: watchdog: driver watchdog refused "
        "to load; ceph_blocklist: driver ceph_blocklist refused to load")
