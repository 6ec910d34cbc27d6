"""The engine's heartbeat source, driven directly: handle_datagram and
check with a fake clock (no socket, no sleep). Bad datagrams, unknown
hosts, silence, paths, facts, boots, the cliff, key rotation."""

import random

from structlog.testing import capture_logs

from instanceha import conf as ih_conf
from instanceha.events import EventKind
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.heartbeat import helpers
from tests.unit.heartbeat.test_protocol import beat_body, sign
from tests.unit.sources.helpers import FakeClock, Sink

T0 = 5000.0
SENDER = ("192.0.2.11", 40001)
STORAGE = ("198.51.100.11", 40002)
HOSTS = [("id-%d" % i, "compute-%d" % i) for i in range(1, 11)]


class Wire:
    """The engine's challenges as sent: (socket, data, address)."""

    def __init__(self):
        self.sent = []

    def __call__(self, via, data, address):
        self.sent.append((via, data, address))


def make(keyring=helpers.KEYRING, hosts=HOSTS, wire=None, **agent):
    agent.setdefault("listen_addresses", ["127.0.0.1:0"])
    conf = ih_conf.make({"agent": agent})
    sink = Sink()
    clock = FakeClock(T0)
    known = list(hosts)
    src = heartbeat.HeartbeatSource(conf, sink, clock, lambda: list(known),
                                    keyring=keyring,
                                    sendto=wire if wire is not None
                                    else Wire())
    src.refresh(T0)
    src.challenge(T0)       # a first nonce, for the beats to echo
    return src, sink, clock, known


class Host:
    """One agent: its beats, signed, with an increasing sequence per
    path."""

    def __init__(self, name="compute-1", key=helpers.KEY, boot_id="b1"):
        self.name = name
        self.key = key
        self.boot_id = boot_id
        self.seq = {}

    def beat(self, at, path="mgmt", compute=True, libvirt=True, guests=2,
             echoes=()):
        self.seq[path] = self.seq.get(path, 0) + 1
        return protocol.encode_beat(helpers.beat(
            host=self.name, boot_id=self.boot_id, seq=self.seq[path],
            sent_at=at, path=path,
            facts=protocol.Facts(compute=compute, libvirt=libvirt,
                                 guests=guests), echoes=echoes), self.key)


def feed(src, host, at, sender=SENDER, **kw):
    """A beat of ``host`` at ``at``, echoing the engine's newest
    challenge unless ``echoes`` says otherwise (the engine's challenge
    rounds going on meanwhile, as its periodic loop makes them)."""
    if "echoes" not in kw:
        rounds(src, at)
        kw["echoes"] = (src.challenges.newest,)
    return src.handle_datagram(host.beat(at, **kw), sender, now=at)


def rounds(src, at):
    """The challenge rounds the engine's loop makes up to ``at``."""
    last = getattr(src, "_test_round_at", None)
    if last is None or at - last >= src._group.challenge_interval:
        src.challenge(at)
        src._test_round_at = at


def echo(src):
    """What a beat echoing the engine's newest challenge carries."""
    return (src.challenges.newest,)


def kinds(events):
    return [e.kind for e in events]


# -- the first beat, and no event per beat ------------------------------------

def test_first_beat_reports_the_host_with_nova_id_and_facts():
    src, sink, _, _ = make()
    event = feed(src, Host(), T0)
    assert event.kind == EventKind.AGENT_BEATING
    assert (event.host, event.name, event.source, event.at) == (
        "id-1", "compute-1", "agent", T0)
    assert event.reason == "first beat"
    p = event.payload
    assert (p.paths, p.boot_id, p.last_beat_at, p.compute, p.libvirt,
            p.guests) == (("mgmt",), "b1", T0, True, True, 2)
    assert sink.events == [event]


def test_steady_beats_make_no_event():
    src, sink, _, _ = make()
    host = Host()
    for i in range(20):
        feed(src, host, T0 + i)
        src.check(T0 + i + 0.5)
    assert len(sink.events) == 1
    assert src.health()["accepted"] == 20
    assert src.heard("compute-1", now=T0 + 19.5).last_beat_at == T0 + 19


def test_guests_count_changes_make_no_event_but_show():
    src, sink, _, _ = make()
    host = Host()
    feed(src, host, T0, guests=2)
    assert feed(src, host, T0 + 1, guests=5) is None
    assert src.heard("compute-1", now=T0 + 1).guests == 5
    assert src.view(now=T0 + 1)["compute-1"]["guests"] == 5


