"""Fuzz the BMC inventory loader: random mappings given to ``parse``, and
random or mutated YAML files given to ``read``.

Property: the loader answers an inventory ({host: BMC}) or raises its
documented :class:`InventoryError`, never another exception; an accepted
inventory holds BMC entries whose fields have the documented types.
"""

import os

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from instanceha.drivers.fencing import inventory
from tests.fuzz import budget
from tests.fuzz import gen

DRIVERS = {"redfish": ("system_id", "verify"), "ipmi": ("port", "lanplus"),
           "noop": (), "bmh": ("namespace", "name", "api_url")}
KEYS = sorted({"hosts", "defaults", "methods", "driver", "address",
               "username", "password", "password_file", "password_env",
               "system_id", "verify", "port", "namespace", "name",
               "compute-0", "compute-1"})
EXTRA = ("redfish", "ipmi", "noop", "bmh", "https://10.0.0.5", "10.0.1.6",
         "admin", "pw", "pass.txt", "/nonexistent/x", "BMC_PASS", "",
         "\x00", True, None, [], {})
ENV = {"BMC_PASS": "from-env", "EMPTY": ""}
VALID = {
    "defaults": {"driver": "redfish"},
    "hosts": {
        "compute-0": {"address": "https://10.0.0.5", "username": "admin",
                      "password_file": "pass.txt",
                      "system_id": "/redfish/v1/Systems/1", "verify": True},
        "compute-1": {"username": "admin", "password_env": "BMC_PASS",
                      "methods": [{"driver": "redfish",
                                   "address": "https://10.0.0.6"},
                                  {"driver": "ipmi", "address": "10.0.1.6",
                                   "port": 623}]},
        "compute-2": {"driver": "noop"},
        "compute-3": {"driver": "ipmi", "address": "10.0.1.7",
                      "password": "inline"},
    },
}
VALID_TEXT = yaml.safe_dump(VALID, sort_keys=False)


def check_result(result):
    assert isinstance(result, dict)
    for host, bmc in result.items():
        assert isinstance(host, str) and isinstance(bmc, inventory.BMC)
        for method in bmc.methods:
            assert method.driver in DRIVERS
            assert isinstance(method.address, str)
            assert isinstance(method.username, str)
            assert isinstance(method.password, str)
        str(bmc), repr(bmc), inventory.identities(bmc)


def check_mapping(data, base_dir):
    try:
        result = inventory.parse(data, DRIVERS, base_dir=base_dir,
                                 environ=ENV)
    except inventory.InventoryError as e:
        assert str(e).startswith("inventory")
        return None
    check_result(result)
    inventory.shared(result)
    return result


def check_text(text, path):
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(text)
    os.chmod(path, 0o600)
    try:
        result, warnings = inventory.read(path, DRIVERS, environ=ENV)
    except inventory.InventoryError as e:
        assert str(e).startswith("inventory")
        return None
    check_result(result)
    return result


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("inventory")
    (d / "pass.txt").write_text("from-file\n")
    os.chmod(d / "pass.txt", 0o600)
    return str(d)



def test_valid_inventory_is_accepted(base_dir):
    result = check_text(VALID_TEXT, os.path.join(base_dir, "valid.yaml"))
    assert sorted(result) == ["compute-0", "compute-1", "compute-2",
                              "compute-3"]
    assert result["compute-0"].password == "from-file"
    assert [m.driver for m in result["compute-1"].methods] == ["redfish",
                                                                "ipmi"]


MAPPINGS = budget.json_like(KEYS) | st.fixed_dictionaries(
    {"hosts": st.dictionaries(st.sampled_from(KEYS) | st.integers()
                              | st.text(max_size=5),
                              budget.json_like(KEYS, max_leaves=10)
                              | st.sampled_from(EXTRA), max_size=3)},
    optional={"defaults": budget.json_like(KEYS, max_leaves=6)})


@budget.fuzz_settings(short=200)
@given(data=MAPPINGS, rnd=st.randoms(use_true_random=False))
def test_random_mappings(counter, base_dir, data, rnd):
    counter()
    check_mapping(data, base_dir)
    for _ in range(budget.BATCH):
        counter()
        if rnd.random() < 0.5:
            check_mapping(gen.mutate(rnd, VALID, KEYS, EXTRA), base_dir)
        else:
            check_mapping({"hosts": gen.json_like(rnd, KEYS)}
                          if rnd.random() < 0.5
                          else gen.json_like(rnd, KEYS), base_dir)


@st.composite
def yaml_texts(draw):
    pick = draw(st.integers(0, 2))
    if pick == 0:
        return draw(st.text(max_size=200))
    if pick == 1:
        return yaml.safe_dump(draw(MAPPINGS))
    text = VALID_TEXT
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=4) | st.sampled_from(
            [":", "- ", "\n", "{", "[", "&a ", "*a", "!!python/object ",
             "2026-13-45", "0x", "1" * 5000, "\t", "? "])) \
            + text[i + draw(st.integers(0, 6)):]
    return text


@budget.fuzz_settings(short=200)
@given(text=yaml_texts(), rnd=st.randoms(use_true_random=False))
def test_random_and_mutated_files(counter, base_dir, text, rnd):
    path = os.path.join(base_dir, "inventory.yaml")
    counter()
    check_text(text, path)
    for _ in range(budget.BATCH):
        counter()
        if rnd.random() < 0.8:
            check_text(gen.mutate_text(rnd, VALID_TEXT), path)
        else:
            check_text(yaml.safe_dump(gen.mutate(rnd, VALID, KEYS, EXTRA)),
                       path)


# -- defects the fuzzing found (each failed before the loader's fix) --------

@pytest.mark.parametrize("data", [
    # sorting unknown fields named by a number and by a string: TypeError
    {"hosts": {"a": {"driver": "noop", 1: "x", "zz": 2}}},
    # a NUL in a password file's path: open() raised ValueError
    {"hosts": {"a": {"driver": "noop", "password_file": "a\x00b"}}},
    # accepted, then identity() (same-BMC checks) raised ValueError
    {"hosts": {"a": {"driver": "redfish", "address": "https://[10.0.0.5"}}},
], ids=["mixed_key_types", "nul_in_password_file", "bad_url"])
def test_defect_mappings_raise_inventory_error(base_dir, data):
    with pytest.raises(inventory.InventoryError):
        inventory.parse(data, DRIVERS, base_dir=base_dir, environ=ENV)


@pytest.mark.parametrize("text", [
    "hosts: {a: {driver: noop, x: 2026-13-45}}\n",    # date out of range
    "hosts:\n  a: " + "1" * 5000 + "\n",               # int digit limit
    'hosts: {a: {driver: noop, password_file: "\\0"}}\n',
    "hosts: {a: {driver: noop, 1: x, b: y}}\n",
    "[" * 5000,                                        # nesting: recursion
    "hosts: " + "{a: " * 3000,
], ids=["bad_date", "long_int", "nul_path", "mixed_keys", "deep_list",
        "deep_map"])
def test_defect_files_raise_inventory_error(base_dir, text):
    path = os.path.join(base_dir, "defect.yaml")
    with open(path, "w") as f:
        f.write(text)
    with pytest.raises(inventory.InventoryError):
        inventory.read(path, DRIVERS, environ=ENV)
    assert inventory.reload(path, DRIVERS, {}, environ=ENV).error
