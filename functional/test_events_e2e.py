"""Event sources end to end: the real engine process (``instanceha run``)
against the simulated cloud, with notifications through real RabbitMQ and
fence_kdump messages from the real fence_kdump_send.

The reconciler is slowed down (``poll_interval`` 60 s) where a test must
show that an *event* started the work, not a poll.
"""

import subprocess
import time

import pytest

from functional import events_fixtures as fx
from functional.sim.conftest import Cloud

SLOW_POLL = {"poll_interval": 60.0}


@pytest.fixture
def clouds(tmp_path):
    made = []

    def make(overrides, **sim):
        sim.setdefault("hosts", 4)
        sim.setdefault("servers_per_host", 2)
        sim.setdefault("evacuation_time", 0.2)
        cloud = Cloud(tmp_path / ("cloud%d" % len(made)), overrides, **sim)
        made.append(cloud)
        return cloud
    yield make
    for cloud in made:
        cloud.close()


def notif_conf(url, pool="instanceha-e2e"):
    return {"enabled": True, "transport_url": url, "pool": pool}


FAST_RECONNECT = {"rabbit_retry_interval": 1, "rabbit_retry_backoff": 0,
                  "rabbit_interval_max": 1}


def service_update(cloud, name, **changes):
    svc = cloud.sim.snapshot()["services"][name]
    data = {"host": name, "binary": "nova-compute", "topic": "compute",
            "report_count": 10, "disabled": svc["status"] == "disabled",
            "disabled_reason": svc["disabled_reason"],
            "availability_zone": None, "forced_down": svc["forced_down"],
            "last_seen_up": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                          time.gmtime()),
            "version": 74, "uuid": svc["id"]}
    data.update(changes)
    return {"nova_object.name": "ServiceStatusPayload",
            "nova_object.namespace": "nova", "nova_object.version": "1.1",
            "nova_object.data": data}


def force_down_by_another_actor(cloud, name):
    svc_id = cloud.sim.snapshot()["services"][name]["id"]
    cloud.sim.update_service(svc_id, forced_down=True)
    return service_update(cloud, name, forced_down=True)


def sources(cloud):
    return cloud.status().get("sources", {})


@pytest.mark.parametrize("workers", [1, 2])
def test_forced_down_notification_starts_fencing(clouds, vhost, workers):
    """In the engine process itself, and with two listener worker
    processes that the engine process starts."""
    conf = dict(notif_conf(vhost.url, "e2e-fd-%d" % workers), workers=workers)
    cloud = clouds({"detection": SLOW_POLL, "notifications": conf})
    cloud.start_engine()
    # Worker processes declare the pool's queue a moment after the start.
    assert fx.wait_for(lambda: sources(cloud).get("notifications", {})
                       .get("connected"), 30), sources(cloud)
    notifier = fx.NovaNotifier(vhost.url)
    try:
        cloud.sim.kill("compute-1")
        t0 = time.monotonic()
        notifier.info("service.update",
                      force_down_by_another_actor(cloud, "compute-1"))
        assert fx.wait_for(lambda: cloud.sim.snapshot()["hosts"]["compute-1"]
                           ["power"] == "off", 20), cloud.states()
        took = time.monotonic() - t0
        # grace_period (1 s) + fencing; the next poll is 60 s away.
        assert took < 15, took
        cloud.wait_state("compute-1", "evacuated", timeout=30)
        others = cloud.sim.snapshot()["hosts"]
        assert [n for n, h in others.items() if h["power"] == "off"] == [
            "compute-1"]
        health = sources(cloud)["notifications"]
        assert health["events"] >= 1 and health["connected"]
        if workers > 1:
            assert [w["connected"] for w in health["workers"]] == [True] * 2
    finally:
        notifier.close()


def test_own_writes_do_not_loop_back(clouds, vhost):
    """The engine's own force-down/disable, echoed as Nova would, changes
    nothing: the host finishes its recovery and no other host is touched."""
    cloud = clouds({"notifications": notif_conf(vhost.url, "e2e-own")})
    cloud.start_engine()
    notifier = fx.NovaNotifier(vhost.url)
    try:
        cloud.sim.kill("compute-2")
        cloud.wait_state("compute-2", "evacuated", timeout=40)
        svc = cloud.sim.snapshot()["services"]["compute-2"]
        assert svc["disabled_reason"].startswith("instanceha:")
        before = cloud.journal().transitions()
        notifier.info("service.update", service_update(cloud, "compute-2"))
        assert fx.wait_for(
            lambda: sources(cloud)["notifications"]["received"] >= 1, 10)
        time.sleep(1.5)    # give a loop-back time to show (it must not)
        assert cloud.journal().transitions() == before
        assert cloud.states()["compute-2"][0] == "evacuated"
    finally:
        notifier.close()


