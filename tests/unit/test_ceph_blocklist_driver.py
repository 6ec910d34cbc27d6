"""The ceph_blocklist driver against a fake librados that keeps a
blocklist as a monitor would (the real monitor: functional/
test_fencing_ceph.py)."""

import json
import types

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers.fencing import FIELDS, base, ceph_blocklist, inventory

HOST = "compute-0"


class FakeMon:
    def __init__(self):
        self.entries = {}           # addr -> expire
        self.commands = []
        self.refuse = None          # (ret, outs) for every change
        self.drop_adds = False      # accepts an add but lists nothing
        self.down = False
        self.connects = []


def fake_rados(mon):
    class Error(Exception):
        pass

    class Rados:
        def __init__(self, conffile=None, name=None, conf=None):
            mon.connects.append((conffile, name, dict(conf or {})))

        def connect(self, timeout=0):
            if mon.down:
                raise Error("[errno 110] RADOS timed out")

        def shutdown(self):
            pass

        def mon_command(self, cmd, inbuf, timeout=0):
            cmd = json.loads(cmd)
            mon.commands.append(cmd)
            if mon.down:
                raise Error("[errno 110] RADOS timed out")
            if cmd["prefix"] == "osd blocklist ls":
                body = json.dumps([{"addr": a, "until": "x"}
                                   for a in sorted(mon.entries)]) + "[]"
                return 0, body.encode(), "listed"
            if mon.refuse:
                return mon.refuse[0], b"", mon.refuse[1]
            if cmd["blocklistop"] == "add":
                if not mon.drop_adds:
                    mon.entries[cmd["addr"] + (":0/0" if "/" not in
                                               cmd["addr"] else "")] = \
                        cmd.get("expire")
            else:
                mon.entries.pop(cmd["addr"], None)
            return 0, b"", ""

    return types.SimpleNamespace(Rados=Rados, Error=Error)


@pytest.fixture
def mon():
    return FakeMon()


def _driver(mon, reported=None, **ceph):
    conf = iha_conf.make({"ceph_fencing": dict(
        {"conf_file": "/etc/ceph/test.conf", "timeout": 3}, **ceph)})
    return ceph_blocklist.CephBlocklistDriver(conf, rados=fake_rados(mon),
                                              reported=reported)


def _method(**fields):
    entry = dict({"driver": "ceph_blocklist",
                  "addresses": ["10.0.1.5", "10.0.2.5:6800/7"],
                  "protects": ["volumes"]}, **fields)
    return inventory.parse({"hosts": {HOST: entry}}, FIELDS)[HOST]


def test_fence_blocklists_every_address_for_long_and_confirms(mon):
    d = _driver(mon)
    d.fence(_method())
    assert mon.entries == {"10.0.1.5:0/0": 315360000.0,
                           "10.0.2.5:6800/7": 315360000.0}
    assert mon.commands[-1]["prefix"] == "osd blocklist ls"
    assert mon.connects == [("/etc/ceph/test.conf", "client.admin",
                             {"client_mount_timeout": "3",
                              "rados_mon_op_timeout": "3"})]
    assert d.still_fenced(_method()) is None
    assert d.proves == base.STORAGE
    assert d.power_state(_method()) is base.PowerState.UNKNOWN


def test_an_entry_not_listed_after_the_add_fails_the_method(mon):
    mon.drop_adds = True
    with pytest.raises(base.FenceError, match="10.0.1.5:0/0, "
                       "10.0.2.5:6800/7 not listed by osd blocklist ls"):
        _driver(mon).fence(_method())


def test_a_refused_command_is_a_failure_naming_it(mon):
    mon.refuse = (-13, "access denied")
    with pytest.raises(base.FenceError) as e:
        _driver(mon).fence(_method())
    assert not isinstance(e.value, base.BmcUnreachable)
    assert str(e.value) == ("host compute-0: ceph_blocklist: monitor "
                            "refused osd blocklist add 10.0.1.5:0/0: access "
                            "denied (-13)")


def test_no_monitor_is_unreachable_and_retried_later(mon):
    mon.down = True
    with pytest.raises(base.BmcUnreachable, match="cannot connect to the "
                       "monitors of /etc/ceph/test.conf as client.admin"):
        _driver(mon).fence(_method())


def test_a_host_cluster_and_a_keyring(mon):
    d = _driver(mon, keyring="/etc/ceph/fence.keyring",
                client_name="client.fence")
    d.fence(_method(ceph_conf="/etc/ceph/other.conf"))
    assert mon.connects[0][:2] == ("/etc/ceph/other.conf", "client.fence")
    assert mon.connects[0][2]["keyring"] == "/etc/ceph/fence.keyring"


def test_unfence_removes_the_entries_and_is_idempotent(mon):
    d = _driver(mon)
    mon.entries["10.9.9.9:0/0"] = 1.0          # another host's: kept
    d.fence(_method())
    d.unfence(_method())
    assert mon.entries == {"10.9.9.9:0/0": 1.0}
    d.unfence(_method())
    assert mon.entries == {"10.9.9.9:0/0": 1.0}
    assert "no longer blocklisted" in d.still_fenced(_method())


def test_the_agent_reported_hook_adds_addresses(mon):
    d = _driver(mon, reported=lambda host: ["10.0.3.5", "not-an-ip"]
                if host == HOST else [])
    d.fence(_method())
    assert "10.0.3.5:0/0" in mon.entries and len(mon.entries) == 3


def test_the_listing_of_ceph_16_is_read():
    body = b'[{"addr":"127.0.0.5:0/0","until":"2036"}][]'
    assert ceph_blocklist.listed(body) == {"127.0.0.5:0/0"}
    assert ceph_blocklist.listed(b"") == set()


def test_a_missing_rados_names_the_package(tmp_path, monkeypatch):
    def no_rados(name):
        raise ImportError("No module named %r" % name)
    monkeypatch.setattr(ceph_blocklist.importlib, "import_module", no_rados)
    with pytest.raises(base.FenceError, match="install the package "
                       "python3-rados"):
        ceph_blocklist.load_rados(str(tmp_path))