# -- bad datagrams ------------------------------------------------------------

def bad_datagrams():
    good = protocol.encode_beat(helpers.beat(host="compute-1"), helpers.KEY)
    forged_same_kid = sign(beat_body(), secret=b"x" * 40)
    return {
        "unknown_key": protocol.encode_beat(helpers.beat(host="compute-1"),
                                            helpers.OTHER_KEY),
        "bad_signature": forged_same_kid,
        "truncated": good[:-5],
        "oversized": good + b"\0" * (protocol.MAX_SIZE + 1 - len(good)),
        "unknown_version": sign(beat_body(), version=3),
        "bad_magic": b"XXXX" + good[4:],
        "malformed": sign(beat_body(seq=2 ** 63)),
    }


def test_bad_datagrams_are_dropped_counted_and_create_no_host():
    src, sink, _, _ = make()
    for reason, data in bad_datagrams().items():
        assert src.handle_datagram(data, SENDER, now=T0) is None, reason
    health = src.health()
    assert health["dropped"] == dict.fromkeys(bad_datagrams(), 1)
    assert health["accepted"] == 0 and health["received"] == 7
    assert sink.events == [] and src.view(now=T0) == {}


def test_replayed_and_stale_beats_are_dropped():
    src, sink, _, _ = make(replay_window=30)
    host = Host()
    first = host.beat(T0, echoes=echo(src))
    assert src.handle_datagram(first, SENDER, now=T0) is not None
    assert src.handle_datagram(first, SENDER, now=T0 + 1) is None
    # Sent at T0 + 1 but held back 40 s: its age shows against the offset.
    late = host.beat(T0 + 1, echoes=echo(src))
    assert src.handle_datagram(late, SENDER, now=T0 + 41) is None
    assert src.health()["dropped"] == {"replayed": 1, "stale": 1}
    assert len(sink.events) == 1


def test_a_request_sent_to_the_engine_is_unexpected():
    src, sink, _, _ = make()
    data = protocol.encode_request(helpers.request(), helpers.KEY)
    assert src.handle_datagram(data, SENDER, now=T0) is None
    assert src.health()["dropped"] == {"unexpected_kind": 1}
    assert sink.events == []


def test_no_bytes_raise():
    src, sink, _, _ = make()
    rnd = random.Random(23)
    good = Host().beat(T0)
    for i in range(500):
        data = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        if i % 5 == 0:
            data = data[:rnd.randrange(len(data))]
        src.handle_datagram(bytes(data), SENDER, now=T0)
    assert sink.events == []
    assert sum(src.health()["dropped"].values()) == 500


def test_unknown_host_is_counted_and_reported_once():
    src, sink, _, _ = make()
    stranger = Host(name="not-in-nova")
    with capture_logs() as logs:
        for i in range(5):
            assert feed(src, stranger, T0 + i) is None
    reported = [e for e in logs if e["event"] == "agent_unknown_host"]
    assert len(reported) == 1 and reported[0]["host"] == "not-in-nova"
    health = src.health()
    assert health["dropped"] == {"unknown_host": 5}
    assert health["unknown_hosts"] == 1
    assert health["unknown_host_names"] == ["not-in-nova"]
    assert sink.events == [] and src.view(now=T0 + 5) == {}


def test_beats_before_nova_is_read_are_not_reported_as_unknown():
    src, sink, _, known = make(hosts=[])
    with capture_logs() as logs:
        assert feed(src, Host(), T0) is None
    assert not [e for e in logs if e["event"] == "agent_unknown_host"]
    known.extend(HOSTS)
    # Nova's hosts are read again on the next unknown name (at most once
    # a second).
    event = feed(src, Host(), T0 + 1.5)
    assert event.kind == EventKind.AGENT_BEATING and event.host == "id-1"


def test_host_nova_forgets_is_forgotten_and_a_new_id_reported_afresh():
    src, sink, _, known = make()
    host = Host()
    feed(src, host, T0)
    known[0] = ("id-1-new", "compute-1")
    src.check(T0 + 0.5)
    event = feed(src, host, T0 + 1)
    assert event.host == "id-1-new" and event.reason == "first beat"
    del known[0]
    src.check(T0 + 1.5)
    assert src.view(now=T0 + 1.5) == {}


