"""NotificationSource on the real RabbitMQ: a vhost of our own, Nova-shaped
notifications published by a separate transport ("another actor")."""

import contextlib
import copy
import json
import os
import pathlib
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional import events_fixtures as fx  # noqa: E402
from instanceha.engine.progress import ProgressBoard  # noqa: E402
from instanceha.events import EventKind  # noqa: E402
from instanceha.sources.notifications import NotificationSource  # noqa: E402

RECORDED = json.loads((REPO / "tests" / "data" / "notifications"
                       / "nova-34.0.0-evacuation.json").read_text())
UUID = "f7729eb2-4574-4b66-a61e-b7a572285fc9"
SERVER = "084ff958-d051-4957-a9c4-ae69a881b26f"


def payload(event_type, **changes):
    p = copy.deepcopy(RECORDED[event_type]["payload"])
    p["nova_object.data"].update(changes)
    return p


@contextlib.contextmanager
def listening(vhost, pool, **overrides):
    """(source, sink, board, notifier): a started listener with a progress
    board and a Nova-like notifier on ``vhost``, stopped on exit."""
    conf = fx.make_conf("notifications", enabled=True,
                        transport_url=vhost.url, pool=pool, **overrides)
    fx.fast_reconnect(conf)
    sink, board = fx.Sink(), ProgressBoard()
    source = NotificationSource(conf, sink, time.time, board)
    source.start()
    notifier = fx.NovaNotifier(vhost.url)
    try:
        yield source, sink, board, notifier
    finally:
        notifier.close()
        source.stop()


@pytest.fixture
def world(vhost):
    """(source, sink, board, notifier), listener started and stopped."""
    with listening(vhost, "instanceha-%s" % os.getpid()) as w:
        yield w


def fresh_service_update(**changes):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    changes.setdefault("last_seen_up", now)
    return payload("service.update", **changes)


def test_forced_down_by_another_actor_becomes_event(world):
    source, sink, board, notifier = world
    t0 = time.monotonic()
    notifier.info("service.update", fresh_service_update())
    events = sink.wait(1)
    assert [e.kind for e in events] == [EventKind.FORCED_DOWN]
    assert events[0].host == UUID and events[0].name == "compute1"
    assert sink.times[0] - t0 < 2.0
    health = source.health()
    assert health["connected"] is True
    assert health["received"] == 1 and health["dropped"] == 0


def test_own_write_does_not_loop_back(world):
    source, sink, board, notifier = world
    notifier.info("service.update", fresh_service_update(
        disabled=True, disabled_reason="instanceha: fenced"))
    notifier.info("service.update", fresh_service_update(
        forced_down=False))           # the service returns (another actor)
    events = sink.wait(1)
    assert fx.wait_for(lambda: source.health()["received"] >= 2, 5)
    assert [e.kind for e in sink.events] == [EventKind.HEARTBEAT_OK]
    assert len(events) == 1


def test_evacuation_progress_is_recorded(world):
    source, sink, board, notifier = world
    for event_type in ("instance.evacuate", "instance.rebuild_scheduled",
                       "instance.rebuild.end"):
        notifier.info(event_type, payload(event_type))
    notifier.error("instance.rebuild.error", payload("instance.rebuild.end"))
    # The error priority is another queue: its message may come first, and
    # then the older ones are counted as overtaken instead of applied.
    assert fx.wait_for(lambda: source.health()["progress"]
                       + source.health()["reordered"] >= 4, 10)
    facts = board.facts(SERVER)
    assert facts["host"] == "compute1"
    assert facts["event"] == "instance.rebuild.error"   # the newest
    assert sink.events == []


def test_garbage_is_counted_and_listener_survives(world, vhost):
    source, sink, board, notifier = world
    notifier.info("service.update", {"nova_object.name": "garbage"})
    notifier.info("service.update", "not even an object")
    notifier.info("instance.evacuate", [1, 2, 3])
    fx.publish_raw(vhost.url, "nova", "versioned_notifications.info",
                   b"\x00\xffnot json at all")
    assert fx.wait_for(lambda: source.health()["dropped"] >= 3, 10)
    notifier.info("service.update", fresh_service_update())
    events = sink.wait(1)
    assert [e.kind for e in events] == [EventKind.FORCED_DOWN]
    assert source.health()["errors"] == 0


