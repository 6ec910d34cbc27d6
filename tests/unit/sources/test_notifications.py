"""NotificationSource: decisions on service.update, progress records for
instance.*, robustness against bad input, over oslo.messaging's fake
transport (no broker, no sleep: thread hand-off waits on events)."""

import threading

import oslo_messaging
import pytest

from instanceha.engine.progress import ProgressBoard
from instanceha.events import EventKind
from instanceha.sources import nova_payloads as np
from instanceha.sources import notifications
from tests.unit.sources import helpers

UUID = "f7729eb2-4574-4b66-a61e-b7a572285fc9"
SERVER = "084ff958-d051-4957-a9c4-ae69a881b26f"


def make_conf(**overrides):
    return helpers.make_conf("notifications", **overrides)


def facts(**changes):
    return np.parse_service(helpers.sample("service.update", **changes)[1])


# -- pure decisions ---------------------------------------------------------

def decide(clock, **changes):
    return notifications.service_event(facts(**changes), clock(), 30.0)


def test_forced_down_by_another_actor_is_forced_down_event():
    clock = helpers.FakeClock()
    event, reason = decide(clock)
    assert event.kind is EventKind.FORCED_DOWN
    assert (event.host, event.name, event.at) == (UUID, "compute1", clock())
    assert event.source == "notification"
    assert event.detail["forced_down"] is True


def test_our_own_force_down_produces_nothing():
    clock = helpers.FakeClock()
    event, reason = decide(clock, disabled=True,
                           disabled_reason="instanceha: fenced at 12:00")
    assert event is None and reason == "own_write"


def test_our_own_unforce_produces_nothing():
    clock = helpers.FakeClock()
    event, reason = decide(clock, forced_down=False,
                           disabled_reason="instanceha: recovering")
    assert event is None and reason == "own_write"


def test_returning_service_is_heartbeat_ok():
    clock = helpers.FakeClock()
    event, _ = decide(clock, forced_down=False)
    assert event.kind is EventKind.HEARTBEAT_OK
    assert event.detail["heartbeat_age"] == pytest.approx(8.2)


def test_disabled_by_operator_is_reported_with_its_state():
    clock = helpers.FakeClock()
    event, _ = decide(clock, forced_down=False, disabled=True,
                      disabled_reason="operator: bios update")
    assert event.kind is EventKind.HEARTBEAT_OK
    assert event.detail["disabled"] is True
    assert "bios update" in event.reason


def test_stale_heartbeat_produces_nothing():
    # A late notification (broker backlog) must not make a live host
    # suspect: only the reconciler's poll says a host went silent.
    clock = helpers.FakeClock()
    clock.advance(600)
    event, why = decide(clock, forced_down=False)
    assert event is None and why == "stale_heartbeat"


def test_fresh_heartbeat_carries_last_seen_up_for_the_return_check():
    clock = helpers.FakeClock()
    event, _ = decide(clock, forced_down=False)
    assert event.kind is EventKind.HEARTBEAT_OK
    assert event.detail["updated_at"] == event.detail["last_seen_up"]


def test_no_heartbeat_info_and_other_binaries_produce_nothing():
    clock = helpers.FakeClock()
    assert decide(clock, forced_down=False, last_seen_up=None) == (
        None, "no_heartbeat_info")
    assert decide(clock, binary="nova-conductor") == (None, "not_compute")


# -- through the listener (fake transport) ---------------------------------

class Harness:
    """A NotificationSource and a Notifier on one fake transport."""

    def __init__(self, **overrides):
        self.conf = make_conf(transport_url="fake:/", **overrides)
        self.clock = helpers.FakeClock()
        self.sink = helpers.Sink()
        self.board = ProgressBoard()
        self.transport = oslo_messaging.get_notification_transport(
            self.conf, url="fake:/")
        self.source = notifications.NotificationSource(
            self.conf, self.sink, self.clock, self.board,
            transport=self.transport)
        self.handled = threading.Semaphore(0)
        inner = self.source.handle

        def counting(*args, **kwargs):
            try:
                inner(*args, **kwargs)
            finally:
                self.handled.release()
        self.source.handle = counting

    def publish(self, event_type, payload, publisher_id="nova-api:ctl",
                priority="info"):
        # Sent at the driver level: Nova publishes on its own exchange; the fake driver keys by it.
        target = oslo_messaging.Target(
            topic="%s.%s" % (self.conf.notifications.topics[0], priority),
            exchange=self.conf.notifications.exchange)
        message = {"message_id": "m", "publisher_id": publisher_id,
                   "event_type": event_type, "priority": priority.upper(),
                   "payload": payload, "timestamp": "2026-11-22 03:58:41"}
        self.transport._driver.send_notification(target, {}, message, 2.0)

    def wait_handled(self, count=1):
        for _ in range(count):
            assert self.handled.acquire(timeout=5), "listener handled nothing"

    def __enter__(self):
        self.source.start()
        return self

    def __exit__(self, *exc):
        self.source.stop()
        self.transport.cleanup()


