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
    with pytest.raises(inventory.InventoryError,
                       match=r"\[fencing\] inventory .*nope.yaml: "
                             "no such file"):
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
    inv = inv_mod.parse({"defaults": {"password": "pw"}, "hosts": {
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
    inv = inv_mod.parse({"defaults": {"password": "pw"}, "hosts": {
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


# -- secrets -----------------------------------------------------------------

import os  # noqa: E402

from structlog.testing import capture_logs  # noqa: E402


def _write(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def _load(tmp_path, text, mode=0o600, **kw):
    p = _write(tmp_path / "bmc.yaml", text, mode)
    return inventory.load(p, KNOWN, **kw)


def test_password_from_file_strips_the_trailing_newline(tmp_path):
    secret = _write(tmp_path / "c0.pass", "s3cr3t\n")
    inv = _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: 10.0.0.1,"
                " password_file: %s}\n" % secret)
    assert inv["c0"].password == "s3cr3t"
    assert "password_file" not in inv["c0"].options
    assert "s3cr3t" not in repr(inv["c0"]) and "s3cr3t" not in str(inv["c0"])


def test_relative_password_file_is_beside_the_inventory(tmp_path):
    (tmp_path / "bmc").mkdir()
    _write(tmp_path / "bmc" / "c0.pass", "pw-from-file\r\n")
    inv = _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a,"
                " password_file: bmc/c0.pass}\n")
    assert inv["c0"].password == "pw-from-file"


def test_password_file_in_defaults_and_overridden_per_host(
        tmp_path, monkeypatch):
    shared_pw = _write(tmp_path / "all.pass", "shared\n")
    monkeypatch.setenv("BMC_PASS_C2", "from-env")
    inv = _load(tmp_path,
                "defaults: {driver: ipmi, password_file: %s}\n"
                "hosts:\n"
                "  c0: {address: a}\n"
                "  c1: {address: b, password: inline}\n"
                "  c2: {address: c, password_env: BMC_PASS_C2}\n" % shared_pw)
    assert [inv[h].password for h in ("c0", "c1", "c2")] == [
        "shared", "inline", "from-env"]


@pytest.mark.parametrize("entry,needles", [
    ("password: a, password_file: /x",
     ["host c0:", "password and password_file"]),
    ("password_file: /x, password_env: Y",
     ["host c0:", "password_file and password_env"]),
    ("password_file: 12", ["host c0: field password_file must be a string"]),
    ("password_env: ''", ["host c0: field password_env is empty"]),
])
def test_one_password_source_per_entry(tmp_path, entry, needles):
    with pytest.raises(inventory.InventoryError) as e:
        _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a, %s}\n"
              % entry)
    for needle in needles:
        assert needle in str(e.value)


def test_two_sources_in_defaults_is_an_error(tmp_path):
    with pytest.raises(inventory.InventoryError,
                       match="defaults: fields password and password_env"):
        _load(tmp_path, "defaults: {password: a, password_env: B}\n"
              "hosts: {c0: {driver: noop}}\n")


def test_missing_password_file_names_host_field_and_path(tmp_path):
    missing = str(tmp_path / "gone.pass")
    with pytest.raises(inventory.InventoryError) as e:
        _load(tmp_path, "hosts:\n  compute-0: {driver: ipmi, address: a,"
              " password_file: %s}\n" % missing)
    text = str(e.value)
    assert "host compute-0" in text and "password_file" in text
    assert missing in text and "No such file" in text


def test_unreadable_password_file_never_shows_content(tmp_path):
    secret = _write(tmp_path / "c0.pass", "topsecret\n", 0o000)
    if os.access(secret, os.R_OK):
        pytest.skip("running as a user who reads any file")
    with pytest.raises(inventory.InventoryError) as e:
        _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a,"
              " password_file: %s}\n" % secret)
    assert "host c0: field password_file: cannot read %s" % secret \
        in str(e.value)
    assert "topsecret" not in str(e.value)


def test_empty_password_file_is_an_error(tmp_path):
    secret = _write(tmp_path / "c0.pass", "\n")
    with pytest.raises(inventory.InventoryError, match="host c0: field "
                       "password_file: .*c0.pass is empty"):
        _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a,"
              " password_file: %s}\n" % secret)


def test_unset_password_variable_names_host_and_variable(
        tmp_path, monkeypatch):
    monkeypatch.delenv("BMC_PASS_COMPUTE0", raising=False)
    with pytest.raises(inventory.InventoryError) as e:
        _load(tmp_path, "hosts:\n  compute-0: {driver: ipmi, address: a,"
              " password_env: BMC_PASS_COMPUTE0}\n")
    assert "host compute-0: field password_env: environment variable " \
        "BMC_PASS_COMPUTE0 is not set" in str(e.value)


def test_environ_can_be_given(tmp_path):
    inv = _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a,"
                " password_env: P}\n", environ={"P": "given"})
    assert inv["c0"].password == "given"


