"""Safety rules on real Nova: the real ``instanceha run`` process against the
real-peer test bed.

(a) a fence_kdump dump only delays the power-off (default
    ``[kdump] action = fence_after_dump``); the host is still powered off
    through its BMC before any server moves;
(b) an engine restarted without its journal finds a host it isolated back
    and cleaned up: it puts it back in service and never powers it off;
(c) a compute service its operator disabled is left alone when it dies
    (``[policy] recover_disabled_hosts = false``).

Every assertion reads the world through Nova's API or the BMC peer; the
engine's status file and journal are checked only for what they must
record.
"""

import contextlib
import datetime
import math
import os
import subprocess
import threading
import time

from functional import events_fixtures as fx
from functional.peers import procs
from functional.realnova.engine import TIMINGS, boot_victims

# detection delta + grace period: how long after Nova's last heartbeat a
# dead host is due for fencing
FENCE_DUE_AFTER = (TIMINGS["detection"]["delta"]
                   + TIMINGS["detection"]["grace_period"])


class Watch:
    """Samples a host's BMC power and its evacuation migrations in a thread.

    Each sample reads the migrations, then the BMC: a migration seen while
    the BMC still says On *afterwards* is a server moved off a host that
    was not powered off (no clock comparison needed)."""

    def __init__(self, bed, host, interval=0.1):
        self.bed, self.host, self.interval = bed, host, interval
        self.samples = []           # (time, n_migrations, power)
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="watch-%s" % host)

    def _run(self):
        while not self._stop.is_set():
            try:
                migs = self.bed.cloud.migrations(self.host)
                power = self.bed.bmc(self.host).power_state()
                self.samples.append((time.time(), len(migs), power))
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def moved_while_on(self):
        return [s for s in self.samples if s[1] and s[2] != "off"]

    def powers(self):
        return {s[2] for s in self.samples}


def _journal(eng):
    return eng.reading_journal()


def _assert_all_elsewhere(bed, host, ids):
    for s in bed.cloud.wait_servers(ids, timeout=90):
        assert s["status"] == "ACTIVE", s
        assert s["OS-EXT-SRV-ATTR:host"] not in (host, None), s


def _nova_time(text):
    """A Nova timestamp (naive UTC, e.g. '2026-11-23T18:58:53.000000')."""
    dt = datetime.datetime.fromisoformat(text.rstrip("Z"))
    return dt.replace(tzinfo=datetime.timezone.utc).timestamp()


def _disable_service(bed, host, reason):
    """What an operator does: PUT /os-services/{id} at microversion 2.53."""
    svc = bed.cloud.service(host)
    bed.cloud.call("PUT", "/os-services/%s" % svc["id"],
                   {"status": "disabled", "disabled_reason": reason},
                   microversion="2.53")
    return bed.cloud.service(host)


def _wait_down(bed, host, timeout=30):
    """Nova reports the service down (service_down_time after its last
    heartbeat)."""
    return procs.wait_until(lambda: bed.cloud.service(host)["state"] == "down",
                            timeout, "down", "nova-compute-%s" % host,
                            interval=0.5)


# -- (a) a dump delays the power-off, it does not replace it -----------------