def test_listener_turns_forced_down_into_event():
    with Harness() as h:
        publisher, payload = helpers.sample("service.update")
        h.publish("service.update", payload, publisher)
        events = h.sink.wait(1)
        assert [e.kind for e in events] == [EventKind.FORCED_DOWN]
        health = h.source.health()
        assert health["connected"] is True
        assert health["received"] == 1 and health["dropped"] == 0
        assert health["last_message_at"] == h.clock()


def test_listener_ignores_own_write_and_unfiltered_types():
    with Harness() as h:
        _, ours = helpers.sample("service.update",
                                 disabled_reason="instanceha: fencing")
        h.publish("service.update", ours)
        h.publish("instance.create.end", {"x": 1})   # filtered out by type
        _, theirs = helpers.sample("service.update")
        h.publish("service.update", theirs)
        events = h.sink.wait(1)
        h.wait_handled(2)
        assert len(events) == 1
        assert h.source.health()["received"] == 2


def test_announced_own_write_is_ignored_once():
    with Harness() as h:
        h.source.note_own_write(UUID, forced_down=True)
        _, payload = helpers.sample("service.update")
        h.publish("service.update", payload)
        h.wait_handled()
        assert h.sink.events == []
        h.publish("service.update", payload)   # not announced any more
        assert len(h.sink.wait(1)) == 1


def test_announcement_expires():
    with Harness(own_write_window=5.0) as h:
        h.source.note_own_write(UUID, forced_down=True)
        h.clock.advance(6)
        _, payload = helpers.sample("service.update")
        payload["nova_object.data"]["last_seen_up"] = None
        h.publish("service.update", payload)
        assert len(h.sink.wait(1)) == 1


@pytest.mark.parametrize("payload", [
    None, "garbage", [1, 2], {"nova_object.name": "ServiceStatusPayload"},
    {"nova_object.name": "ServiceStatusPayload",
     "nova_object.version": "1.1",
     "nova_object.data": {"uuid": UUID, "forced_down": "maybe"}},
])
def test_garbage_is_counted_and_dropped_and_listener_lives(payload):
    with Harness() as h:
        h.publish("service.update", payload)
        h.publish("instance.evacuate", payload)
        h.wait_handled(2)
        assert h.source.health()["dropped"] == 2
        _, good = helpers.sample("service.update")
        h.publish("service.update", good)
        assert len(h.sink.wait(1)) == 1
        assert h.source.health()["errors"] == 0


def test_sink_failure_is_counted_and_listener_lives():
    with Harness() as h:
        calls = []

        def broken(event):
            calls.append(event)
            if len(calls) == 1:
                raise RuntimeError("engine hiccup")
            h.sink(event)
        h.source._sink = broken
        _, payload = helpers.sample("service.update")
        h.publish("service.update", payload)
        h.publish("service.update", payload)
        assert len(h.sink.wait(1)) == 1
        assert h.source.health()["errors"] == 1
        assert "engine hiccup" in h.source.health()["last_error"]


def test_instance_events_are_recorded_on_the_progress_board():
    with Harness() as h:
        recorded = helpers.recorded()
        for event_type in ("instance.evacuate", "instance.rebuild_scheduled",
                           "instance.rebuild.end"):
            entry = recorded[event_type]
            h.publish(event_type, entry["payload"], entry["publisher_id"])
        h.wait_handled(3)
        seen = h.board.facts(SERVER)
        assert seen["host"] == "compute1"
        assert seen["at"] == h.clock()
        assert h.board.generation() == 3
        assert h.sink.events == []


