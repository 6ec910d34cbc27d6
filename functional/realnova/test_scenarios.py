"""Recovery scenarios: the real engine process against real Nova.

Every assertion reads the world through Nova's API or the BMC peer, not the
engine's own view; the engine's status file and journal are checked only for
what they must record.
"""

import pytest

from functional.peers import procs
from functional.realnova.engine import boot_victims


def _assert_evacuated(bed, host, ids):
    servers = bed.cloud.wait_servers(ids, timeout=60)
    for s in servers:
        assert s["status"] == "ACTIVE" and s["OS-EXT-SRV-ATTR:host"] not in (host, None), s
    svc = bed.cloud.service(host)
    assert svc["forced_down"] is True
    assert svc["status"] == "disabled"
    assert svc["disabled_reason"].startswith("instanceha: "), svc
    migs = bed.cloud.migrations(host)
    assert {m["instance_uuid"] for m in migs} == set(ids)
    return svc


def _kill_and_recover(bed, eng, host, ids):
    bed.cloud.kill_compute(host)          # the host hangs; its BMC still says On
    eng.wait_state(host, "evacuated", timeout=120)
    _assert_evacuated(bed, host, ids)
    assert bed.bmc(host).power_state() == "off"


def test_dead_compute_fenced_disabled_and_evacuated(bed, engine):
    host = bed.hosts[0]
    ids = boot_victims(bed, host)
    eng = engine().start()
    _kill_and_recover(bed, eng, host, ids)
    for other in bed.hosts[1:]:
        svc = bed.cloud.service(other)
        assert not svc["forced_down"] and svc["status"] == "enabled"
        assert bed.bmc(other).power_state() == "on"
    j = eng.journal()
    steps = [t["dst"] for t in j.transitions() if t["host_name"] == host]
    assert steps[:5] == ["suspect", "fencing", "fenced", "evacuating", "evacuated"], steps
    # Nova bumps a service's updated_at on every PUT (force-down, disable),
    # so updated_at is not a heartbeat; a dead host must not look returned.
    false_return = steps[5:]
    assert [(a["kind"], a["outcome"]) for a in j.actions()] == [
        ("fence", "fence_ok"), ("isolate", "isolate_ok"), ("evacuate", "evacuate_ok")]
    evacs = j.evacuations()
    assert {e["server_id"] for e in evacs} == set(ids)
    assert {e["status"] for e in evacs} == {"done"}

    # Scenario 2: power back on -> Nova cleans up -> re-enabled
    bed.bmc(host).power_on()
    eng.wait_state(host, "active", timeout=120)
    svc = bed.cloud.service(host)
    assert not svc["forced_down"] and svc["status"] == "enabled", svc
    assert {m["status"] for m in bed.cloud.migrations(host)} == {"completed"}
    procs.wait_until(lambda: bed.cloud.service(host)["state"] == "up", 30,
                     "up", "nova-compute-%s" % host)
    assert not false_return, (
        "engine took the isolate PUT's updated_at bump for a heartbeat "
        "while the host was dead: %s" % false_return)


# On the simulator in CI (functional/sim/test_recovery.py::test_leave_disabled).
@pytest.mark.long
def test_leave_disabled_keeps_returned_host_disabled(bed, engine):
    host = bed.hosts[1]
    ids = boot_victims(bed, host)
    eng = engine({"evacuation": {"leave_disabled": True}}).start()
    _kill_and_recover(bed, eng, host, ids)
    bed.bmc(host).power_on()
    state, reason = eng.wait_state(host, "active", timeout=120)
    svc = bed.cloud.service(host)
    assert not svc["forced_down"] and svc["status"] == "disabled", svc
    assert {m["status"] for m in bed.cloud.migrations(host)} == {"completed"}


def test_bmc_refusing_power_off_means_no_evacuation(bed, engine):
    host = bed.hosts[2]
    ids = boot_victims(bed, host)
    bed.redfish[host].restart(refuse_power_off=True)
    eng = engine().start()
    bed.cloud.kill_compute(host)
    state, reason = eng.wait_state(host, "failed", timeout=120)
    assert host in reason
    assert bed.cloud.migrations(host) == []
    for sid in ids:
        assert bed.cloud.server(sid)["OS-EXT-SRV-ATTR:host"] == host
    svc = bed.cloud.service(host)
    assert not svc["forced_down"]
    assert bed.bmc(host).power_state() == "on"
    assert bed.redfish[host].password not in eng.log_text()


def test_ipmi_fenced_host_is_evacuated_and_returns(bed, engine):
    host = bed.hosts[0]
    bmc = bed.use_ipmi(host)
    ids = boot_victims(bed, host)
    eng = engine().start()
    _kill_and_recover(bed, eng, host, ids)
    assert bmc.power_state() == "off"
    assert any("set power 0" in line for line in bmc.calls())
    assert bmc.password not in eng.log_text()
    bmc.power_on()
    eng.wait_state(host, "active", timeout=120)
    svc = bed.cloud.service(host)
    assert not svc["forced_down"] and svc["status"] == "enabled", svc
