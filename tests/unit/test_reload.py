"""SIGHUP: mutable options applied, immutable ones kept and named, a bad
file changes nothing, the BMC inventory re-read; systemd told."""

import socket

import yaml
from structlog.testing import capture_logs

from instanceha import conf as conf_pkg
from instanceha import sdnotify
from instanceha import service as service_mod
from instanceha.conf import reload as conf_reload
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer


def _groups(tmp_path, **changes):
    groups = {
        "DEFAULT": {"workers": 2, "status_file": ""},
        "detection": {"grace_period": 10.0, "delta": 30.0},
        "policy": {"threshold": 50},
        "fencing": {"inventory": str(tmp_path / "bmc.yaml")},
        "journal": {"connection": "sqlite:///%s"
                    % (tmp_path / "journal.sqlite")},
        "api": {"enabled": False}}
    for key, value in changes.items():
        group, name = key.split("__")
        groups.setdefault(group, {})[name] = value
    return groups


def _inventory(tmp_path, hosts):
    (tmp_path / "bmc.yaml").write_text(yaml.safe_dump({"hosts": {
        h: {"driver": "redfish", "address": "https://bmc-%s" % h,
            "password": "pw"}
        for h in hosts}}))


class Running:
    def __init__(self, tmp_path, notifier=None):
        self.tmp_path = tmp_path
        _inventory(tmp_path, ["compute-0", "compute-1"])
        self.path = write_conf_file(str(tmp_path / "instanceha.conf"),
                                    _groups(tmp_path))
        self.conf = conf_pkg.load(["--config-file", self.path])
        clock = Clock()
        compute = FakeCompute(clock, hosts=2)
        fencer = FakeFencer(compute)
        self.svc = service_mod.Service(
            self.conf, compute=compute, clock=clock,
            fencer=lambda name: fencer,
            notifier=notifier or sdnotify.Notifier({}))

    def rewrite(self, **changes):
        write_conf_file(self.path, _groups(self.tmp_path, **changes))

    def close(self):
        self.svc.journal.close()


def _events(logs, name):
    return [e for e in logs if e["event"] == name]


def test_mutable_options_apply_and_the_engine_sees_them(tmp_path):
    r = Running(tmp_path)
    try:
        r.rewrite(detection__grace_period=3.0, policy__threshold=20)
        with capture_logs() as logs:
            config, inventory = r.svc.reload_inventory()
        assert config.ok and inventory.ok
        assert r.conf.detection.grace_period == 3.0
        assert r.conf.policy.threshold == 20
        assert r.svc.engine.policy.grace_period == 3.0
        assert r.svc.engine.storm.threshold == 20
        [line] = _events(logs, "config_reloaded")
        assert line["changed"] == ("detection.grace_period: 10.0 -> 3.0; "
                                   "policy.threshold: 50 -> 20")
        assert not _events(logs, "config_change_ignored")
    finally:
        r.close()


def test_immutable_changes_keep_the_value_in_use_and_are_named(tmp_path):
    r = Running(tmp_path)
    old_journal = r.conf.journal.connection
    try:
        r.rewrite(DEFAULT__workers=6, detection__delta=40.0,
                  journal__connection="mysql+pymysql://ih:s3cr3t@db/ih")
        with capture_logs() as logs:
            config, _ = r.svc.reload()
        assert r.conf.workers == 2
        assert r.conf.journal.connection == old_journal
        assert r.conf.detection.delta == 40.0
        [warn] = _events(logs, "config_change_ignored")
        assert warn["log_level"] == "warning"
        assert warn["options"] == "DEFAULT.workers,journal.connection"
        assert "s3cr3t" not in repr(logs)
        assert "journal.connection: (secret changed)" in warn["changed"]
        assert [c[1] for c in config.ignored] == ["workers", "connection"]
    finally:
        r.close()


def test_a_bad_file_changes_nothing(tmp_path):
    r = Running(tmp_path)
    try:
        r.rewrite(detection__grace_period=3.0, policy__treshold=5)
        with capture_logs() as logs:
            config, _ = r.svc.reload()
        assert not config.ok and "treshold" in config.error
        assert r.conf.detection.grace_period == 10.0
        [err] = _events(logs, "config_reload_failed")
        assert err["effect"] == "the configuration in use stays, unchanged"
        assert not _events(logs, "config_reloaded")
    finally:
        r.close()


def test_an_out_of_bounds_value_changes_nothing(tmp_path):
    r = Running(tmp_path)
    try:
        r.rewrite(detection__grace_period=3.0, policy__threshold=500)
        config, _ = r.svc.reload()
        assert not config.ok and "threshold" in config.error
        assert r.conf.detection.grace_period == 10.0
    finally:
        r.close()


def test_nothing_changed_is_one_line(tmp_path):
    r = Running(tmp_path)
    try:
        with capture_logs() as logs:
            r.svc.reload()
        [line] = _events(logs, "config_reloaded")
        assert line["changed"] is None
    finally:
        r.close()


def test_the_inventory_is_reloaded_with_the_config(tmp_path):
    r = Running(tmp_path)
    try:
        _inventory(tmp_path, ["compute-0", "compute-1", "compute-2"])
        with capture_logs() as logs:
            _, inventory = r.svc.reload()
        assert inventory.ok and sorted(r.svc.inventory) == \
            ["compute-0", "compute-1", "compute-2"]
        assert _events(logs, "inventory_reloaded")[0]["added"] == "compute-2"
    finally:
        r.close()


def test_reload_tells_systemd_once_ready(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.setblocking(False)
    try:
        r = Running(tmp_path, sdnotify.Notifier({"NOTIFY_SOCKET": path}))
        try:
            # Not ready yet (no reconcile pass): no RELOADING=1, no READY=1.
            r.svc.reload()
            assert sock.recv(4096).decode().startswith("STATUS=reloaded")
            r.svc.systemd.ready = True
            r.svc.reload()
            assert sock.recv(4096).decode().startswith("RELOADING=1\n")
            assert sock.recv(4096).decode().startswith("READY=1\n")
        finally:
            r.close()
    finally:
        sock.close()


def test_conf_without_files_has_nothing_to_reload():
    out = conf_reload.reload(conf_pkg.make())
    assert out.ok and not out.applied and not out.ignored


def test_every_mutable_option_is_one_the_engine_reads_again():
    """The options marked mutable are exactly the ones checked to be read
    at each use (or re-derived by Service.reload_config); marking another
    needs that check too."""
    mutable = sorted("%s.%s" % (group, opt.name)
                     for module in conf_pkg.MODULES
                     for group, opts in module.list_opts().items()
                     for opt in opts if opt.mutable)
    groups = {m.split(".")[0] for m in mutable}
    assert groups == {"detection", "policy", "evacuation", "recovery"}
    assert "policy.fence_rate_hosts" not in mutable
    assert "evacuation.concurrency" in mutable
    assert "detection.poll_interval" in mutable