def _power(cloud, host):
    return cloud.sim.snapshot()["hosts"][host]["power"]


def _kdump_victim(clouds, *sender_args, **kdump):
    """A cloud whose engine takes fence_kdump from 127.0.0.1 as compute-1,
    compute-1's nova-compute killed (its guests still run), and the real
    fence_kdump_send started from that address: (cloud, sender process)."""
    sender = fx.fence_kdump_send()
    conf = {"enabled": True, "listen_address": "127.0.0.1", "port": 0,
            "resolve_names": False, "host_map": "compute-1:127.0.0.1"}
    conf.update(kdump)
    cloud = clouds({"kdump": conf})
    cloud.start_engine()
    port = sources(cloud)["kdump"]["port"]
    cloud.sim.kill("compute-1")
    dump = subprocess.Popen([sender, "-p", str(port), "-i", "1",
                             *sender_args, "127.0.0.1"],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return cloud, dump


def _fencing_reason(cloud, host):
    reasons = [t["reason"] for t in cloud.journal().transitions()
               if t["host_name"] == host and t["dst"] == "fencing"]
    assert reasons, cloud.journal().transitions()
    return reasons[0]


def _assert_powered_off_before_any_server_moved(cloud, host):
    fence = [a for a in cloud.journal().actions()
             if a["kind"] == "fence" and a["host_name"] == host]
    assert fence and fence[0]["outcome"] == "fence_ok", fence
    moved = [m["created_at"] for m in cloud.sim.snapshot()["migrations"]
             if m["source_compute"] == host]
    assert moved and min(moved) >= fence[0]["finished_at"], (moved, fence)


def test_kdump_delays_power_off_until_the_dump_is_over(clouds):
    """Default (fence_after_dump): only nova-compute is killed, the real
    fence_kdump_send sends from the host's mapped address. That proves
    nothing (anyone on the network can send it): the host is powered off
    once the messages stop, before any server moves."""
    cloud, dump = _kdump_victim(clouds, "-c", "5", timeout=2.5,
                                max_dump_time=60)
    try:
        while dump.poll() is None:  # while messages come: left alone
            assert _power(cloud, "compute-1") == "on"
            time.sleep(0.1)
    finally:
        dump.kill()
        dump.wait()
    assert sources(cloud)["kdump"]["accepted"] >= 4
    cloud.wait_state("compute-1", "evacuated", timeout=30)
    assert _power(cloud, "compute-1") == "off"
    _assert_powered_off_before_any_server_moved(cloud, "compute-1")
    assert "dump is over" in _fencing_reason(cloud, "compute-1")


def test_kdump_that_never_ends_holds_fencing_only_max_dump_time(clouds):
    cloud, dump = _kdump_victim(clouds, timeout=5, max_dump_time=6)
    try:
        cloud.wait_state("compute-1", "evacuated", timeout=40)
        assert dump.poll() is None          # still sending all along
    finally:
        dump.kill()
        dump.wait()
    _assert_powered_off_before_any_server_moved(cloud, "compute-1")
    assert "max_dump_time" in _fencing_reason(cloud, "compute-1")


def test_kdump_evacuate_opt_in_skips_power_off(clouds):
    """[kdump] action = evacuate: the operator trusts the kdump network."""
    cloud, dump = _kdump_victim(clouds, action="evacuate", fence_delay=30.0)
    try:
        cloud.wait_state("compute-1", "evacuated", timeout=30)
    finally:
        dump.terminate()
        dump.wait()
    snap = cloud.sim.snapshot()
    assert snap["hosts"]["compute-1"]["power"] == "on"   # dump not destroyed
    steps = [t["dst"] for t in cloud.journal().transitions()
             if t["host_name"] == "compute-1"]
    assert "fencing" not in steps and "fenced" in steps, steps
    kinds = [a["kind"] for a in cloud.journal().actions()]
    assert "fence" not in kinds, kinds
    assert sources(cloud)["kdump"]["accepted"] >= 1


def test_kdump_from_unknown_address_and_garbage_change_nothing(clouds,
                                                                vhost):
    sender = fx.fence_kdump_send()
    cloud = clouds({"kdump": {"enabled": True, "listen_address": "127.0.0.1",
                              "port": 0, "resolve_names": False,
                              "host_map": "compute-1:127.0.0.9"},
                    "notifications": notif_conf(vhost.url, "e2e-junk")})
    cloud.start_engine()
    port = sources(cloud)["kdump"]["port"]
    subprocess.run([sender, "-p", str(port), "-c", "1", "127.0.0.1"],
                   check=True, timeout=30)
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"\x00garbage", ("127.0.0.1", port))
    notifier = fx.NovaNotifier(vhost.url)
    try:
        notifier.info("service.update", {"nova_object.name": "junk"})
        notifier.info("instance.evacuate", "junk")
        fx.publish_raw(vhost.url, "nova", "versioned_notifications.info",
                       b"\xff\xfe not a message")
        assert fx.wait_for(lambda: (
            sources(cloud)["kdump"]["dropped_unknown"] >= 1
            and sources(cloud)["kdump"]["dropped_bad"] >= 1
            and sources(cloud)["notifications"]["dropped"] >= 2), 15), \
            sources(cloud)
        time.sleep(1.0)
        assert {s for s, _ in cloud.states().values()} == {"active"}
        assert all(h["power"] == "on"
                   for h in cloud.sim.snapshot()["hosts"].values())
        # Still detecting after the junk.
        cloud.sim.kill("compute-3")
        notifier.info("service.update",
                      force_down_by_another_actor(cloud, "compute-3"))
        assert fx.wait_for(lambda: cloud.sim.snapshot()["hosts"]["compute-3"]
                           ["power"] == "off", 20)
    finally:
        notifier.close()


