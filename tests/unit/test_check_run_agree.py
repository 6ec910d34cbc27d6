"""``instanceha check`` and ``instanceha run`` agree (issue 35, part 2):
over configurations that ``run`` refuses at start, ``check`` refuses them
too, with the same lines and exit status 2; over a good one, ``check``
finds no start-up problem.

``run`` refuses before it builds anything (its start-up checks come
first), so it is called in-process: no Nova, BMC or socket is reached.
``check`` reads Nova and the BMCs through in-memory fakes."""

import os
import socket

import pytest
import yaml

from instanceha.cmd import check
from instanceha.cmd import run as run_cmd
from tests.unit.test_config_errors import run_main
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer

#: run's prefixes: a configuration file it cannot load, another refusal
PREFIXES = ("instanceha: configuration error: ", "instanceha: cannot start: ")


class Bed:
    """A node's files under ``tmp_path``, good unless a case breaks them:
    inventory, clouds.yaml, the API's socket directory (mode 0750)."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.inventory = {"compute-%d" % i: {
            "driver": "redfish", "address": "https://bmc-%d" % i,
            "username": "admin", "password": "pw-%d" % i} for i in range(2)}
        (tmp_path / "run").mkdir(mode=0o750)
        os.chmod(tmp_path / "run", 0o750)
        clouds = tmp_path / "clouds.yaml"
        clouds.write_text(yaml.safe_dump({"clouds": {"sim": {
            "auth": {"auth_url": "http://127.0.0.1:9/v3", "username": "u",
                     "password": "p", "project_name": "p"}}}}))
        self.conf = {
            "DEFAULT": {"status_file": "", "cloud": "sim",
                        "clouds_file": str(clouds)},
            "fencing": {"inventory": str(tmp_path / "bmc.yaml")},
            "journal": {"connection": "sqlite:///%s"
                        % (tmp_path / "db" / "journal.sqlite")},
            "api": {"listen_tcp": "false",
                    "unix_socket": str(tmp_path / "run" / "api.sock")}}
        self.argv = None
        self.extra = ""

    def write(self):
        path = self.tmp / "bmc.yaml"
        if not path.is_dir():
            path.write_text(yaml.safe_dump({"hosts": self.inventory}))
            os.chmod(path, 0o600)
        conf_path = write_conf_file(str(self.tmp / "instanceha.conf"),
                                    self.conf)
        if self.extra:
            with open(conf_path, "a") as f:
                f.write(self.extra)
        return self.argv or ["--config-file", conf_path]

    def set(self, group, **values):
        self.conf.setdefault(group, {}).update(values)


def _missing_socket_dir(bed):
    bed.set("api", unix_socket=str(bed.tmp / "nowhere" / "api.sock"))


def _socket_dir_open_to_others(bed):
    os.chmod(bed.tmp / "run", 0o777)


def _inventory_is_a_directory(bed):
    (bed.tmp / "bmc.yaml").mkdir()


def _inventory_missing(bed):
    bed.set("fencing", inventory=str(bed.tmp / "no-such.yaml"))


def _inventory_without_password(bed):
    del bed.inventory["compute-1"]["password"]


def _inventory_with_noop(bed):
    bed.inventory["compute-0"] = {"driver": "noop"}


def _bad_journal_url(bed):
    bed.set("journal", connection="nosuchdb://user@db/instanceha")


def _journal_under_a_file(bed):
    (bed.tmp / "afile").write_text("")
    bed.set("journal", connection="sqlite:///%s"
            % (bed.tmp / "afile" / "journal.sqlite"))


def _sqlite_with_replicas(bed):
    bed.set("coordination", backend_url="redis://127.0.0.1:1")


def _bad_integer(bed):
    bed.set("DEFAULT", workers="abc")


def _out_of_range(bed):
    bed.set("DEFAULT", workers="0")


def _inline_comment(bed):
    bed.extra = "\n[policy]\nthreshold = 10 # hosts\n"


def _unknown_option(bed):
    bed.extra = "\n[policy]\ntreshold = 10\n"


def _config_file_is_a_directory(bed):
    bed.argv = ["--config-file", str(bed.tmp)]


def _missing_clouds_file(bed):
    bed.set("DEFAULT", clouds_file=str(bed.tmp / "no-clouds.yaml"))


def _cloud_not_in_clouds_file(bed):
    bed.set("DEFAULT", cloud="elsewhere")


def _bad_transport_url(bed):
    bed.set("notifications", enabled="true",
            transport_url="nosuchdriver://guest@127.0.0.1:1/")


def _missing_agent_key(bed):
    bed.set("agent", listen_addresses="127.0.0.1:0",
            master_key_file=str(bed.tmp / "no-master.key"))


def _tcp_port_in_use(bed):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    bed.holder = holder
    bed.set("api", listen_tcp="true", port=str(holder.getsockname()[1]))


def _held_udp_port():
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", 0))
    return holder, holder.getsockname()[1]


def _kdump_port_in_use(bed):
    bed.holder, port = _held_udp_port()
    bed.set("kdump", enabled="true", listen_address="127.0.0.1",
            port=str(port))


def _agent_port_in_use(bed):
    key = bed.tmp / "master.key"
    key.write_text("0123456789abcdef" * 4 + "\n")
    os.chmod(key, 0o600)
    bed.holder, port = _held_udp_port()
    bed.set("agent", listen_addresses="127.0.0.1:%d" % port,
            master_key_file=str(key))


BROKEN = [_missing_socket_dir, _socket_dir_open_to_others,
          _inventory_is_a_directory, _inventory_missing,
          _inventory_without_password, _inventory_with_noop,
          _bad_journal_url, _journal_under_a_file, _sqlite_with_replicas,
          _bad_integer, _out_of_range, _inline_comment, _unknown_option,
          _config_file_is_a_directory, _missing_clouds_file,
          _cloud_not_in_clouds_file, _bad_transport_url, _missing_agent_key,
          _tcp_port_in_use, _kdump_port_in_use, _agent_port_in_use]


def _run(argv, capsys, monkeypatch):
    # Were the start to wait for a backend, a SIGTERM ends the wait; were
    # it to finish, the service is stopped at once: never a hang.
    monkeypatch.setattr(run_cmd.Signals, "sleep", lambda self, s: True)

    def serve(svc, signals):
        svc.stop()
        raise AssertionError("run started")
    monkeypatch.setattr(run_cmd, "serve", serve)
    return run_main(argv, capsys)


def _check(argv, capsys):
    clock = Clock()
    compute = FakeCompute(clock, hosts=2)
    compute.max_microversion = (2, 96)
    fencer = FakeFencer(compute)
    report = check.run(list(argv), compute_factory=lambda conf: compute,
                       fencer_factory=lambda name, conf: fencer,
                       connect_broker=lambda conf: "connected")
    capsys.readouterr()
    return report


@pytest.mark.parametrize("broken", BROKEN, ids=lambda f: f.__name__[1:])
def test_check_refuses_what_run_refuses_with_the_same_lines(
        tmp_path, capsys, monkeypatch, broken):
    bed = Bed(tmp_path)
    broken(bed)
    argv = bed.write()
    try:
        code, err = _run(argv, capsys, monkeypatch)
        report = _check(argv, capsys)
    finally:
        if hasattr(bed, "holder"):
            bed.holder.close()
    assert code == 2, err
    lines = err.splitlines()
    assert lines and all(line.startswith(PREFIXES) for line in lines), err
    assert "Traceback" not in err and "LocationInfo" not in err
    refused = [f.text for f in report.findings if f.refuses]
    assert refused == [line.split(": ", 2)[2] for line in lines], \
        report.render()
    assert report.exit_code == 2, report.render()
    assert report.render().splitlines()[-1].startswith(
        "RESULT: instanceha run would refuse to start")


def test_a_good_configuration_has_no_start_up_refusal(tmp_path, capsys):
    argv = Bed(tmp_path).write()
    report = _check(argv, capsys)
    assert report.exit_code == 0, report.render()
    assert not [f for f in report.findings if f.refuses]
    assert any(f.what == "operator API" and f.level == "OK"
               for f in report.findings), report.render()
    # Read only: no journal, no socket.
    assert not (tmp_path / "db").exists()
    assert not (tmp_path / "run" / "api.sock").exists()
