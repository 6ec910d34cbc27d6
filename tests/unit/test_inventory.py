import pytest

from instanceha import conf as conf_pkg
from instanceha import service
from instanceha.drivers.fencing import inventory, load_driver
from instanceha.drivers.fencing.noop import NoopDriver

from instanceha.drivers.fencing import FIELDS as KNOWN


def test_valid_inventory_with_defaults(tmp_path):
    p = tmp_path / "bmc.yaml"
    p.write_text("defaults: {driver: redfish, username: root}\n"
                 "hosts:\n  c0: {address: https://10.0.0.1, password: pw,"
                 " verify: /etc/ca.pem}\n")
    inv = inventory.load(str(p), KNOWN)
    bmc = inv["c0"]
    assert (bmc.driver, bmc.username, bmc.options["verify"]) == (
        "redfish", "root", "/etc/ca.pem")
    assert "pw" not in repr(bmc) and "pw" not in str(bmc)


@pytest.mark.parametrize("text,needle", [
    ("hosts: [a]", "'hosts' mapping"),
    ("hosts: {c1: {address: x}}", "host c1: field driver is missing"),
    ("hosts: {c1: {driver: warp}}", "host c1: field driver: 'warp'"),
    ("hosts: {c1: {driver: redfish}}", "host c1: field address is missing"),
    ("hosts: {c1: {driver: noop, colour: red}}", "host c1: unknown field colour"),
    ("hosts: {c1: {driver: ipmi, address: a, password: 12}}",
     "host c1: field password must be a string"),
    ("hosts: {c1: [", "not valid YAML"),
])
def test_bad_inventory_names_host_and_field(tmp_path, text, needle):
    p = tmp_path / "bmc.yaml"
    p.write_text(text)
    with pytest.raises(inventory.InventoryError) as e:
        inventory.load(str(p), KNOWN)
    assert needle in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(inventory.InventoryError, match="cannot read"):
        inventory.load(str(tmp_path / "nope.yaml"), KNOWN)


def _conf(**fencing):
    return conf_pkg.make({"fencing": fencing})


def test_noop_refused_unless_allowed(tmp_path):
    with pytest.raises(ValueError, match="allow_unfenced"):
        load_driver("noop", _conf())
    assert isinstance(load_driver("noop", _conf(allow_unfenced=True)),
                      NoopDriver)
    p = tmp_path / "bmc.yaml"
    p.write_text("hosts: {c0: {driver: noop}}")
    with pytest.raises(service.ConfigError, match="host c0: driver noop"):
        service.load_inventory(_conf(inventory=str(p)))


def test_unknown_driver_name():
    with pytest.raises(ValueError, match="unknown fencing driver"):
        load_driver("warp", _conf())


def test_entries_reaching_one_bmc_are_found():
    from instanceha.drivers.fencing import inventory as inv_mod
    inv = inv_mod.parse({"hosts": {
        "old": {"driver": "redfish", "address": "https://10.0.0.5/",
                "system_id": "/redfish/v1/Systems/1"},
        "new": {"driver": "redfish", "address": "HTTPS://10.0.0.5:443",
                "system_id": "/redfish/v1/Systems/1/"},
        "other": {"driver": "redfish", "address": "https://10.0.0.5",
                  "system_id": "/redfish/v1/Systems/2"},
        "elsewhere": {"driver": "redfish", "address": "https://10.0.0.6"},
        "test": {"driver": "noop"}}}, KNOWN)
    assert inv_mod.shared(inv) == [("HTTPS://10.0.0.5:443", ["new", "old"])]


def test_an_entry_without_system_reaches_every_system_of_its_bmc():
    from instanceha.drivers.fencing import inventory as inv_mod
    inv = inv_mod.parse({"hosts": {
        "a": {"driver": "redfish", "address": "https://bmc.example:8443",
              "system_id": "/redfish/v1/Systems/1"},
        "b": {"driver": "redfish", "address": "https://BMC.example:8443/"},
        "c": {"driver": "redfish", "address": "https://bmc.example"},
        "i1": {"driver": "ipmi", "address": "10.0.0.9"},
        "i2": {"driver": "ipmi", "address": "10.0.0.9", "port": 623},
        "i3": {"driver": "ipmi", "address": "10.0.0.9", "port": 6230}}},
        KNOWN)
    assert inv_mod.same_bmc(inv["a"], inv["b"])
    assert not inv_mod.same_bmc(inv["a"], inv["c"])       # other port
    assert inv_mod.same_bmc(inv["i1"], inv["i2"])          # default port
    assert not inv_mod.same_bmc(inv["i1"], inv["i3"])
