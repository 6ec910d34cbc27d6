"""The fencing readiness audit against the simulator's Redfish BMCs, with
the real ``instanceha run``: a BMC whose password was rotated behind the
inventory's back, and one that stopped answering, are reported unprotected
(status, /metrics) and cleared once fixed; no BMC is ever powered off."""

from functional.sim.conftest import wait_for


def _unprotected(c):
    return (c.status() or {}).get("unprotected") or {}


def test_audit_reports_unprotected_hosts_and_clears_them(make_cloud):
    c = make_cloud({"audit": {"interval": 2.0}}, hosts=20,
                   servers_per_host=1)
    c.start_engine()
    # The first audit runs at start: every host protected.
    wait_for(lambda: ((c.status() or {}).get("sources", {}).get("audit")
                      or {}).get("audits", 0) >= 1, 20, "the first audit")
    assert _unprotected(c) == {}
    good = c.sim.hosts["compute-4"].bmc_password
    c.sim.set_bmc("compute-4", password="rotated-by-someone")
    c.sim.set_bmc("compute-9", reachable=False)
    wait_for(lambda: set(_unprotected(c)) == {"compute-4", "compute-9"}, 30,
             "compute-4 and compute-9 unprotected")
    found = _unprotected(c)
    assert "401" in found["compute-4"] or "credential" in \
        found["compute-4"].lower(), found
    assert good not in str(found)
    text = c.cli("status").stdout
    assert "UNPROTECTED: 2 host(s)" in text and "compute-9:" in text
    # Fixed: the next audit clears them, and says so once in the log.
    c.sim.set_bmc("compute-4", password=good)
    c.sim.set_bmc("compute-9", reachable=True)
    wait_for(lambda: _unprotected(c) == {}, 30, "both protected again")
    log = open(c.log_path).read()
    assert log.count("event='host_unprotected' host='compute-4'") == 1, log
    assert log.count("event='host_protected' host='compute-4'") == 1
    snap = c.sim.snapshot()
    assert all(h["power"] == "on" for h in snap["hosts"].values())