def test_readable_password_file_is_warned_without_its_content(tmp_path):
    loose = _write(tmp_path / "loose.pass", "hunter2\n", 0o644)
    _write(tmp_path / "tight.pass", "fine\n", 0o600)
    text = ("defaults: {driver: ipmi}\nhosts:\n"
            "  c0: {address: a, password_file: loose.pass}\n"
            "  c1: {address: b, password_file: loose.pass}\n"
            "  c2: {address: c, password_file: tight.pass}\n")
    p = _write(tmp_path / "bmc.yaml", text, 0o644)   # no inline password
    inv, warnings = inventory.read(p, KNOWN)
    assert inv["c0"].password == "hunter2"
    assert [(w.path, w.mode, w.what) for w in warnings] == [
        (loose, 0o644, "password file")]               # once, not per host
    assert "mode 0644" in str(warnings[0]) and loose in str(warnings[0])
    with capture_logs() as logs:
        inventory.load(p, KNOWN)
    warned = [e for e in logs if e["event"] == "secret_file_readable"]
    assert len(warned) == 1
    assert (warned[0]["path"], warned[0]["mode"], warned[0]["log_level"]) \
        == (loose, "0644", "warning")
    assert "hunter2" not in repr(logs)


def test_inventory_with_inline_passwords_must_be_private(tmp_path):
    inline = "hosts:\n  c0: {driver: ipmi, address: a, password: pw}\n"
    p = _write(tmp_path / "bmc.yaml", inline, 0o640)
    _, warnings = inventory.read(p, KNOWN)
    assert [(w.path, w.mode, w.what) for w in warnings] == [
        (p, 0o640, "inventory")]
    os.chmod(p, 0o600)
    assert inventory.read(p, KNOWN)[1] == []
    # a password in defaults or in a method counts, even if overridden
    for text in (PW + "hosts: {c0: {driver: ipmi, "
                 "address: a, password_env: HOME}}\n",
                 "hosts: {c0: {methods: [{driver: noop, password: pw}]}}\n"):
        _write(tmp_path / "bmc.yaml", text, 0o604)
        assert [w.what for w in inventory.read(p, KNOWN)[1]] == ["inventory"]
    # without inline passwords the inventory may be read by anyone
    _write(tmp_path / "bmc.yaml", "hosts: {c0: {driver: noop}}\n", 0o644)
    assert inventory.read(p, KNOWN)[1] == []


# -- several methods ---------------------------------------------------------

METHODS = """
defaults: {username: root, verify: false}
hosts:
  compute-0:
    password: pw
    methods:
      - {driver: redfish, address: https://10.0.0.5}
      - {driver: ipmi, address: 10.0.1.5, username: ipmiadmin}
  compute-1: {driver: redfish, address: https://10.0.0.6, password: pw1}
"""


def test_methods_are_entries_in_order_with_host_fields_under_each():
    import yaml
    inv = inventory.parse(yaml.safe_load(METHODS), KNOWN)
    bmc = inv["compute-0"]
    # the entry is its first method: existing users see the first BMC
    assert (bmc.driver, bmc.address, bmc.username, bmc.password) == (
        "redfish", "https://10.0.0.5", "root", "pw")
    assert [(m.driver, m.address, m.username, m.password, m.host)
            for m in bmc.methods] == [
        ("redfish", "https://10.0.0.5", "root", "pw", "compute-0"),
        ("ipmi", "10.0.1.5", "ipmiadmin", "pw", "compute-0")]
    assert all(m.methods == (m,) for m in bmc.methods)
    assert bmc.methods[1].options == {"verify": False}
    assert "methods" not in bmc.options
    one = inv["compute-1"]
    assert one.methods == (one,) and one.fallbacks == ()
    assert "pw" not in repr(bmc) and "pw" not in str(bmc)
    assert "then ipmi 10.0.1.5" in str(bmc)


