"""Reserved hosts brought in for a lost host (engine.reserve with
policy.reserved): enabled before its servers are sent, journalled so a
restart neither leaks nor double-uses one, aimed at when configured, and
returned to the reserve when the lost host is back."""

from instanceha.engine import reserve
from tests.unit.test_engine import World


def _world(spares=("compute-3",), servers=2, capacity=2, report=True,
           **reserved):
    """compute-0..2 full (2 servers, room for 2); spares disabled with
    reason 'reserved: rack 9' and empty."""
    w = World(hosts=3 + len(spares), servers=servers, capacity=capacity)
    w.compute.report_capacity = report
    for name in spares:
        w.compute.services[name].update(status="disabled",
                                        disabled_reason="reserved: rack 9")
        for sid in [s for s, v in w.compute.servers.items()
                    if v["host"] == name]:
            del w.compute.servers[sid]
    w.conf.set_override("enabled", True, "reserved_hosts")
    for key, value in reserved.items():
        w.conf.set_override(key, value, "reserved_hosts")
    w.pass_()
    return w


def _on(w, host):
    return sorted(sid for sid, v in w.compute.servers.items()
                  if v["host"] == host)


def test_a_reserved_host_is_enabled_and_takes_the_servers():
    w = _world()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.compute.services["compute-3"]["status"] == "enabled"
    assert _on(w, "compute-3") == ["compute-1-vm-0", "compute-1-vm-1"]
    rows = w.journal.reserved_in_use()
    assert [(r["reserved_host"], r["host_name"], r["original_reason"])
            for r in rows] == [("compute-3", "compute-1",
                                "reserved: rack 9")]
    assert "reserved host(s) compute-3 in service for it" in \
        w.state("compute-1")[1]


def test_without_a_shortfall_no_reserved_host_is_taken():
    w = _world(capacity=5)
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.compute.services["compute-3"]["status"] == "disabled"
    assert w.journal.reserved_in_use() == []


def test_returned_to_the_reserve_with_its_reason_when_the_host_is_back():
    w = _world(return_to_reserve=True)
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    w.compute.boot("compute-1")
    w.until("compute-1", "active")
    spare = w.compute.services["compute-3"]
    assert (spare["status"], spare["disabled_reason"]) == \
        ("disabled", "reserved: rack 9")
    assert w.journal.reserved_in_use() == []
    assert _on(w, "compute-3") == ["compute-1-vm-0", "compute-1-vm-1"]
    assert "compute-3 returned to the reserve" in w.state("compute-1")[1]


def test_kept_in_service_when_return_is_off():
    w = _world()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    w.compute.boot("compute-1")
    w.until("compute-1", "active")
    assert w.compute.services["compute-3"]["status"] == "enabled"
    [row] = w.journal.reserved_history()
    assert row["returned_at"] is not None
    assert row["outcome"].startswith("kept in service")


def test_aimed_at_the_reserved_host_when_target_is_on():
    w = _world(capacity=5, target=True)    # room elsewhere, aimed anyway
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.compute.requested == {"compute-1-vm-0": "compute-3",
                                   "compute-1-vm-1": "compute-3"}
    assert _on(w, "compute-3") == ["compute-1-vm-0", "compute-1-vm-1"]


def test_a_reserved_host_in_use_is_not_given_to_a_second_lost_host():
    w = _world()
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    w.compute.kill("compute-2")
    w.until("compute-2", "pending")
    # compute-3 now has room for nothing more either way; the point is
    # that the journal row keeps it compute-1's.
    rows = w.journal.reserved_in_use()
    assert [(r["reserved_host"], r["host_name"]) for r in rows] == \
        [("compute-3", "compute-1")]
    assert "compute-3 is in use for compute-1" in w.state("compute-2")[1] \
        or "reserved hosts missing" in w.state("compute-2")[1]


def test_a_restart_between_journal_and_enable_enables_it_then():
    """The journal says compute-3 is in use for compute-1 but Nova still
    has it disabled (the process died between the two): the next
    evacuation enables it, for the same lost host."""
    w = _world()
    w.journal.reserved_taken("compute-3", "uuid-1", "compute-1",
                             "reserved: rack 9", w.clock())
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    assert w.compute.services["compute-3"]["status"] == "enabled"
    assert len(w.journal.reserved_history()) == 1     # not taken twice
    assert _on(w, "compute-3") == ["compute-1-vm-0", "compute-1-vm-1"]


def test_without_capacities_one_per_lost_host():
    w = _world(report=False)
    rec_services = w.compute.list_services()
    rec = w.engine.find("compute-1")
    brought, text = reserve.bring_in(w.ctx, rec, rec_services, ())
    assert brought == ("compute-3",) and "compute-3" in text
    assert w.compute.services["compute-3"]["status"] == "enabled"


def test_status_host_lists_every_servers_decision_and_why():
    """instanceha status HOST, from the journal: each server of the last
    recovery with its decision, destination and reason, and the reserved
    hosts brought in for it."""
    from instanceha.cmd import main
    w = _world(servers=3)
    w.compute.servers["compute-1-vm-2"]["metadata"] = {
        "instanceha:repair": "none"}
    w.compute.kill("compute-1")
    w.until("compute-1", "evacuated")
    record, rows, reserved = main.server_decisions(w.journal, "compute-1")
    text = main.format_decisions(record, rows, reserved)
    assert "host compute-1: evacuated:" in text
    lines = {line.split()[0]: line for line in text.splitlines()
             if line.startswith("  compute-1-vm")}
    assert lines["compute-1-vm-0"].split()[1:3] == ["done", "compute-3"]
    assert lines["compute-1-vm-2"].split()[1:3] == ["skipped", "-"]
    assert "repair level none" in lines["compute-1-vm-2"] or \
        "none" in lines["compute-1-vm-2"]
    assert "reserved host compute-3: in service for it" in text
    assert main.server_decisions(w.journal, "nope") == (None, [], [])


def test_status_host_masks_the_database_password(capsys, tmp_path):
    from instanceha.cmd import main
    conf_file = tmp_path / "c.conf"
    conf_file.write_text("[journal]\nconnection = "
                         "mysql+pymysql://ha:s3cret@127.0.0.1:1/x\n")
    rc = main.main(["status", "compute-1", "--config-file", str(conf_file)])
    err = capsys.readouterr().err
    assert rc == 1 and "s3cret" not in err and "ha:***@" in err, err