# -- silence and paths --------------------------------------------------------

def test_silence_after_timeout_is_reported_once():
    src, sink, _, _ = make(silence_timeout=3.0)
    feed(src, Host(), T0)
    assert src.check(T0 + 2.9) == []
    events = src.check(T0 + 3.0)
    assert kinds(events) == [EventKind.AGENT_SILENT]
    assert events[0].payload.last_beat_at == T0
    assert events[0].payload.paths == ("mgmt",)
    assert events[0].at == T0 + 3.0 and events[0].host == "id-1"
    assert src.check(T0 + 4) == [] and src.check(T0 + 60) == []
    assert src.heard("compute-1", now=T0 + 4) is None
    assert src.silent_since("compute-1", now=T0 + 4) == T0
    assert src.view(now=T0 + 4)["compute-1"]["state"] == "silent"
    assert kinds(sink.events) == [EventKind.AGENT_BEATING,
                                  EventKind.AGENT_SILENT]


def test_beats_back_after_silence_report_beating():
    src, sink, _, _ = make()
    host = Host()
    feed(src, host, T0)
    src.check(T0 + 3)
    event = feed(src, host, T0 + 10)
    assert event.kind == EventKind.AGENT_BEATING
    assert event.reason.startswith("beats again after 10.0s")
    assert src.silent_since("compute-1", now=T0 + 10) is None


def test_one_path_down_reports_beating_on_the_other():
    src, sink, clock, _ = make()
    host = Host()
    feed(src, host, T0, path="mgmt")
    event = feed(src, host, T0 + 0.1, sender=STORAGE, path="storage")
    assert event.payload.paths == ("mgmt", "storage")
    assert event.reason == "heard on path storage"
    for i in range(1, 6):
        feed(src, host, T0 + i, path="mgmt")
    events = src.check(T0 + 5.5)
    assert kinds(events) == [EventKind.AGENT_BEATING]
    assert events[0].payload.paths == ("mgmt",)
    assert "storage" in events[0].reason
    assert src.check(T0 + 5.6) == []
    # Each path counted on its own in the source's health.
    clock.now = T0 + 5.6
    assert src.health()["paths"] == {"mgmt": {"heard": 1, "silent": 0},
                                     "storage": {"heard": 0, "silent": 1}}
    # The path comes back.
    event = feed(src, host, T0 + 6, sender=STORAGE, path="storage")
    assert event.payload.paths == ("mgmt", "storage")
    view = src.view(now=T0 + 6)["compute-1"]
    assert view["paths"]["storage"]["address"] == "198.51.100.11"
    assert view["state"] == "beating"


def test_compute_stopped_reports_beating_with_compute_false():
    src, sink, _, _ = make()
    host = Host()
    feed(src, host, T0)
    event = feed(src, host, T0 + 1, compute=False)
    assert event.kind == EventKind.AGENT_BEATING
    assert event.payload.compute is False
    assert event.reason == "nova-compute running -> stopped"
    assert feed(src, host, T0 + 2, compute=False) is None
    event = feed(src, host, T0 + 3, compute=False, libvirt=None)
    assert event.reason == "libvirt running -> unknown"


def test_new_boot_reports_beating():
    src, sink, _, _ = make()
    feed(src, Host(boot_id="b1"), T0)
    event = feed(src, Host(boot_id="b2"), T0 + 1)
    assert event.reason == "new boot b2" and event.payload.boot_id == "b2"


# -- cliff --------------------------------------------------------------------

def cliff_fleet(silent, until=6, **agent):
    """10 hosts beat at T0; the first ``silent`` stop there, the others
    beat every second until ``until``."""
    src, _, _, _ = make(**agent)
    hosts = [Host(name) for _, name in HOSTS]
    for h in hosts:
        feed(src, h, T0)
    for i in range(1, until):
        for h in hosts[silent:]:
            feed(src, h, T0 + i)
    return src


def test_cliff_when_a_share_falls_silent_together():
    src = cliff_fleet(3, until=15)   # 3 of 10 silent from T0 + 3
    assert src.cliff(now=T0 + 2.9) is None
    why = src.cliff(now=T0 + 5)
    assert why.startswith("agents of 3 of 10 hosts fell silent within 10s")
    # Long after, the same silences no longer make a cliff.
    assert src.cliff(now=T0 + 3 + 10.5) is None