def test_method_secret_overrides_the_host_s(tmp_path, monkeypatch):
    monkeypatch.setenv("IPMI_PW", "ipmi-secret")
    inv = inventory.parse({"hosts": {"c0": {
        "password_file": _write(tmp_path / "c0.pass", "redfish-secret\n"),
        "methods": [
            {"driver": "redfish", "address": "https://a"},
            {"driver": "ipmi", "address": "b", "password_env": "IPMI_PW"}]}}},
        KNOWN)
    assert [m.password for m in inv["c0"].methods] == [
        "redfish-secret", "ipmi-secret"]


@pytest.mark.parametrize("methods,needle", [
    ("[{driver: redfish, address: x}, {driver: ipmi}]",
     "host compute-0: method 2: field address is missing"),
    ("[{address: x}]", "host compute-0: method 1: field driver is missing"),
    ("[{driver: ipmi, address: x, colour: red}]",
     "host compute-0: method 1: unknown field colour"),
    ("[{driver: ipmi, address: x}, {driver: warp}]",
     "host compute-0: method 2: field driver: 'warp'"),
    ("[{driver: ipmi, address: x, password: a, password_env: B}]",
     "host compute-0: method 1: fields password and password_env"),
    ("[]", "host compute-0: field methods must be a non-empty list"),
    ("{driver: ipmi}", "host compute-0: field methods must be a non-empty"),
    ("[ipmi]", "host compute-0: method 1: must be a mapping"),
    ("[{driver: ipmi, address: x, methods: []}]",
     "host compute-0: method 1: field methods cannot be nested"),
    ("[{driver: ipmi, address: x, password_env: NOT_SET_ANYWHERE_42}]",
     "host compute-0: method 1: field password_env: environment variable "
     "NOT_SET_ANYWHERE_42 is not set"),
])
def test_method_errors_name_host_and_method(tmp_path, methods, needle):
    with pytest.raises(inventory.InventoryError) as e:
        _load(tmp_path, "hosts:\n  compute-0:\n    methods: %s\n" % methods)
    assert needle in str(e.value)


def test_methods_in_defaults_is_an_error(tmp_path):
    with pytest.raises(inventory.InventoryError,
                       match="defaults: field methods"):
        _load(tmp_path, "defaults: {methods: []}\nhosts: {c0: {driver: noop}}")


def test_any_method_reaching_one_bmc_makes_entries_share_it():
    inv = inventory.parse({"defaults": {"password": "pw"}, "hosts": {
        "a": {"methods": [{"driver": "redfish", "address": "https://r1"},
                          {"driver": "ipmi", "address": "10.0.0.9"}]},
        "b": {"driver": "ipmi", "address": "10.0.0.9", "port": 623},
        "c": {"methods": [{"driver": "noop"},
                          {"driver": "redfish", "address": "https://R1/"}]},
        "d": {"methods": [{"driver": "redfish", "address": "https://r4"},
                          {"driver": "ipmi", "address": "10.0.0.10"}]}}},
        KNOWN)
    assert inventory.same_bmc(inv["a"], inv["b"])
    assert inventory.same_bmc(inv["b"], inv["a"])
    assert inventory.same_bmc(inv["a"], inv["c"])
    assert not inventory.same_bmc(inv["b"], inv["c"])
    assert not inventory.same_bmc(inv["a"], inv["d"])
    # one group per BMC, not one lump for everything "a" touches
    assert inventory.shared(inv) == [("https://r1", ["a", "c"]),
                                     ("10.0.0.9", ["a", "b"])]
    # identity() of an entry whose first method names no BMC is its first
    # method that does, so "no BMC at all" still means None
    assert inventory.identity(inv["c"]) == ("r1", "443", "")
    assert inventory.identities(inv["a"]) == [
        ("r1", "443", ""), ("10.0.0.9", "623", "")]
    assert inventory.identity(inventory.BMC(host="x", driver="noop")) is None
    assert inventory.identities(None) == []


# -- reload ------------------------------------------------------------------

#: a password for every entry (an entry without one is an error)
PW = "defaults: {password: pw}\n"


def test_reload_returns_the_new_inventory_and_what_changed(tmp_path):
    p = _write(tmp_path / "bmc.yaml",
               PW + "hosts:\n  c0: {driver: ipmi, address: a}\n"
               "  c1: {driver: ipmi, address: b}\n")
    current = inventory.load(p, KNOWN)
    _write(tmp_path / "bmc.yaml",
           PW + "hosts:\n  c0: {driver: ipmi, address: a}\n"
           "  c1: {driver: ipmi, address: b2}\n"
           "  c2: {driver: ipmi, address: c}\n")
    out = inventory.reload(p, KNOWN, current)
    assert out.ok and out.error is None
    assert sorted(out.inventory) == ["c0", "c1", "c2"]
    assert (out.added, out.removed, out.changed) == (("c2",), (), ("c1",))
    _write(tmp_path / "bmc.yaml",
           PW + "hosts:\n  c2: {driver: ipmi, address: c}\n")
    out2 = inventory.reload(p, KNOWN, out.inventory)
    assert (out2.added, out2.removed, out2.changed) == ((), ("c0", "c1"), ())