def test_broker_outage_listener_reconnects(world, vhost):
    source, sink, board, notifier = world
    notifier.info("service.update", fresh_service_update())
    assert len(sink.wait(1)) == 1
    vhost.close_connections()
    # Published while the listener is away: the pool's queue keeps it.
    notifier.info("service.update", fresh_service_update(host="compute2"))
    events = sink.wait(2, timeout=30)
    assert [e.name for e in events] == ["compute1", "compute2"]
    assert fx.wait_for(lambda: source.health()["connected"], 10)
    notifier.info("service.update", fresh_service_update(host="compute3"))
    assert [e.name for e in sink.wait(3, timeout=15)][-1] == "compute3"


def test_health_reports_outage(vhost):
    """While the broker refuses the vhost's logins the listener is not
    connected; once access returns it is again."""
    conf = fx.make_conf("notifications", transport_url=vhost.url,
                        pool="instanceha-health-%s" % os.getpid())
    fx.fast_reconnect(conf)
    source = NotificationSource(conf, fx.Sink(), time.time, None)
    source.start()
    try:
        assert fx.wait_for(lambda: source.health()["connected"], 10)
        fx.rabbitmqctl("clear_permissions", "-p", vhost.name, fx.RABBIT_USER)
        vhost.close_connections()
        assert fx.wait_for(lambda: not source.health()["connected"], 10)
        fx.rabbitmqctl("set_permissions", "-p", vhost.name, fx.RABBIT_USER,
                       ".*", ".*", ".*")
        assert fx.wait_for(lambda: source.health()["connected"], 30)
    finally:
        fx.rabbitmqctl("set_permissions", "-p", vhost.name, fx.RABBIT_USER,
                       ".*", ".*", ".*", check=False)
        source.stop()


def test_two_processes_share_one_pool(vhost):
    """Two listeners with the same pool: each message reaches one."""
    sinks, sources = [], []
    pool = "instanceha-shared-%s" % os.getpid()
    for _ in range(2):
        conf = fx.make_conf("notifications", transport_url=vhost.url,
                            pool=pool)
        sink = fx.Sink()
        source = NotificationSource(conf, sink, time.time, None)
        source.start()
        sinks.append(sink)
        sources.append(source)
    notifier = fx.NovaNotifier(vhost.url)
    try:
        for i in range(20):
            notifier.info("service.update",
                          fresh_service_update(host="compute%d" % i))
        assert fx.wait_for(
            lambda: sum(len(s.events) for s in sinks) >= 20, 15)
        names = sorted(e.name for s in sinks for e in s.events)
        assert names == sorted("compute%d" % i for i in range(20))
    finally:
        notifier.close()
        for source in sources:
            source.stop()


def test_broker_restarted_mid_run(tmp_path):
    """A real broker process restart (a private node, so the machine's
    shared RabbitMQ is left alone): the listener notices, reconnects,
    re-declares its queue and detection works again."""
    broker = fx.PrivateRabbit(tmp_path / "rabbit").start()
    conf = fx.make_conf("notifications", transport_url=broker.url)
    fx.fast_reconnect(conf)
    sink = fx.Sink()
    source = NotificationSource(conf, sink, time.time, None)
    notifier = None
    try:
        source.start()
        notifier = fx.NovaNotifier(broker.url)
        notifier.info("service.update", fresh_service_update())
        assert len(sink.wait(1)) == 1
        broker.stop()
        assert fx.wait_for(lambda: not source.health()["connected"], 15), \
            "health still says connected while the broker is down"
        broker.start()
        assert fx.wait_for(lambda: source.health()["connected"], 60), \
            "listener did not reconnect"
        # The queue (not durable) went with the broker; the listener
        # re-declares it on reconnect. Messages sent while it is being
        # re-declared are lost (the reconciler covers that gap), so keep
        # publishing until one is seen.
        deadline = time.monotonic() + 30
        n = 0
        while time.monotonic() < deadline and len(sink.events) < 2:
            n += 1
            notifier.info("service.update",
                          fresh_service_update(host="after-%d" % n))
            sink.wait(2, timeout=0.5)
        assert len(sink.events) >= 2, "no event after the broker restart"
        assert sink.events[1].name.startswith("after-")
        assert source.health()["errors"] == 0
    finally:
        if notifier is not None:
            notifier.close()
        source.stop()
        broker.stop()