def test_kdump_delays_power_off_until_dump_over_then_fenced_before_evacuation(
        bed, engine):
    host = bed.hosts[0]
    sender = fx.fence_kdump_send()
    ids = boot_victims(bed, host)
    eng = engine({"kdump": {"enabled": True, "listen_address": "127.0.0.1",
                            "port": 0, "resolve_names": False,
                            "host_map": "%s:127.0.0.1" % host,
                            "timeout": 3.0, "max_dump_time": 120.0}}).start()
    port = eng.status()["sources"]["kdump"]["port"]
    assert port, eng.status()["sources"]

    with Watch(bed, host) as watch:
        bed.cloud.kill_compute(host)        # hung host: its BMC still says On
        killed = time.time()
        # The "dump kernel" sends every second; -c bounds it should the
        # test die before it stops the sender.
        dump = subprocess.Popen([sender, "-p", str(port), "-i", "1",
                                 "-c", "90", "127.0.0.1"],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            # Keep dumping until Nova reports the host down and its grace
            # period is over by a margin: without the dump it would be
            # powered off by now.
            def still_dumping():
                assert dump.poll() is None, "fence_kdump_send stopped early"
                assert bed.bmc(host).power_state() == "on"
                assert bed.cloud.migrations(host) == []
                for sid in ids:
                    assert bed.cloud.server(sid)["OS-EXT-SRV-ATTR:host"] == host
                return bed.cloud.service(host)["state"] == "down"
            deadline = time.monotonic() + 40
            while not still_dumping():  # its assertions fail at once
                assert time.monotonic() < deadline, "%s never down" % host
                time.sleep(0.3)
            # Due for fencing once Nova says down or the heartbeat is older
            # than delta, whichever is later for instanceha: hold past it.
            down = max(time.time(), killed + TIMINGS["detection"]["delta"])
            hold_until = down + TIMINGS["detection"]["grace_period"] + 4.0
            while time.time() < hold_until:
                still_dumping()
                time.sleep(0.3)
            state, reason = eng.states()[host]
            assert state == "suspect" and "kdump in progress" in reason, (
                state, reason)
        finally:
            dump.kill()
            dump.wait()
        stopped = time.time()
        assert eng.status()["sources"]["kdump"]["accepted"] >= 5, \
            eng.status()["sources"]

        eng.wait_state(host, "evacuated", timeout=120)
        _assert_all_elsewhere(bed, host, ids)
    assert not watch.errors, watch.errors[:3]
    assert not watch.moved_while_on(), watch.moved_while_on()[:3]
    assert bed.bmc(host).power_state() == "off"
    assert stopped - killed > FENCE_DUE_AFTER + 4, (
        "the dump did not outlast the grace period; nothing was delayed")

    with _journal(eng) as j:
        fence = [a for a in j.actions()
                 if a["kind"] == "fence" and a["host_name"] == host]
        steps = [(t["dst"], t["reason"]) for t in j.transitions()
                 if t["host_name"] == host]
    assert len(fence) == 1 and fence[0]["outcome"] == "fence_ok", fence
    # powered off only after the messages stopped ([kdump] timeout 3 s
    # after the last one, which came at most 1 s before `stopped`)
    assert fence[0]["started_at"] >= stopped + 1.0, (fence, stopped)
    dsts = [d for d, _ in steps]
    fencing = [r for d, r in steps if d == "fencing"]
    assert fencing and "dump is over" in fencing[0], steps
    assert dsts.index("fencing") < dsts.index("fenced"), steps
    assert any("kdump" in r for d, r in steps
               if d == "suspect"), steps
    # ...and before Nova created any evacuation migration (Nova stores
    # whole seconds: compare at that precision).
    migs = bed.cloud.migrations(host)
    assert {m["instance_uuid"] for m in migs} == set(ids)
    first_move = min(_nova_time(m["created_at"]) for m in migs)
    assert first_move >= math.floor(fence[0]["finished_at"]), (
        first_move, fence[0])
    svc = bed.cloud.service(host)
    assert svc["forced_down"] and svc["status"] == "disabled", svc


# -- (b) restart without the journal -------------------------------------------

def test_restart_without_journal_puts_back_a_returned_host_without_fencing(
        bed, engine):
    host = bed.hosts[1]
    ids = boot_victims(bed, host)
    eng = engine()
    eng.start()
    bed.cloud.kill_compute(host)
    eng.wait_state(host, "evacuated", timeout=120)
    _assert_all_elsewhere(bed, host, ids)
    assert bed.bmc(host).power_state() == "off"
    eng.stop()

    # A new machine: the journal is gone (SQLite: the file and its WAL).
    journal_file = eng.journal_url[len("sqlite:///"):]
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(journal_file + suffix)
    assert not os.path.exists(journal_file)

    # Power back on: the link starts nova-compute, which cleans up the
    # evacuated servers and Nova marks the migrations completed.
    bed.bmc(host).power_on()
    procs.wait_until(
        lambda: {m["status"] for m in bed.cloud.migrations(host)}
        == {"completed"}, 120, "migrations completed",
        "nova-compute-%s" % host, bed.cloud.log_of("nova-compute-%s" % host),
        interval=1)
    svc = bed.cloud.service(host)
    assert svc["forced_down"] and svc["status"] == "disabled", svc
    assert svc["disabled_reason"].startswith("instanceha: "), svc
    # Nova's cleanup runs at the compute's start, before its first
    # heartbeat (nova.servicegroup's initial reporting delay is 5 s): the
    # new engine starts now, while Nova still shows the host down with our
    # marker. It must give the host time to report, not power it off.
    assert bed.bmc(host).power_state() == "on"
    events_before = len(bed.link.events)

    with Watch(bed, host, interval=0.2) as watch:
        eng.start()                             # same config, empty journal
        eng.wait_state(host, "active", timeout=120)
        time.sleep(FENCE_DUE_AFTER)             # nothing more happens
    assert not watch.errors, watch.errors[:3]
    assert watch.powers() == {"on"}, watch.samples
    assert not [e for e in bed.link.events[events_before:]
                if e[1] == host and "power-off" in e[2]], bed.link.events
    assert bed.cloud.compute_running(host)
    svc = bed.cloud.service(host)
    assert not svc["forced_down"] and svc["status"] == "enabled", svc
    assert svc["state"] == "up", svc
    for s in (bed.cloud.server(i) for i in ids):
        assert s["status"] == "ACTIVE" and s["OS-EXT-SRV-ATTR:host"] != host
    with _journal(eng) as j:
        kinds = [a["kind"] for a in j.actions() if a["host_name"] == host]
        steps = [t["dst"] for t in j.transitions() if t["host_name"] == host]
    assert "fence" not in kinds, kinds
    assert steps and steps[0] == "pending", steps
    assert "fencing" not in steps and "recovering" in steps, steps
    assert steps[-1] == "active", steps


# -- (c) a host its operator disabled ------------------------------------------

def test_host_disabled_by_operator_is_left_alone(bed, engine):
    host = bed.hosts[2]
    reason = "RAID swap"
    ids = boot_victims(bed, host)
    svc = _disable_service(bed, host, reason)
    assert svc["status"] == "disabled" and svc["disabled_reason"] == reason
    eng = engine().start()

    with Watch(bed, host, interval=0.3) as watch:
        bed.cloud.kill_compute(host)
        _wait_down(bed, host)
        eng.wait(lambda: "disabled by operator: %s" % reason
                 in eng.states()[host][1], 60,
                 "%s held as disabled by operator" % host)
        time.sleep(FENCE_DUE_AFTER + 4)    # detection and grace long over
    assert not watch.errors, watch.errors[:3]
    assert watch.powers() == {"on"}, watch.samples
    assert {s[1] for s in watch.samples} == {0}

    assert bed.bmc(host).power_state() == "on"
    assert bed.cloud.migrations(host) == []
    assert bed.cloud.migrations(host, mtype=None) == []
    for sid in ids:
        assert bed.cloud.server(sid)["OS-EXT-SRV-ATTR:host"] == host
    svc = bed.cloud.service(host)
    assert svc["state"] == "down", svc          # really dead all along
    assert svc["status"] == "disabled" and svc["disabled_reason"] == reason
    assert not svc["forced_down"], svc
    state, why = eng.states()[host]
    assert state == "suspect", (state, why)
    assert "disabled by operator: %s" % reason in why, why
    assert "recover_disabled_hosts = false" in why, why
    with _journal(eng) as j:
        assert [a for a in j.actions() if a["host_name"] == host] == []


# -- issue 21, hole 1: a proof of death is never reused ------------------------

def test_restart_never_evacuates_a_fenced_host_powered_on_meanwhile(
        bed, engine):
    """The engine journals the host ``fenced`` (its BMC confirmed Off) and
    is killed right there; the machine is powered on again (a BMC
    power-restore policy, a technician). The restarted engine proves it
    dead again before any evacuate request: the BMC says On, so nothing
    is sent; once its compute reports it is put back with its servers."""
    from functional.engine_process import armed_env
    host = bed.hosts[0]
    ids = boot_victims(bed, host)
    eng = engine({"policy": {"resume_boot_time": 120.0}})
    eng.start(env=armed_env("after_transition:fenced"))
    bed.cloud.kill_compute(host)
    assert eng.wait_exit(120) == -9, eng.log_path
    assert bed.bmc(host).power_state() == "off"
    bed.bmc(host).power_on()             # the compute boots again
    with Watch(bed, host, interval=0.3) as watch:
        eng.start()
        eng.wait(lambda: eng.states()[host][0] in ("pending", "recovering",
                                                   "active"), 90,
                 "%s watched again, not evacuated" % host)
        eng.wait_state(host, "active", timeout=120)
    assert watch.errors == [], watch.errors
    assert bed.cloud.migrations(host) == []
    assert watch.moved_while_on() == []
    with _journal(eng) as j:
        steps = [t["dst"] for t in j.transitions()
                 if t["host_name"] == host]
        evacs = [e for e in j.evacuations() if e["host_name"] == host]
    assert evacs == [], evacs
    assert "pending" in steps and "evacuated" not in steps, steps
    for s in bed.cloud.wait_servers(ids, timeout=60):
        assert s["OS-EXT-SRV-ATTR:host"] == host, s


# -- issue 21, hole 2: a wrong BMC mapping is never taken as proof --------------

def test_an_entry_pointing_at_a_machine_that_is_off_is_never_proof(
        bed, engine, tmp_path):
    """The host's inventory entry points at another machine's BMC (a real
    Redfish emulator, a retired machine that is off). The audit at start
    reads Off while Nova has the host up and Nova records another
    heartbeat: UNPROTECTED. When its compute dies (the machine runs on),
    it goes to failed; nothing is powered off, nothing evacuated."""
    import yaml
    from functional.peers import redfish
    host = bed.hosts[0]
    ids = boot_victims(bed, host)
    retired = redfish.RedfishBMC("retired-%s" % host, tmp_path).start()
    try:
        retired.power_off()
        procs.wait_until(lambda: retired.power_state() == "off", 20,
                         "the retired machine off", "redfish")
        eng = engine()
        path = os.path.join(eng.workdir, "bmc.yaml")
        with open(path) as f:
            inv = yaml.safe_load(f)
        inv["hosts"][host] = retired.inventory_entry()
        with open(path, "w") as f:
            yaml.safe_dump(inv, f)
        eng.start()
        eng.wait(lambda: "BMC untrusted" in (
            eng.status().get("unprotected") or {}).get(host, ""), 60,
            "%s UNPROTECTED, its BMC untrusted" % host)
        with Watch(bed, host, interval=0.3) as watch:
            bed.cloud.kill_compute(host)
            state, reason = eng.wait_state(host, "failed", timeout=90)
        assert "UNPROTECTED" in reason, reason
        assert watch.errors == [], watch.errors
        assert watch.powers() == {"on"}
        assert bed.cloud.migrations(host) == []
        assert retired.power_state() == "off"
        for s in bed.cloud.wait_servers(ids, timeout=60):
            assert s["OS-EXT-SRV-ATTR:host"] == host, s
    finally:
        retired.stop()
