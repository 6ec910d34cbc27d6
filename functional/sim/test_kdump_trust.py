"""fence_kdump with ``[kdump] action = evacuate`` (evacuation without
power-off), the real ``instanceha run`` on the simulator: the opt-in needs
``host_map`` and never takes a host's address from name resolution, so a
wrong DNS record cannot have a live host's servers rebuilt elsewhere."""

import shutil
import subprocess

import pytest

from functional import events_fixtures as fx
from functional import waiting

KDUMP = {"enabled": True, "listen_address": "127.0.0.1", "port": 0,
         "action": "evacuate"}


def _kdump_health(cloud):
    return cloud.status().get("sources", {}).get("kdump", {})


def test_evacuate_without_power_off_needs_host_map(make_cloud):
    c = make_cloud({"kdump": KDUMP})
    out, took = c.engine.run_to_exit(timeout=30)
    assert out.returncode == 2, out.stdout + out.stderr
    assert took < 20, took
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("instanceha: configuration error: [kdump] "
                               "action = evacuate needs [kdump] host_map")
    assert c.status() == {"hosts": []}    # it never ran


def _own_hosts_file(tmp_path, line):
    """A command line prefix that runs a program with this machine's
    /etc/hosts plus ``line`` (a private mount namespace: the machine's
    file is not touched): a DNS record the test controls."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare for a private /etc/hosts")
    hosts = tmp_path / "hosts"
    with open("/etc/hosts") as f:
        hosts.write_text(f.read().rstrip("\n") + "\n" + line + "\n")
    wrapper = ["unshare", "-m", "sh", "-c",
               'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
    probe = subprocess.run(wrapper + ["getent", "hosts", line.split()[1]],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("cannot give a process its own /etc/hosts (unshare "
                    "-m, root): %s" % probe.stderr.strip()[-200:])
    assert probe.stdout.split()[0] == line.split()[0], probe.stdout
    return wrapper


def test_a_name_resolved_to_the_sender_never_skips_the_power_off(
        make_cloud, tmp_path):
    """compute-1's nova-compute dies (its guests still run) while some
    process sends fence_kdump from 127.0.0.1, an address a wrong DNS
    record gives compute-1. host_map names compute-2 only. The packet is
    attributed to nobody: compute-1 is powered off (after fence_delay,
    as without kdump) before any of its servers moves."""
    sender = fx.fence_kdump_send()
    wrapper = _own_hosts_file(tmp_path, "127.0.0.1 compute-1")
    c = make_cloud(dict(kdump=dict(KDUMP, host_map="compute-2:127.0.0.12",
                                   resolve_names=True, fence_delay=4.0)))
    c.engine.start(len(c.sim.hosts), timeout=30, wrapper=wrapper)
    port = _kdump_health(c)["port"]
    c.sim.kill("compute-1")
    dump = subprocess.Popen([sender, "-p", str(port), "-i", "1",
                             "127.0.0.1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        waiting.wait_for(
            lambda: _kdump_health(c).get("dropped_unknown", 0) >= 1
            or _kdump_health(c).get("accepted", 0) >= 1, 20,
            "a fence_kdump packet to reach the engine")
        c.wait_state("compute-1", "evacuated", timeout=60)
    finally:
        dump.terminate()
        dump.wait()
    health = _kdump_health(c)
    assert health["accepted"] == 0, health
    assert health["dropped_unknown"] >= 1, health
    fence = [a for a in c.journal().actions()
             if a["kind"] == "fence" and a["host_name"] == "compute-1"]
    assert fence and fence[0]["outcome"] == "fence_ok", fence
    snap = c.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "off"
    moved = [m["created_at"] for m in snap["migrations"]
             if m["source_compute"] == "compute-1"]
    assert moved and min(moved) >= fence[0]["finished_at"], (moved, fence)