@pytest.mark.parametrize("text", [
    PW + "hosts: {c0: [",                                 # not YAML
    PW + "hosts: {c0: {driver: ipmi}}",                   # invalid entry
    "hosts: {c0: {driver: ipmi, address: a, password_env: UNSET_VAR_42}}",
    "hosts: {c0: {driver: ipmi, address: a}}",            # no password
    None,                                                 # file gone
])
def test_reload_keeps_the_current_inventory_on_any_error(tmp_path, text,
                                                         monkeypatch):
    monkeypatch.delenv("UNSET_VAR_42", raising=False)
    p = _write(tmp_path / "bmc.yaml",
               PW + "hosts: {c0: {driver: ipmi, address: a}}")
    current = inventory.load(p, KNOWN)
    if text is None:
        os.unlink(p)
    else:
        _write(tmp_path / "bmc.yaml", text)
    out = inventory.reload(p, KNOWN, current)
    assert not out.ok and out.inventory is current
    assert out.error.startswith("inventory: ")
    assert (out.added, out.removed, out.changed) == ((), (), ())


def test_reload_check_may_refuse_the_new_inventory(tmp_path):
    p = _write(tmp_path / "bmc.yaml",
               PW + "hosts: {c0: {driver: ipmi, address: a}}")
    current = inventory.load(p, KNOWN)
    _write(tmp_path / "bmc.yaml", PW + "hosts: {c0: {driver: noop}}")

    class Refused(Exception):
        pass

    def check(inv):
        for bmc in inv.values():
            if bmc.driver == "noop":
                raise Refused("inventory: host %s: noop refused" % bmc.host)

    out = inventory.reload(p, KNOWN, current, check=check)
    assert out.inventory is current
    assert out.error == "Refused: inventory: host c0: noop refused"
    assert inventory.reload(p, KNOWN, current).inventory["c0"].driver == "noop"


def test_reload_logs_mode_warnings_and_returns_them(tmp_path):
    p = _write(tmp_path / "bmc.yaml",
               "hosts: {c0: {driver: ipmi, address: a, password: pw}}", 0o644)
    with capture_logs() as logs:
        out = inventory.reload(p, KNOWN, {})
    assert out.ok and [w.what for w in out.warnings] == ["inventory"]
    assert [e["event"] for e in logs] == ["secret_file_readable"]


def test_password_file_that_is_a_directory_is_an_error(tmp_path):
    (tmp_path / "dir.pass").mkdir()
    with pytest.raises(inventory.InventoryError,
                       match="host c0: field password_file: cannot read "
                             ".*dir.pass: Is a directory"):
        _load(tmp_path, "hosts:\n  c0: {driver: ipmi, address: a,"
              " password_file: dir.pass}\n")


def test_bmh_and_fence_agent_entries_have_identities():
    """The shared-BMC safety check covers BareMetalHosts (API + namespace
    + name) and fence agents (their own port parameter)."""
    from instanceha.drivers.fencing import FIELDS
    inv = inventory.parse({"defaults": {"password": "pw"}, "hosts": {
        "a": {"driver": "bmh", "api_url": "https://k8s:6443/",
              "namespace": "metal", "name": "rack1-u3", "token_file": "/t"},
        "b": {"driver": "bmh", "api_url": "https://K8S:6443",
              "namespace": "metal", "name": "rack1-u3", "token_file": "/t"},
        "c": {"driver": "bmh", "api_url": "https://k8s:6443",
              "namespace": "metal", "token_file": "/t"},
        "d": {"driver": "fence_agent", "agent": "fence_ipmilan",
              "address": "10.0.0.9", "params": {"ipport": 6230}},
        "e": {"driver": "fence_agent", "agent": "fence_ipmilan",
              "address": "10.0.0.9", "params": {"ipport": 6231}},
        "f": {"driver": "ipmi", "address": "10.0.0.9", "port": 6230},
    }}, FIELDS)
    assert inventory.same_bmc(inv["a"], inv["b"])
    assert not inventory.same_bmc(inv["a"], inv["c"])      # name "c"
    assert not inventory.same_bmc(inv["d"], inv["e"])
    assert inventory.same_bmc(inv["d"], inv["f"])