def test_rebuild_error_arrives_on_error_priority():
    with Harness() as h:
        entry = helpers.recorded()["instance.rebuild.end"]
        h.publish("instance.rebuild.error", entry["payload"],
                  entry["publisher_id"], priority="error")
        h.wait_handled()
        assert h.board.facts(SERVER)["event"] == "instance.rebuild.error"


def test_unrelated_instance_update_is_not_recorded():
    with Harness() as h:
        entry = helpers.recorded()["instance.update"]   # a boot: scheduling
        h.publish("instance.update", entry["payload"], entry["publisher_id"])
        h.wait_handled()
        assert h.board.facts(SERVER) == {}
        assert h.board.generation() == 0


def test_instance_update_of_followed_server_is_recorded():
    with Harness() as h:
        h.board.record(SERVER, state="active")   # the evacuation follows it
        entry = helpers.recorded()["instance.update"]
        entry["payload"]["nova_object.data"]["host"] = "compute2"
        h.publish("instance.update", entry["payload"], entry["publisher_id"])
        h.wait_handled()
        assert h.board.facts(SERVER)["host"] == "compute2"
        assert h.board.facts(SERVER)["event"] == "instance.update"


def test_health_before_start_and_after_stop():
    h = Harness()
    assert h.source.health()["connected"] is False
    with h:
        assert h.source.health()["running"] is True
    assert h.source.health()["connected"] is False
    assert h.source.health()["running"] is False


def test_quiet_stream_is_reported():
    with Harness(silence_warning=60.0) as h:
        assert h.source.health()["quiet"] is False
        h.clock.advance(61)
        assert h.source.health()["quiet"] is True


def test_bad_event_type_regex_fails_at_start():
    h = Harness(event_types=["(unclosed"])
    with pytest.raises(Exception):
        h.source.start()
    h.transport.cleanup()


# -- records: parsed in one process, applied in another ----------------------

def record_of(event_type="service.update", emitted="2026-11-22 03:58:41.5",
              publisher="nova-api:ctl", **changes):
    _, payload = helpers.sample("service.update", **changes)
    return notifications.parse_message("info", publisher, event_type,
                                       payload, {"timestamp": emitted})


def test_parse_message_makes_picklable_records():
    import pickle
    record = record_of()
    kind, event_type, publisher, emitted, facts = record
    assert (kind, event_type, publisher, emitted) == (
        notifications.SERVICE, "service.update", "nova-api:ctl",
        "2026-11-22 03:58:41.5")
    assert facts.uuid == UUID and facts.forced_down is True
    assert pickle.loads(pickle.dumps(record)) == record
    entry = helpers.recorded()["instance.rebuild.end"]
    kind, _, _, _, facts = notifications.parse_message(
        "info", entry["publisher_id"], "instance.rebuild.end",
        entry["payload"], None)
    assert kind == notifications.INSTANCE and facts.server_id == SERVER
    assert pickle.loads(pickle.dumps(facts)) == facts


@pytest.mark.parametrize("event_type,payload,reason", [
    ("service.update", "garbage", "malformed_payload"),
    ("instance.evacuate", [1, 2], "malformed_payload"),
    ("instance.create.end", {}, "unhandled_event_type"),
    (["not", "a", "string"], {}, "bad_event_type"),
    (None, {}, "bad_event_type"),
])
def test_parse_message_turns_bad_input_into_a_drop(event_type, payload,
                                                    reason):
    kind, _, _, emitted, body = notifications.parse_message(
        "info", 42, event_type, payload, "metadata is not a dict")
    assert kind == notifications.DROP and body[0] == reason
    assert emitted is None


def test_latest_seen_compares_times_of_one_publisher_only():
    seen = notifications.LatestSeen(limit=2)
    now = 1000.0
    assert not seen.is_older(("a", "p1"), "2026-11-22 03:58:41.000002", now)
    assert seen.is_older(("a", "p1"), "2026-11-22 03:58:41.000001", now)
    assert seen.is_older(("a", "p1"), "2026-11-22 03:58:41", now)  # .000000
    assert not seen.is_older(("a", "p1"), "2026-11-22 03:58:41.000002", now)
    assert not seen.is_older(("a", "p2"), "2026-11-22 03:58:40", now)
    assert not seen.is_older(("a", "p1"), None, now)
    assert not seen.is_older(("b", "p1"), "2026-11-22 03:58:00", now)
    # limit 2: ("a", "p1") is the least recently updated and is forgotten
    assert not seen.is_older(("a", "p1"), "2026-11-22 03:00:00", now)


