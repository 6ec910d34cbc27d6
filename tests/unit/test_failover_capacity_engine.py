"""Failover capacity in the engine (engine.failover): a pass on the work
queue measures it from what Nova and Placement say, with the evacuator's
own selection; status, /metrics and ``instanceha capacity`` show it."""

import json

from instanceha.api.collector import SnapshotCollector
from instanceha.cmd import capacity as capacity_cmd
from instanceha.cmd.status import format_status
from instanceha.drivers.compute import base as cb
from tests.unit.test_engine import World


def _world(servers=2, capacity=4):
    """Three hosts of ``capacity`` servers (1 vCPU, 1024 MB, 10 GB
    each), ``servers`` on each."""
    w = World(hosts=3, servers=servers, capacity=capacity,
              options={"failover_capacity": {"enabled": True}})
    w.compute.report_capacity = True
    w.pass_()
    return w


def _measure(w):
    w.engine.failover.start()
    w.drain()
    return w.engine.snapshot()["failover_capacity"]


def _hosts(view, scope="cloud"):
    return {s["scope"]: s["hosts"] for s in view["scopes"]}[scope]


def test_half_full_hosts_can_lose_one():
    w = _world()
    view = _measure(w)
    assert view["error"] is None
    assert view["counted"] == 6
    assert _hosts(view) == 1


def test_servers_the_policy_leaves_are_not_counted():
    # Three servers on each host of four places: a lost host's three have
    # one place on each of the two others: 0.
    w = _world(servers=3)
    view = _measure(w)
    assert (view["counted"], _hosts(view)) == (9, 0)
    # The policy leaves two of each host's servers on their host (repair
    # level none): one server per lost host, one place free on each
    # other host: one can fail, not two.
    for sid, v in w.compute.servers.items():
        if sid.endswith(("-vm-0", "-vm-1")):
            v["metadata"] = {"instanceha:repair": "none"}
    # (time passes with the hosts beating: they stay up)
    for _ in range(int(w.conf.failover_capacity.interval // 5)):
        w.pass_(5.0)
    view = w.engine.snapshot()["failover_capacity"]
    assert (view["counted"], _hosts(view)) == (3, 1)


def test_the_measure_runs_again_only_after_its_interval():
    w = _world()
    first = _measure(w)
    calls = []
    real = w.compute.list_all_servers
    w.compute.list_all_servers = \
        lambda **kw: calls.append(1) or real(**kw)
    w.clock.advance(w.conf.failover_capacity.interval / 2)
    w.engine._wake_passes()             # news of every server
    w.drain()
    assert calls == []
    w.clock.advance(w.conf.failover_capacity.interval)
    w.engine.queue.pump()
    w.drain()
    assert calls == [1]
    assert w.engine.snapshot()["failover_capacity"]["at"] > first["at"]


def test_a_failed_read_keeps_the_last_measure_with_the_error():
    w = _world()
    _measure(w)
    w.compute.fail["list_all_servers"] = [cb.ComputeError("Nova down", 503)]
    w.clock.advance(w.conf.failover_capacity.interval + 1)
    w.engine.queue.pump()
    w.drain()
    view = w.engine.snapshot()["failover_capacity"]
    assert "Nova down" in view["error"]
    assert _hosts(view) == 1


def test_metrics_status_and_the_capacity_command(tmp_path, capsys):
    w = _world(servers=4)
    _measure(w)

    from instanceha.api.collector import _failover_capacity
    snap = w.engine.snapshot()
    fams = {f.name: f for f in _failover_capacity(snap["failover_capacity"])}
    g = fams["instanceha_failover_capacity_hosts"]
    assert [(s.labels["scope"], s.value) for s in g.samples] == [
        ("cloud", 0)]
    assert fams["instanceha_failover_capacity_error"].samples[0].value == 0
    # instanceha status: one line
    text = format_status(dict(snap, written_at=w.clock()), now=w.clock())
    assert "failover capacity: cloud: losing its largest host" in text
    # instanceha capacity, from the status file
    status = tmp_path / "status.json"
    status.write_text(json.dumps(dict(snap, written_at=w.clock())))
    conf = tmp_path / "instanceha.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % status)
    assert capacity_cmd.main(["--config-file", str(conf)],
                             now=w.clock()) == 0
    out = capsys.readouterr().out
    assert "SCOPE" in out and "CAN FAIL" in out
    row = [line for line in out.splitlines() if line.startswith("cloud")]
    assert row and row[0].split()[1] == "0" and row[0].endswith("!")
    assert capacity_cmd.main(["--json", "--config-file", str(conf)],
                             now=w.clock()) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stale"] is None
    assert data["scopes"][0]["scope"] == "cloud"


def test_turned_off_it_measures_nothing():
    w = _world()
    w.conf.set_override("enabled", False, "failover_capacity")
    w.engine.failover.start()
    w.drain()
    assert "failover_capacity" not in w.engine.snapshot()


def test_a_member_that_may_not_act_measures_and_shows_nothing():
    w = _world()
    assert _hosts(_measure(w)) == 1
    calls = []
    real = w.compute.list_all_servers
    w.compute.list_all_servers = \
        lambda **kw: calls.append(1) or real(**kw)
    w.ctx.may_act = lambda: "another member acts"
    w.clock.advance(w.conf.failover_capacity.interval + 1)
    w.engine.queue.pump()
    w.drain()
    assert calls == []
    assert "failover_capacity" not in w.engine.snapshot()
    # The pass waits quietly for its next turn (no back-off, no error).
    assert w.engine.snapshot()["hosts"][0]["retrying"] is None
    w.ctx.may_act = lambda: None
    w.clock.advance(w.conf.failover_capacity.interval + 1)
    w.compute.heartbeat()
    w.engine.queue.pump()
    w.drain()
    assert calls == [1]
    assert _hosts(w.engine.snapshot()["failover_capacity"]) == 1


def test_capacity_help_and_no_measure_yet(tmp_path, capsys):
    import pytest
    from instanceha.cmd import main as cli
    with pytest.raises(SystemExit) as exit_:
        cli.main(["capacity", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: instanceha capacity")
    assert "--json" in out and "--config-file" in out
    # A status file without a measure: said on stderr, exit status 1.
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"hosts": [], "written_at": 1.0}))
    conf = tmp_path / "instanceha.conf"
    conf.write_text("[DEFAULT]\nstatus_file = %s\n" % status)
    assert capacity_cmd.main(["--config-file", str(conf)], now=2.0) == 1
    assert "no failover capacity measured yet" in capsys.readouterr().err