def test_no_cliff_below_share_or_min_hosts():
    assert cliff_fleet(2).cliff(now=T0 + 5) is None           # 20 % < 30 %
    assert cliff_fleet(3, cliff_min_hosts=4).cliff(now=T0 + 5) is None
    assert cliff_fleet(0).cliff(now=T0 + 5) is None


# -- keys ---------------------------------------------------------------------

def test_previous_key_accepted_and_reported():
    ring = keys.Keyring(helpers.OTHER_KEY, helpers.KEY)   # KEY is previous
    src, sink, _, _ = make(keyring=ring)
    assert feed(src, Host("compute-1", key=helpers.KEY), T0) is not None
    assert feed(src, Host("compute-2", key=helpers.OTHER_KEY), T0) \
        is not None
    view = src.view(now=T0)
    assert view["compute-1"]["key_id"] == helpers.KEY.kid
    assert view["compute-1"]["previous_key"] is True
    assert view["compute-2"]["previous_key"] is False
    assert src.health()["hosts_on_previous_key"] == 1
    assert src.health()["key_ids"] == [helpers.OTHER_KEY.kid,
                                       helpers.KEY.kid]


# -- batches (what the receiver thread hands over per wake-up) ----------------

def test_a_batch_is_recorded_in_order_with_its_drops():
    src, sink, _, _ = make()
    e = echo(src)
    one, two = Host("compute-1"), Host("compute-2")
    first = one.beat(T0, echoes=e)
    batch = [(first, SENDER), (b"junk", SENDER),
             (two.beat(T0, echoes=e), STORAGE),
             (first, SENDER), (one.beat(T0, echoes=e), SENDER)]
    events = src.handle_batch(batch, now=T0)
    assert [(e.name, e.reason) for e in events] == [
        ("compute-1", "first beat"), ("compute-2", "first beat")]
    assert sink.events == events
    health = src.health()
    assert (health["received"], health["accepted"]) == (5, 3)
    assert health["dropped"] == {"bad_magic": 1, "replayed": 1}
    assert src.view(now=T0)["compute-2"]["paths"]["mgmt"]["address"] == \
        STORAGE[0]


def test_a_host_nova_just_learned_is_recorded_in_the_same_batch():
    src, sink, _, known = make(hosts=HOSTS[:1])
    e = echo(src)
    known.append(("id-2", "compute-2"))
    events = src.handle_batch(
        [(Host("compute-2").beat(T0 + 2, echoes=e), SENDER),
         (Host("compute-1").beat(T0 + 2, echoes=e), SENDER)], now=T0 + 2)
    assert [(e.host, e.name) for e in events] == [("id-1", "compute-1"),
                                                  ("id-2", "compute-2")]
    assert src.health()["dropped"] == {}


def test_a_failing_sink_loses_no_other_event_of_the_batch():
    src, _, _, _ = make()
    e = echo(src)
    got = []

    def sink(event):
        if event.name == "compute-1":
            raise RuntimeError("engine hiccup")
        got.append(event.name)
    src._sink = sink
    with capture_logs() as logs:
        events = src.handle_batch(
            [(Host("compute-1").beat(T0, echoes=e), SENDER),
             (Host("compute-2").beat(T0, echoes=e), SENDER)], now=T0)
    assert len(events) == 2 and got == ["compute-2"]
    assert src.health()["errors"] == 1
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "agent_event_failed"]


def test_a_failure_recording_one_beat_loses_no_other(monkeypatch):
    src, sink, _, _ = make()
    e = echo(src)
    record = src._table.beat

    def beat(message, *args):
        if message.host == "compute-1":
            raise KeyError("a bug")
        return record(message, *args)
    monkeypatch.setattr(src._table, "beat", beat)
    with capture_logs() as logs:
        events = src.handle_batch(
            [(Host("compute-1").beat(T0, echoes=e), SENDER),
             (Host("compute-2").beat(T0, echoes=e), SENDER)], now=T0)
    assert [e.name for e in events] == ["compute-2"]
    health = src.health()
    assert (health["errors"], health["received"], health["accepted"]) == (
        1, 2, 1)
    failed = [e for e in logs if e["event"] == "agent_datagram_failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "'a bug'"
