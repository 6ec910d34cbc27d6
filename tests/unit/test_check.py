"""``instanceha check``: the report's findings and exit status, on
in-memory Nova and BMCs; never a secret in the output."""

import os

import yaml

from instanceha.cmd import check
from instanceha.drivers.compute import base as cb
from instanceha.drivers.fencing import base as fb
from instanceha.simrun import write_conf_file
from tests.unit.fakes import Clock, FakeCompute, FakeFencer

BMC_PASSWORD = "bmc-Pa55-word"


class Bed:
    def __init__(self, tmp_path, hosts=3, inventory=None, **groups):
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.compute = FakeCompute(self.clock, hosts=hosts)
        self.compute.max_microversion = (2, 96)
        self.fencer = FakeFencer(self.compute)
        if inventory is None:
            inventory = {"compute-%d" % i: {
                "driver": "redfish", "address": "https://bmc-%d" % i,
                "username": "admin", "password": BMC_PASSWORD}
                for i in range(hosts)}
        path = tmp_path / "bmc.yaml"
        path.write_text(yaml.safe_dump({"hosts": inventory}))
        os.chmod(path, 0o600)
        run = tmp_path / "run"
        run.mkdir(mode=0o750, exist_ok=True)
        os.chmod(run, 0o750)
        conf = {"DEFAULT": {"status_file": ""},
                "api": {"listen_tcp": "false",
                        "unix_socket": str(run / "api.sock")},
                "fencing": {"inventory": str(path)},
                "journal": {"connection": "sqlite:///%s"
                            % (tmp_path / "db" / "journal.sqlite")}}
        for group, values in groups.items():
            conf.setdefault(group, {}).update(values)
        self.conf_path = write_conf_file(str(tmp_path / "instanceha.conf"),
                                         conf)
        self.broker = []

    def run(self, compute_factory=None, connect_broker=None):
        def broker(conf):
            self.broker.append(conf.notifications.transport_url)
            return "connected"
        report = check.run(
            ["--config-file", self.conf_path],
            compute_factory=compute_factory or (lambda conf: self.compute),
            fencer_factory=lambda name, conf: self.fencer,
            connect_broker=connect_broker or broker)
        return report, report.render()


def _levels(report, what):
    return [f.level for f in report.findings if f.what == what]


def test_a_ready_node_exits_zero_with_one_line_per_finding(tmp_path):
    report, text = Bed(tmp_path).run()
    assert report.exit_code == 0, text
    assert text.splitlines()[-1] == "RESULT: ready to recover"
    assert _levels(report, "configuration") == ["OK"]
    assert _levels(report, "inventory") == ["OK"]
    assert "max microversion 2.96, evacuate at 2.94; 3 compute " \
        "service(s), 3 up" in text
    assert _levels(report, "notifications") == ["SKIP"]
    for i in range(3):
        assert _levels(report, "fencing compute-%d" % i) == ["OK"]
    assert "OK    fencing compute-0: redfish https://bmc-0: power on" in text
    assert BMC_PASSWORD not in text


def test_the_journal_file_is_not_created(tmp_path):
    report, text = Bed(tmp_path).run()
    assert "created at first start" in text
    assert not (tmp_path / "db").exists()


def test_an_existing_journal_is_read(tmp_path):
    from instanceha.journal import Journal
    bed = Bed(tmp_path)
    Journal("sqlite:///%s" % (tmp_path / "db" / "journal.sqlite")).close()
    report, text = bed.run()
    assert "journal.sqlite: 0 host(s) recorded" in text
    assert report.exit_code == 0


def test_a_bad_configuration_is_the_only_finding(tmp_path):
    bed = Bed(tmp_path)
    with open(bed.conf_path, "a") as f:
        f.write("[policy]\ntreshold = 10\n")
    report, text = bed.run()
    # instanceha run exits 2 on it: so does check.
    assert report.exit_code == 2
    assert [f.level for f in report.findings] == ["FAIL"]
    assert "did you mean 'threshold'" in text
    assert "RESULT: instanceha run would refuse to start: 1 problem(s)" \
        in text


def test_a_compute_host_without_a_bmc_fails(tmp_path):
    bed = Bed(tmp_path, inventory={"compute-0": {
        "driver": "redfish", "address": "https://bmc-0",
        "password": BMC_PASSWORD}})
    report, text = bed.run()
    assert report.exit_code == 1
    assert "no entry for compute host(s) compute-1, compute-2 and " \
        "[fencing] default_driver is unset" in text


def test_a_bmc_refusing_the_read_fails_and_names_the_host(tmp_path):
    bed = Bed(tmp_path)

    def refuse(bmc):
        if bmc.host == "compute-1":
            raise fb.FenceError("401 password %s refused" % BMC_PASSWORD)
        return fb.PowerState.ON
    bed.fencer.power_state = refuse
    report, text = bed.run()
    assert report.exit_code == 1
    assert _levels(report, "fencing compute-1") == ["FAIL"]
    assert _levels(report, "fencing compute-0") == ["OK"]
    assert "no fencing method answers a power-state read" in text
    assert BMC_PASSWORD not in text


