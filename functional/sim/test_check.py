"""``instanceha check`` as an operator runs it, against the simulator
(Keystone, Nova API, Redfish BMCs over HTTP), the machine's RabbitMQ and a
private redis-server:
its exit status and report follow the state of the world."""

import os
import urllib.parse

import yaml

from functional.test_coordination import private_redis  # noqa: F401


def _lines(result):
    return result.stdout.splitlines()


def test_a_ready_simulated_cloud_passes(make_cloud):
    c = make_cloud(hosts=3)
    result = c.cli("check")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert _lines(result)[-1] == "RESULT: ready to recover"
    assert "OK    nova: cloud 'sim': max microversion 2." in out
    assert "3 compute service(s), 3 up" in out
    for i in range(3):
        # no agent here: no system UUID to verify the BMC's machine by
        assert any(line.startswith("OK    fencing compute-%d: redfish " % i)
                   and line.endswith("power on; identity not verified: no "
                                     "agent reported the host's system UUID")
                   for line in _lines(result))
    # Read only: the journal is not created, the BMCs are all still on.
    assert not os.path.exists(os.path.join(c.workdir, "journal.sqlite"))
    snap = c.sim.snapshot()
    assert {h["power"] for h in snap["hosts"].values()} == {"on"}
    for h in c.sim.hosts.values():
        assert h.bmc_password not in out + result.stderr
    assert c.sim.password not in out + result.stderr


def test_an_unreachable_bmc_and_a_missing_entry_fail(make_cloud):
    c = make_cloud(hosts=3)
    c.sim.set_bmc("compute-1", reachable=False)
    # compute-2 loses its inventory entry.
    inventory = os.path.join(c.workdir, "bmc.yaml")
    with open(inventory) as f:
        data = yaml.safe_load(f)
    del data["hosts"]["compute-2"]
    with open(inventory, "w") as f:
        yaml.safe_dump(data, f)
    result = c.cli("check")
    assert result.returncode == 1, result.stdout
    lines = _lines(result)
    assert any(line.startswith("FAIL  fencing compute-1: no fencing method "
                               "answers a power-state read") for line in lines)
    assert any(line.startswith("FAIL  inventory: no entry for compute "
                               "host(s) compute-2") for line in lines)
    assert any(line.startswith("OK    fencing compute-0:") for line in lines)
    assert lines[-1] == "RESULT: 2 problem(s) would prevent a recovery"


def test_nova_unreachable_fails(make_cloud):
    c = make_cloud(hosts=2)
    c.server.stop()
    result = c.cli("check")
    assert result.returncode == 1
    assert any(line.startswith("FAIL  nova: ") for line in _lines(result))


def test_the_notification_broker_is_connected(make_cloud, vhost):
    c = make_cloud(hosts=2)
    with open(c.conf_path, "a") as f:
        f.write("\n[notifications]\nenabled = true\ntransport_url = %s\n"
                % vhost.url)
    result = c.cli("check")
    assert result.returncode == 0, result.stdout + result.stderr
    password = urllib.parse.urlsplit(vhost.url).password
    line = next(line for line in _lines(result)
                if line.startswith("OK    notifications: "))
    assert line.endswith(": connected") and ":***@" in line
    # (the machine's broker user may have its name as password)
    assert ":%s@" % password not in result.stdout + result.stderr


def test_a_broker_that_refuses_fails(make_cloud):
    c = make_cloud(hosts=2)
    with open(c.conf_path, "a") as f:
        f.write("\n[notifications]\nenabled = true\ntransport_url = "
                "rabbit://nobody:Wrong-Pass@127.0.0.1:1/\n")
    result = c.cli("check")
    assert result.returncode == 1, result.stdout
    line = next(line for line in _lines(result)
                if line.startswith("FAIL  notifications: "))
    assert "Wrong-Pass" not in result.stdout + result.stderr, line


def test_the_coordination_backend_is_reached_without_joining(
        make_cloud, private_redis):
    c = make_cloud(hosts=2)
    with open(c.conf_path, "a") as f:
        f.write("\n[coordination]\nbackend_url = redis://127.0.0.1:%d\n"
                "lease = 4\nmargin = 1\nheartbeat_interval = 1\n"
                % private_redis.port)
    result = c.cli("check")
    assert "OK    coordination: redis://127.0.0.1:%d: reachable; group " \
        "instanceha not created yet" % private_redis.port in result.stdout
    # The simulated cloud's journal is SQLite: instanceha run refuses
    # replicas on it, and check says so as run does (exit status 2).
    assert result.returncode == 2, result.stdout + result.stderr
    assert any(line.startswith("FAIL  journal: [coordination] backend_url "
                               "is set but [journal] connection is SQLite")
               for line in _lines(result)), result.stdout
    private_redis.stop()
    result = c.cli("check")
    assert result.returncode == 2
    assert any(line.startswith("FAIL  coordination: redis://")
               for line in _lines(result))