def test_latest_seen_forgets_after_its_window():
    """A publisher whose clock was stepped back is ignored for a minute at
    most, not until its clock catches up."""
    seen = notifications.LatestSeen(window=60.0)
    assert not seen.is_older("k", "2026-11-22 05:00:00", 1000.0)  # 1 h fast
    assert seen.is_older("k", "2026-11-22 04:00:01", 1059.0)
    assert not seen.is_older("k", "2026-11-22 04:00:02", 1061.0)
    assert seen.is_older("k", "2026-11-22 04:00:01", 1062.0)


def test_overtaken_notification_is_counted_not_applied():
    sink, clock = helpers.Sink(), helpers.FakeClock()
    source = notifications.NotificationSource(make_conf(), sink, clock)
    source.apply(record_of(emitted="2026-11-22 03:58:42", forced_down=False))
    source.apply(record_of(emitted="2026-11-22 03:58:41", forced_down=True))
    assert [e.kind for e in sink.events] == [EventKind.HEARTBEAT_OK]
    health = source.health()
    assert health["received"] == 2 and health["reordered"] == 1
    # Another publisher's clock is not compared: applied.
    source.apply(record_of(emitted="2026-11-22 03:58:40", publisher="other"))
    assert [e.kind for e in sink.events][-1] is EventKind.FORCED_DOWN


def test_error_and_drop_records_are_counted():
    sink, clock = helpers.Sink(), helpers.FakeClock()
    source = notifications.NotificationSource(make_conf(), sink, clock)
    source.apply((notifications.ERROR, "service.update", None, None,
                  "TypeError: parser bug"))
    source.apply(notifications.parse_message("info", None, "service.update",
                                             None, {}))
    health = source.health()
    assert (health["errors"], health["dropped"]) == (1, 1)
    assert health["last_error"] == "TypeError: parser bug"
    assert sink.events == []


@pytest.mark.parametrize("event_type", [
    "instance.live_migration_post.end",     # the move ended
    "instance.live_migration_pre.end",      # its copy starts
])
def test_a_migration_step_wakes_the_passes_and_keeps_nothing(event_type):
    # A drain's live migration ended (or started copying): the draining
    # host's next pass reads its servers now; the board keeps nothing
    # about the server.
    with Harness() as h:
        woken = []
        h.board.subscribe(woken.append)
        entry = helpers.recorded()["instance.rebuild.end"]  # same payload
        h.publish(event_type, entry["payload"], entry["publisher_id"])
        h.wait_handled()
        assert woken == [SERVER]
        assert h.board.facts(SERVER) == {}
        assert h.sink.events == []


def test_instance_repair_hears_a_crash_whose_last_notification_came_first():
    """A crash's notifications (instance.update, power_off.start,
    power_off.end) handled out of order: the last one, which tells
    nothing, handled first must not hide the earlier ones from instance
    repair; they reach it marked stale (they may open a case, never close
    one)."""
    from instanceha.sim import SimCloud
    cloud = SimCloud(hosts=1, servers_per_host=1)
    sent = []
    cloud.notifiers.append(lambda *n: sent.append(n))
    sid = next(iter(cloud.servers))
    cloud.crash_server(sid)
    assert sent[-1][1] == "instance.power_off.end"
    assert "instance.power_off.start" in [n[1] for n in sent]
    conf = make_conf(transport_url="fake:/")
    heard = []
    source = notifications.NotificationSource(
        conf, helpers.Sink(), helpers.FakeClock(), ProgressBoard(),
        transport=oslo_messaging.get_notification_transport(
            conf, url="fake:/"),
        repair_sink=lambda facts, at, stale=False: heard.append(
            (facts.event, stale)))
    stamps = ["2026-11-22 03:58:41.%06d" % i for i in range(len(sent))]
    for (priority, event_type, payload), stamp in reversed(
            list(zip(sent, stamps))):
        source.handle(priority, "nova-compute:compute-0", event_type,
                      payload, {"timestamp": stamp})
    assert heard[0] == ("instance.power_off.end", False)
    assert ("instance.power_off.start", True) in heard
    assert all(stale for _, stale in heard[1:])