def test_broker_restart_mid_run_detection_still_works(clouds, tmp_path):
    broker = fx.PrivateRabbit(tmp_path / "rabbit").start()
    try:
        cloud = clouds({"detection": SLOW_POLL,
                        "notifications": notif_conf(broker.url, "e2e-rst"),
                        "oslo_messaging_rabbit": FAST_RECONNECT})
        cloud.start_engine()
        assert fx.wait_for(
            lambda: sources(cloud)["notifications"]["connected"], 20)
        broker.restart()
        assert fx.wait_for(
            lambda: sources(cloud)["notifications"]["connected"], 60)
        cloud.sim.kill("compute-0")
        notifier = fx.NovaNotifier(broker.url)
        try:
            payload = force_down_by_another_actor(cloud, "compute-0")
            # The listener re-declares its queue after reconnecting; keep
            # announcing until it is there (Nova would not repeat, but the
            # reconciler covers that gap in production).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and \
                    sources(cloud)["notifications"]["events"] < 1:
                notifier.info("service.update", payload)
                time.sleep(0.5)
            assert fx.wait_for(lambda: cloud.sim.snapshot()["hosts"]
                               ["compute-0"]["power"] == "off", 20)
        finally:
            notifier.close()
    finally:
        broker.stop()


def test_broker_restart_mid_recovery_the_recovery_completes(clouds,
                                                            tmp_path):
    """RabbitMQ restarted while a host's servers are being rebuilt: the
    evacuation is followed through Nova's migrations meanwhile, and every
    server ends ACTIVE once on a live host; the listener reconnects."""
    broker = fx.PrivateRabbit(tmp_path / "rabbit").start()
    try:
        cloud = clouds({"notifications": notif_conf(broker.url, "e2e-mid"),
                        "oslo_messaging_rabbit": FAST_RECONNECT,
                        "evacuation": {"concurrency": 1}},
                       evacuation_time=2.0, servers_per_host=3)
        victims = sorted(sid for sid, s in cloud.sim.snapshot()["servers"]
                         .items() if s["host"] == "compute-1")
        cloud.start_engine()
        assert fx.wait_for(
            lambda: sources(cloud)["notifications"]["connected"], 20)
        cloud.sim.kill("compute-1")
        cloud.wait_state("compute-1", "evacuating", timeout=60)
        broker.restart()
        state, reason = cloud.wait_state("compute-1", "evacuated",
                                         timeout=120)
        assert "3/3 servers evacuated" in reason, reason
        snap = cloud.sim.snapshot()
        for sid in victims:
            s = snap["servers"][sid]
            assert s["host"] != "compute-1" and s["status"] == "ACTIVE", s
        moved = [m["instance_uuid"] for m in snap["migrations"]
                 if m["source_compute"] == "compute-1"]
        assert sorted(moved) == victims          # one request each
        assert fx.wait_for(
            lambda: sources(cloud)["notifications"]["connected"], 60)
    finally:
        broker.stop()
