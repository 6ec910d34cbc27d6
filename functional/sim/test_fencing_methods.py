"""Several fencing methods per host, and SIGHUP re-reading the inventory,
with the real ``instanceha run`` against the simulator's Redfish BMCs."""

import os
import signal

import yaml

from functional.sim.conftest import wait_for


def _inventory(c):
    with open(os.path.join(c.workdir, "bmc.yaml")) as f:
        return yaml.safe_load(f)


def _write(c, data):
    path = os.path.join(c.workdir, "bmc.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    os.chmod(path, 0o600)


def _log(c):
    with open(c.log_path) as f:
        return f.read()


def _reloads(c):
    """The inventory reloads the engine finished, in order: 'reloaded' or
    'failed'."""
    return [("failed" if "inventory_reload_failed" in line else "reloaded")
            for line in _log(c).splitlines()
            if "inventory_reload_failed" in line
            or "inventory_reloaded" in line]


def _sighup(c):
    """Send SIGHUP and wait for the reload it causes to finish (one more
    reload outcome in the log); return that outcome."""
    before = len(_reloads(c))
    c.engine.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: len(_reloads(c)) > before, 20,
             "the reload after SIGHUP number %d" % (before + 1))
    return _reloads(c)[before]


def test_second_method_fences_when_the_first_fails_and_sighup_reloads(
        make_cloud):
    c = make_cloud({"audit": {"interval": 2.0}}, hosts=20,
                   servers_per_host=1)
    inv = _inventory(c)
    good = inv["hosts"]["compute-5"]
    # Method 1 holds a password rotated away; method 2 the right one.
    inv["hosts"]["compute-5"] = {"methods": [dict(good, password="stale-pw"),
                                             dict(good)]}
    _write(c, inv)
    c.start_engine()
    wait_for(lambda: "host_fencing_degraded host='compute-5'" in
             _log(c).replace("event='host_fencing_degraded' ",
                             "host_fencing_degraded "), 20,
             "the audit naming compute-5's failing first method")
    assert "compute-5" not in (c.status().get("unprotected") or {})
    c.sim.kill("compute-5")
    c.wait_state("compute-5", "evacuated", timeout=40)
    fenced = [t for t in c.journal().transitions()
              if t["host_name"] == "compute-5" and t["dst"] == "fenced"]
    reason = fenced[0]["reason"]
    assert "fenced by method 2 (redfish" in reason, reason
    assert "after method 1 (redfish" in reason and "failed:" in reason
    assert "stale-pw" not in reason and good["password"] not in reason
    assert c.sim.snapshot()["hosts"]["compute-5"]["power"] == "off"

    # A broken inventory on SIGHUP keeps the one in use.
    with open(os.path.join(c.workdir, "bmc.yaml"), "w") as f:
        f.write("hosts: [this is not: a mapping\n")
    assert _sighup(c) == "failed"
    assert "the previous inventory stays in use" in _log(c)
    c.sim.kill("compute-6")
    c.wait_state("compute-6", "evacuated", timeout=40)

    # A valid one replaces it: compute-7 dropped from it is reported
    # unprotected by the next audit.
    del inv["hosts"]["compute-7"]
    inv["hosts"]["compute-5"] = good
    _write(c, inv)
    # Before the fix of 'instanceha run', a SIGHUP the kernel handed to
    # a thread other than the main one waited for the next signal.
    assert _sighup(c) == "reloaded"
    assert "removed='compute-7'" in _log(c)
    wait_for(lambda: (c.status().get("unprotected") or {}).get("compute-7")
             == "no entry in the fencing inventory", 20,
             "compute-7 unprotected")
    assert c.engine.proc.poll() is None