def test_a_bmc_reporting_off_for_a_live_compute_fails(tmp_path):
    bed = Bed(tmp_path)
    bed.fencer.power_state = lambda bmc: fb.PowerState.OFF
    report, text = bed.run()
    assert report.exit_code == 1
    assert "may point at another machine" in text


def test_nova_unreachable_fails_and_the_other_checks_still_run(tmp_path):
    def unreachable(conf):
        raise cb.ComputeError("cannot connect to Nova through cloud "
                              "'instanceha': Unable to establish connection")
    report, text = Bed(tmp_path).run(compute_factory=unreachable)
    assert report.exit_code == 1
    assert _levels(report, "nova") == ["FAIL"]
    # BMCs are still read (as inventory hosts).
    assert _levels(report, "fencing compute-2") == ["OK"]


def test_noop_is_a_loud_warning_not_a_failure(tmp_path):
    bed = Bed(tmp_path, hosts=1,
              inventory={"compute-0": {"driver": "noop"}},
              fencing={"allow_unfenced": True})
    report, text = bed.run()
    assert report.exit_code == 0, text
    assert "NOT powered off" in text
    assert "RESULT: ready to recover, with 2 warning(s)" in text


def test_noop_without_allow_unfenced_fails(tmp_path):
    bed = Bed(tmp_path, hosts=1, inventory={"compute-0": {"driver": "noop"}})
    report, text = bed.run()
    # instanceha run refuses to start on it (exit 2): so does check.
    assert report.exit_code == 2
    assert "allow_unfenced" in text


def test_broker_failure_fails_without_showing_its_password(tmp_path):
    bed = Bed(tmp_path, notifications={
        "enabled": True,
        "transport_url": "rabbit://nova:Rabbit-Secret@127.0.0.1:1/"})

    def refused(conf):
        raise ConnectionRefusedError(
            "cannot reach amqp://nova:Rabbit-Secret@127.0.0.1:1//")
    report, text = bed.run(connect_broker=refused)
    assert report.exit_code == 1
    assert _levels(report, "notifications") == ["FAIL"]
    assert "rabbit://nova:***@127.0.0.1:1/" in text
    assert "Rabbit-Secret" not in text


def test_broker_that_answers(tmp_path):
    bed = Bed(tmp_path, notifications={
        "enabled": True,
        "transport_url": "rabbit://nova:Rabbit-Secret@127.0.0.1:1/"})
    report, text = bed.run()
    assert _levels(report, "notifications") == ["OK"]
    assert bed.broker == ["rabbit://nova:Rabbit-Secret@127.0.0.1:1/"]
    assert "Rabbit-Secret" not in text


def test_a_database_journal_that_refuses_fails_masked(tmp_path):
    bed = Bed(tmp_path, journal={
        "connection": "mysql+pymysql://ih:Db-Secret@127.0.0.1:1/ih"})
    report, text = bed.run()
    assert _levels(report, "journal") == ["FAIL"]
    assert "mysql+pymysql://ih:***@127.0.0.1:1/ih" in text
    assert "Db-Secret" not in text


def test_stale_inventory_entries_are_a_warning(tmp_path):
    bed = Bed(tmp_path, hosts=2, inventory={
        "compute-%d" % i: {"driver": "redfish",
                           "address": "https://bmc-%d" % i,
                           "password": BMC_PASSWORD}
        for i in range(3)})
    report, text = bed.run()
    assert "entries for host(s) Nova does not list as compute services: " \
        "compute-2" in text


def test_main_prints_the_report_and_returns_its_status(tmp_path, capsys):
    code = check.main(["--config-file", str(tmp_path / "missing.conf")])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("FAIL  configuration: ")


def test_coordination_backend_reached_or_not(tmp_path):
    # Replicas need a shared journal (run refuses SQLite with them).
    bed = Bed(tmp_path, coordination={
        "backend_url": "redis://:Redis-Secret@127.0.0.1:1"},
        journal={"connection": "mysql+pymysql://ih:x@127.0.0.1:1/ih"})
    seen = []

    def reachable(conf):
        seen.append(conf.coordination.group)
        return "reachable; group instanceha has 2 member(s)"
    report = check.run(["--config-file", bed.conf_path],
                       compute_factory=lambda conf: bed.compute,
                       fencer_factory=lambda name, conf: bed.fencer,
                       probe_coordination=reachable)
    text = report.render()
    assert seen == ["instanceha"]
    assert "OK    coordination: redis://:***@127.0.0.1:1: reachable" in text

    def refused(conf):
        raise ConnectionRefusedError("[Errno 111] Connection refused")
    report = check.run(["--config-file", bed.conf_path],
                       compute_factory=lambda conf: bed.compute,
                       fencer_factory=lambda name, conf: bed.fencer,
                       probe_coordination=refused)
    assert report.exit_code == 1
    assert _levels(report, "coordination") == ["FAIL"]
    assert "Redis-Secret" not in report.render()


