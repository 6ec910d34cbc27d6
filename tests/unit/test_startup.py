"""Start-up: everything is bound and checked before anything is acted on,
and the configuration file holds nothing that nobody reads."""

import logging
import os
import socket
import threading

import pytest
import yaml
from oslo_config import cfg

from instanceha import conf as conf_pkg
from instanceha import service as service_mod
from instanceha.cmd import main as cli
from instanceha.events import Event, EventKind as E
from instanceha.fsm.machine import HostRecord
from instanceha.fsm.states import State
from instanceha.journal import Journal
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer


# -- unknown options ----------------------------------------------------------

def _load(tmp_path, text, name="instanceha.conf"):
    path = tmp_path / name
    path.write_text(text)
    return conf_pkg.load(["--config-file", str(path)]), str(path)


def test_a_misspelt_option_is_an_error_naming_file_group_and_key(tmp_path):
    with pytest.raises(cfg.Error) as err:
        _load(tmp_path, "[policy]\ntreshold = 10\n")
    text = str(err.value)
    assert str(tmp_path / "instanceha.conf") in text
    assert "[policy]" in text and "'treshold'" in text
    assert "did you mean 'threshold'" in text


def test_a_misspelt_group_is_an_error_with_a_suggestion(tmp_path):
    with pytest.raises(cfg.Error) as err:
        _load(tmp_path, "[polciy]\nthreshold = 10\n")
    assert "unknown group [polciy]" in str(err.value)
    assert "did you mean 'policy'" in str(err.value)


def test_unknown_option_in_default_without_a_close_name(tmp_path):
    with pytest.raises(cfg.Error) as err:
        _load(tmp_path, "[DEFAULT]\nzzzz_qqqq = 1\n")
    assert "[DEFAULT] unknown option 'zzzz_qqqq' (no such option)" \
        in str(err.value)


def test_every_known_name_is_accepted(tmp_path):
    """instanceha's options, oslo.messaging's (DEFAULT and its groups),
    deprecated names, and group names in another case, as oslo.config
    itself reads them."""
    conf, _ = _load(tmp_path, "\n".join([
        "[DEFAULT]",
        "workers = 3",
        "transport_url = rabbit://guest:guest@localhost:5672/",
        "control_exchange = nova",
        "rpc_thread_pool_size = 10",
        "[Policy]",
        "threshold = 40",
        "[oslo_messaging_rabbit]",
        "rabbit_retry_interval = 1",
        "kombu_reconnect_delay = 0.1",
        "[oslo_messaging_notifications]",
        "driver = messagingv2",
        "[notifications]",
        "enabled = true",
        "",
    ]))
    assert conf.workers == 3 and conf.policy.threshold == 40


def test_deprecated_option_names_are_known():
    import oslo_messaging.opts
    known = conf_pkg.known_options()
    deprecated = [(group or "DEFAULT", old.group, old.name)
                  for group, opts in oslo_messaging.opts.list_opts()
                  for opt in opts for old in opt.deprecated_opts
                  if old.name]
    assert deprecated   # oslo.messaging has some: the check is not empty
    for group, old_group, old_name in deprecated:
        assert old_name in known[old_group or group], (group, old_name)


def test_files_of_a_config_dir_are_checked_too(tmp_path):
    conf_dir = tmp_path / "instanceha.conf.d"
    conf_dir.mkdir()
    (conf_dir / "10-ok.conf").write_text("[policy]\nthreshold = 30\n")
    (conf_dir / "20-typo.conf").write_text("[detection]\ngrace = 3\n")
    (conf_dir / "ignored.txt").write_text("[nonsense]\nx = 1\n")
    with pytest.raises(cfg.Error) as err:
        conf_pkg.load(["--config-dir", str(conf_dir)])
    assert "20-typo.conf" in str(err.value)
    assert "'grace'" in str(err.value)
    assert "did you mean 'grace_period'" in str(err.value)