def test_without_coordination_it_is_skipped(tmp_path):
    report, text = Bed(tmp_path).run()
    assert _levels(report, "coordination") == ["SKIP"]


def test_the_real_transport_code_path_on_the_fake_driver(tmp_path):
    """oslo.messaging's fake:// driver has no broker connection to open:
    the transport is built (URL and driver checked) and said so."""
    bed = Bed(tmp_path, notifications={"enabled": True,
                                       "transport_url": "fake://"})
    report = check.run(["--config-file", bed.conf_path],
                       compute_factory=lambda conf: bed.compute,
                       fencer_factory=lambda name, conf: bed.fencer)
    [line] = [f for f in report.findings if f.what == "notifications"]
    assert line.level == "OK" and "fake://" in line.text
    assert "transport FakeDriver built" in line.text


def test_an_unknown_transport_scheme_fails(tmp_path):
    bed = Bed(tmp_path, notifications={"enabled": True,
                                       "transport_url": "nosuch://h/"})
    report = check.run(["--config-file", bed.conf_path],
                       compute_factory=lambda conf: bed.compute,
                       fencer_factory=lambda name, conf: bed.fencer)
    assert _levels(report, "notifications") == ["FAIL"]
    # instanceha run refuses to start on it (exit 2): so does check.
    assert report.exit_code == 2


def test_entries_reaching_one_machine_by_other_addresses_fail(tmp_path):
    """Issue 21: compute-2's entry reaches compute-1's machine by another
    address (its IPMI interface, say): both BMCs report one system UUID.
    compute-0's BMC reports the host name of compute-1's machine."""
    bed = Bed(tmp_path)
    same = "4c4c4544-0051-3710-8057-b5c04f4e4b32"

    def system_identity(bmc):
        return {"bmc-0": {"hostname": "compute-1.example.net"},
                "bmc-1": {"uuids": [same]},
                "bmc-2": {"uuids": [same]}}[bmc.address.split("//")[1]]
    bed.fencer.system_identity = system_identity
    report, text = bed.run()
    assert report.exit_code == 1, text
    assert "hosts compute-1, compute-2 reach one machine (system UUID %s" \
        % same in text
    assert "the BMC of compute-0's entry reports the machine compute-1, " \
        "i.e. compute host compute-1" in text


class _Blocklist(fb.FencingDriver):
    """A ceph_blocklist stand-in: reads a fixed blocklist."""
    name = "ceph_blocklist"
    proves = fb.STORAGE

    def __init__(self, listed=(), error=None):
        self.listed, self.error = set(listed), error

    def blocklist(self, bmc):
        if self.error:
            raise fb.BmcUnreachable(self.error)
        return self.listed

    def addresses(self, bmc):
        return ["%s:0/0" % a for a in bmc.options["addresses"]]

    def power_off(self, bmc):
        raise AssertionError("no power")

    def power_state(self, bmc):
        return fb.PowerState.UNKNOWN


def _ceph_run(tmp_path, driver, levels):
    bed = Bed(tmp_path, hosts=1, inventory={"compute-0": {
        "levels": levels, "password": BMC_PASSWORD}})
    report = check.run(
        ["--config-file", bed.conf_path],
        compute_factory=lambda conf: bed.compute,
        fencer_factory=lambda name, conf: (
            driver if name == "ceph_blocklist" else bed.fencer),
        connect_broker=lambda conf: "connected")
    return report, report.render()


CEPH = {"driver": "ceph_blocklist", "addresses": ["10.0.2.5"],
        "protects": ["volumes"]}
REDFISH = {"driver": "redfish", "address": "https://bmc-0",
           "username": "admin"}


def test_storage_fencing_is_read_not_changed(tmp_path):
    report, text = _ceph_run(tmp_path, _Blocklist(), [REDFISH, CEPH])
    assert report.exit_code == 0, text
    assert "ceph_blocklist: the monitors answer; 10.0.2.5:0/0 not " \
        "blocklisted" in text
    report, text = _ceph_run(tmp_path, _Blocklist(["10.0.2.5:0/0"]),
                             [REDFISH, CEPH])
    assert "10.0.2.5:0/0 blocklisted already" in text


def test_storage_fencing_unreachable_fails_and_storage_alone_warns(tmp_path):
    report, text = _ceph_run(tmp_path, _Blocklist(error="no monitor"),
                             [CEPH])
    assert report.exit_code == 1, text
    assert "ceph_blocklist: no monitor" in text
    assert "no power fencing, only ceph_blocklist: servers with a local " \
        "disk are never evacuated" in text
    assert "noop" not in text