def test_what_the_simulator_runs_write_is_known(tmp_path):
    """instanceha.simrun (demo, functional tests, benchmarks) writes only
    options that exist."""
    from instanceha import simrun

    class Server:
        def write_client_files(self, workdir):
            return (os.path.join(workdir, "clouds.yaml"),
                    os.path.join(workdir, "bmc.yaml"))

    path = simrun.write_config(str(tmp_path), Server(), {
        "notifications": {"enabled": True, "transport_url": "fake://"},
        "oslo_messaging_rabbit": {"rabbit_retry_interval": 1,
                                  "rabbit_retry_backoff": 0,
                                  "rabbit_interval_max": 1}})
    conf_pkg.load(["--config-file", path])


def test_module_validate_errors_stop_the_load(tmp_path):
    from instanceha.conf import kdump
    if getattr(kdump, "validate", None) is None:
        pytest.skip("no [kdump] cross-option validation yet")
    with pytest.raises(cfg.Error) as err:
        _load(tmp_path, "[kdump]\nenabled = true\nlisten_address = \n")
    assert "[kdump] listen_address" in str(err.value)


def test_the_cli_reports_a_config_error_as_one_line(tmp_path, capsys):
    path = tmp_path / "instanceha.conf"
    path.write_text("[policy]\ntreshold = 10\n")
    assert cli.main(["run", "--config-file", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("instanceha: configuration error: ")
    assert "treshold" in err[0] and "threshold" in err[0]


# -- start order --------------------------------------------------------------

class Started:
    """A Service on in-memory drivers whose journal left compute-1 in
    ``fencing``: starting the engine would power it off at once."""

    def __init__(self, tmp_path, overrides=None):
        inventory = tmp_path / "bmc.yaml"
        inventory.write_text(yaml.safe_dump({"hosts": {
            "compute-%d" % i: {"driver": "redfish",
                               "address": "https://bmc-%d" % i,
                           "password": "pw"}
            for i in range(3)}}))
        # Every path under tmp_path: [DEFAULT] status_file's default is
        # the machine's /var/lib/instanceha/status.json (issue 34 part 6).
        groups = {"DEFAULT": {"workers": 2, "status_file": str(
            tmp_path / "status.json")},
                  "fencing": {"inventory": str(inventory)},
                  "journal": {"connection": "sqlite:///%s"
                              % (tmp_path / "journal.sqlite")},
                  "api": {"listen_address": "127.0.0.1", "port": 0,
                          "unix_socket": ""}}
        for group, values in (overrides or {}).items():
            groups.setdefault(group, {}).update(values)
        path = write_conf_file(str(tmp_path / "instanceha.conf"), groups)
        self.conf = conf_pkg.load(["--config-file", path])
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts=3)
        self.fencer = FakeFencer(self.compute)
        self.fencer_loaded = []
        journal = Journal(self.conf.journal.connection)
        uuid = self.compute.services["compute-1"]["id"]
        journal.record_transition(
            HostRecord(id=uuid, name="compute-1"),
            # Fenced, not yet isolated: resuming runs the isolation (a
            # Nova write) at once, with no poll of Nova needed first.
            HostRecord(id=uuid, name="compute-1", state=State.FENCED,
                       since=self.clock(), reason="power off confirmed",
                       fenced_at=self.clock(), heartbeat_ok=False),
            Event(E.HEARTBEAT_LOST, uuid, self.clock(), name="compute-1",
                  reason="heartbeat lost"))
        journal.close()

        def fencer(name):
            self.fencer_loaded.append(name)
            return self.fencer

        self.svc = service_mod.Service(self.conf, compute=self.compute,
                                       clock=self.clock, fencer=fencer)


def _workers_running():
    return [t.name for t in threading.enumerate()
            if t.name.startswith("instanceha-worker")]


def _taken(kind=socket.SOCK_STREAM):
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        sock.listen(1)
    return sock


def test_api_port_taken_fails_start_before_the_resumed_isolation(tmp_path):
    taken = _taken()
    port = taken.getsockname()[1]
    try:
        w = Started(tmp_path, {"api": {"port": port}})
        before = set(_workers_running())
        with pytest.raises(service_mod.StartupError) as err:
            w.svc.start()
        assert str(err.value).startswith(
            "operator API: cannot bind 127.0.0.1:%d: " % port)
        assert "Address already in use" in str(err.value)
        # The engine never started: no worker, no fencing, no Nova write.
        assert set(_workers_running()) == before
        w.svc.engine.stop()
        assert w.fencer.powered_off == [] and w.fencer_loaded == []
        assert not w.compute.services["compute-1"]["forced_down"]
    finally:
        taken.close()


def test_kdump_port_taken_fails_start_and_closes_the_api_socket(tmp_path):
    taken = _taken(socket.SOCK_DGRAM)
    port = taken.getsockname()[1]
    try:
        w = Started(tmp_path, {"kdump": {"enabled": True, "port": port,
                                         "listen_address": "127.0.0.1"}})
        with pytest.raises(service_mod.StartupError) as err:
            w.svc.start()
        assert str(err.value).startswith(
            "kdump listener: cannot bind 127.0.0.1:%d: " % port)
        w.svc.engine.stop()
        assert w.fencer.powered_off == [] and w.fencer_loaded == []
        # The API's socket was bound first and is closed again.
        api_port = w.svc.api.port
        again = socket.socket()
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", api_port))
        again.close()
    finally:
        taken.close()


def test_agent_port_taken_fails_start_before_anything_acts(tmp_path):
    """The agent heartbeat listener binds at start, like kdump's: a taken
    port is a start-up error naming it, and nothing has acted."""
    from tests.unit.heartbeat import helpers as hb
    taken = _taken(socket.SOCK_DGRAM)
    port = taken.getsockname()[1]
    key = tmp_path / "agent.key"
    hb.write_key(key)
    try:
        w = Started(tmp_path, {"agent": {
            "listen_addresses": ["127.0.0.1:%d" % port],
            "key_file": str(key)}})
        before = set(_workers_running())
        with pytest.raises(service_mod.StartupError) as err:
            w.svc.start()
        assert "agent heartbeat listener: cannot bind 127.0.0.1:%d" % port \
            in str(err.value)
        assert set(_workers_running()) == before
        w.svc.engine.stop()
        assert w.fencer.powered_off == [] and w.fencer_loaded == []
        assert not w.compute.services["compute-1"]["forced_down"]
    finally:
        taken.close()


def test_bad_notification_transport_fails_start(tmp_path):
    w = Started(tmp_path, {"notifications": {
        "enabled": True, "transport_url": "nosuchdriver://host/"}})
    with pytest.raises(service_mod.StartupError) as err:
        w.svc.start()
    assert str(err.value).startswith("notifications: ")
    assert "nosuchdriver" in str(err.value)
    w.svc.engine.stop()
    assert w.fencer.powered_off == [] and w.fencer_loaded == []


def test_a_clean_start_binds_then_resumes_and_acts(tmp_path):
    w = Started(tmp_path)
    isolated = threading.Event()
    force_down = w.compute.force_down

    def recorded(service_id, reason):
        out = force_down(service_id, reason)
        isolated.set()
        return out
    w.compute.force_down = recorded
    w.svc.start()
    try:
        assert w.svc.api.port
        assert isolated.wait(10), "the resumed isolation never ran"
        assert w.compute.services["compute-1"]["forced_down"]
    finally:
        w.svc.stop()


def test_run_prints_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    # A handler an earlier test of this process left on the root logger
    # may hold that test's closed capture stream: the start's warnings (the
    # TCP listener's) would print a logging traceback into this stderr.
    monkeypatch.setattr(logging.root, "handlers", [])
    taken = _taken()
    port = taken.getsockname()[1]
    try:
        w = Started(tmp_path, {"api": {"port": port}})
        monkeypatch.setattr(service_mod, "Service",
                            lambda conf, **kw: w.svc)
        monkeypatch.setattr("signal.signal", lambda *a: None)
        monkeypatch.setattr("instanceha.log.setup", lambda *a, **k: None)
        code = cli.main(["run", "--config-file",
                         str(tmp_path / "instanceha.conf")])
        w.svc.engine.stop()
    finally:
        taken.close()
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines()
            if line.startswith("instanceha:")] == [
        "instanceha: cannot start: operator API: cannot bind 127.0.0.1:%d: "
        "[Errno 98] Address already in use" % port]
    assert w.fencer.powered_off == []
