"""KdumpSource: message parsing, sender-to-host matching and the UDP loop
(loopback, port 0). No sleeps: packets are awaited through the sink."""

import socket
import struct

import pytest

from instanceha.events import EventKind
from instanceha.sources import kdump
from tests.unit.sources import helpers

GOOD_LE = struct.pack("<II", 0x1B302A40, 1)
GOOD_BE = struct.pack(">II", 0x1B302A40, 1)
HOSTS = [("uuid-1", "compute1"), ("uuid-2", "compute2")]


def make_conf(**overrides):
    overrides.setdefault("listen_address", "127.0.0.1")
    overrides.setdefault("port", 0)
    return helpers.make_conf("kdump", **overrides)


class Resolver:
    def __init__(self, table):
        self.table = table
        self.calls = 0

    def __call__(self, name):
        self.calls += 1
        if name not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown name")
        return self.table[name]


def make_source(hosts=HOSTS, resolver=None, **overrides):
    clock = helpers.FakeClock()
    sink = helpers.Sink()
    resolver = resolver or Resolver({"compute1": {"10.0.0.1"},
                                     "compute2": {"10.0.0.2", "fd00::2"}})
    source = kdump.KdumpSource(make_conf(**overrides), sink, clock,
                               lambda: list(hosts), resolver=resolver)
    source.refresh()
    return source, sink, clock


# -- message format ----------------------------------------------------------

@pytest.mark.parametrize("data,order", [
    (GOOD_LE, "little"), (GOOD_BE, "big"),
    (struct.pack("<II", 0x1B302A40, 2), None),       # version 2
    (struct.pack("<II", 0xDEADBEEF, 1), None),       # wrong magic
    (struct.pack("<IIB", 0x1B302A40, 1, 0), None),   # 9 bytes
    (GOOD_LE[:7], None), (b"", None),
    (struct.pack("<I", 0x1B302A40) + struct.pack(">I", 1), None),  # mixed
])
def test_parse_message(data, order):
    assert kdump.parse_message(data) == order


def test_normalise_address():
    assert kdump.normalise_address("::ffff:10.0.0.1") == "10.0.0.1"
    assert kdump.normalise_address("fe80::1%eth0") == "fe80::1"
    assert kdump.normalise_address("FD00::0002") == "fd00::2"


# -- address map ---------------------------------------------------------------

def test_map_from_config_wins_over_resolution():
    amap, problems = kdump.build_address_map(
        HOSTS, {"compute1": "192.0.2.1"}, Resolver({"compute1": {"10.0.0.1"},
                                                    "compute2": {"10.0.0.2"}}))
    assert amap == {"192.0.2.1": ("uuid-1", "compute1"),
                    "10.0.0.2": ("uuid-2", "compute2")}
    assert problems == []


def test_shared_address_maps_to_nobody():
    amap, problems = kdump.build_address_map(
        HOSTS, {}, Resolver({"compute1": {"10.0.0.9"},
                             "compute2": {"10.0.0.9", "10.0.0.2"}}))
    assert amap == {"10.0.0.2": ("uuid-2", "compute2")}
    assert "claimed by several hosts" in problems[0][1]


def test_unresolvable_and_unknown_names_are_skipped():
    amap, problems = kdump.build_address_map(
        HOSTS, {"compute9": "10.0.0.9", "compute1": "not-an-ip"},
        Resolver({}))
    assert amap == {}
    reasons = " ".join(p[1] for p in problems)
    assert "not a known compute" in reasons
    assert "bad address" in reasons
    assert "not resolved" in reasons


def test_without_resolution_only_config_counts():
    source, sink, _ = make_source(resolve_names=False,
                                  host_map={"compute2": "10.0.0.2"})
    assert source.handle_packet(GOOD_LE, ("10.0.0.1", 999)) is None
    assert source.handle_packet(GOOD_LE, ("10.0.0.2", 999)).host == "uuid-2"


def test_evacuate_action_never_attributes_a_packet_by_name():
    """action = evacuate skips the power-off on the strength of the
    packet's source address alone: only an address the operator wrote in
    host_map may name the host. A DNS record (wrong, stale, shared) that
    resolves compute1 to the sender must not evacuate compute1."""
    resolver = Resolver({"compute1": {"10.0.0.1"}, "compute2": {"10.0.0.2"}})
    source, sink, _ = make_source(resolver=resolver, action="evacuate",
                                  resolve_names=True,
                                  host_map={"compute2": "10.0.0.12"})
    assert source.handle_packet(GOOD_LE, ("10.0.0.1", 999)) is None
    assert source.handle_packet(GOOD_LE, ("10.0.0.2", 999)) is None
    assert sink.events == []
    assert source.health()["dropped_unknown"] == 2
    assert resolver.calls == 0
    event = source.handle_packet(GOOD_LE, ("10.0.0.12", 999))
    assert (event.host, event.detail["address"]) == ("uuid-2", "10.0.0.12")


@pytest.mark.parametrize("action", ["fence_after_dump", "wait"])
def test_delaying_action_still_attributes_by_name(action):
    """The default action only delays the power-off: there a resolved
    name is good enough."""
    source, sink, _ = make_source(action=action, resolve_names=True)
    assert source.handle_packet(GOOD_LE, ("10.0.0.1", 999)).host == "uuid-1"


# -- packets -------------------------------------------------------------------

def test_kdump_from_known_host_is_event():
    source, sink, clock = make_source()
    event = source.handle_packet(GOOD_LE, ("10.0.0.1", 40000))
    assert event.kind is EventKind.KDUMP
    assert (event.host, event.name, event.at, event.source) == (
        "uuid-1", "compute1", clock(), "kdump")
    assert event.detail["address"] == "10.0.0.1"
    assert event.detail["count"] == 1
    assert event.detail["byte_order"] == "little"
    assert sink.events == [event]
    assert source.health()["accepted"] == 1


def test_ipv6_and_big_endian_sender():
    source, sink, _ = make_source()
    event = source.handle_packet(GOOD_BE, ("fd00::2", 40000, 0, 0))
    assert event.host == "uuid-2"
    assert event.detail["byte_order"] == "big"


def test_repeated_messages_count_within_one_dump():
    source, sink, clock = make_source(timeout=60)
    first = source.handle_packet(GOOD_LE, ("10.0.0.1", 1))
    clock.advance(10)
    second = source.handle_packet(GOOD_LE, ("10.0.0.1", 1))
    assert second.detail["count"] == 2
    assert second.detail["first_at"] == first.at
    clock.advance(61)                      # silence longer than timeout
    third = source.handle_packet(GOOD_LE, ("10.0.0.1", 1))
    assert third.detail["count"] == 1 and third.detail["first_at"] == clock()


def test_unknown_address_never_affects_a_host():
    source, sink, _ = make_source()
    assert source.handle_packet(GOOD_LE, ("10.0.0.77", 1)) is None
    assert sink.events == []
    health = source.health()
    assert (health["received"], health["dropped_unknown"]) == (1, 1)


def test_bad_packets_are_counted_and_dropped():
    source, sink, _ = make_source()
    for data in (b"junk", struct.pack("<II", 0x1B302A40, 2), GOOD_LE * 2):
        assert source.handle_packet(data, ("10.0.0.1", 1)) is None
    assert sink.events == []
    assert source.health()["dropped_bad"] == 3


def test_unknown_sender_triggers_a_bounded_refresh():
    hosts = [("uuid-1", "compute1")]
    resolver = Resolver({"compute1": {"10.0.0.1"}, "compute3": {"10.0.0.3"},
                         "compute4": {"10.0.0.4"}})
    source, sink, clock = make_source(hosts=hosts, resolver=resolver,
                                      min_resolve_interval=5)
    calls = resolver.calls
    source.handle_packet(GOOD_LE, ("10.0.0.99", 1))
    assert resolver.calls == calls         # no refresh storm from junk
    resolver.table["compute1"] = {"10.0.0.3"}     # renumbered in DNS
    assert source.handle_packet(GOOD_LE, ("10.0.0.3", 1)) is None  # too soon
    clock.advance(5)
    assert source.handle_packet(GOOD_LE, ("10.0.0.3", 1)).host == "uuid-1"


def test_a_host_the_engine_learnt_is_mapped_at_its_first_packet():
    """At start the map is built before the first poll of Nova: a packet
    from a host learnt since is not dropped for min_resolve_interval."""
    hosts = []
    resolver = Resolver({"compute3": {"10.0.0.3"}})
    source, sink, clock = make_source(hosts=hosts, resolver=resolver,
                                      min_resolve_interval=5)
    hosts.append(("uuid-3", "compute3"))
    assert source.handle_packet(GOOD_LE, ("10.0.0.3", 1)).host == "uuid-3"
    calls = resolver.calls
    source.handle_packet(GOOD_LE, ("10.0.0.99", 1))
    assert resolver.calls == calls


def test_periodic_refresh_follows_renumbering():
    resolver = Resolver({"compute1": {"10.0.0.1"}})
    source, sink, clock = make_source(hosts=[("uuid-1", "compute1")],
                                      resolver=resolver, resolve_interval=300,
                                      min_resolve_interval=3600)
    resolver.table["compute1"] = {"10.0.1.1"}
    clock.advance(301)
    assert source.handle_packet(GOOD_LE, ("10.0.1.1", 1)).host == "uuid-1"
    assert source.handle_packet(GOOD_LE, ("10.0.0.1", 1)) is None


def test_known_hosts_failure_keeps_old_map():
    hosts = HOSTS

    def broken():
        raise RuntimeError("engine not ready")
    source, sink, clock = make_source(hosts=hosts)
    source._known_hosts = broken
    source.refresh()
    assert source.handle_packet(GOOD_LE, ("10.0.0.1", 1)).host == "uuid-1"


# -- the socket ------------------------------------------------------------------

def send(port, data, src="127.0.0.1", family=socket.AF_INET, dst="127.0.0.1"):
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        s.sendto(data, (dst, port))


def test_udp_loop_end_to_end_on_loopback():
    resolver = Resolver({"compute1": {"127.0.0.11"}})
    source, sink, _ = make_source(hosts=[("uuid-1", "compute1")],
                                  resolver=resolver)
    source.start()
    try:
        assert source.port and source.port != 7410
        send(source.port, b"garbage", src="127.0.0.11")
        send(source.port, GOOD_LE, src="127.0.0.12")       # unknown
        send(source.port, GOOD_LE, src="127.0.0.11")
        events = sink.wait(1)
        assert [e.host for e in events] == ["uuid-1"]
        health = source.health()
        assert health["dropped_bad"] == 1
        assert health["dropped_unknown"] == 1
        assert health["listening"] is True
    finally:
        source.stop()
    assert source.health()["listening"] is False


def test_sink_failure_does_not_kill_the_loop():
    resolver = Resolver({"compute1": {"127.0.0.11"}})
    source, sink, _ = make_source(hosts=[("uuid-1", "compute1")],
                                  resolver=resolver)
    calls = []

    def flaky(event):
        calls.append(event)
        if len(calls) == 1:
            raise RuntimeError("engine hiccup")
        sink(event)
    source._sink = flaky
    source.start()
    try:
        send(source.port, GOOD_LE, src="127.0.0.11")
        send(source.port, GOOD_LE, src="127.0.0.11")
        assert len(sink.wait(1)) == 1
        assert source.health()["errors"] == 1
    finally:
        source.stop()


def test_dual_stack_listener_maps_ipv4_senders():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    resolver = Resolver({"compute1": {"127.0.0.11"}})
    source, sink, _ = make_source(hosts=[("uuid-1", "compute1")],
                                  resolver=resolver, listen_address="::")
    try:
        source.start()
    except OSError as exc:
        pytest.skip("cannot bind ::: %s" % exc)
    try:
        send(source.port, GOOD_LE, src="127.0.0.11")
        assert [e.detail["address"] for e in sink.wait(1)] == ["127.0.0.11"]
    finally:
        source.stop()


# -- start-time checks of [kdump] ---------------------------------------------

def _load(tmp_path, text):
    from instanceha import conf as conf_pkg
    path = tmp_path / "instanceha.conf"
    path.write_text(text)
    return conf_pkg.load(["--config-file", str(path)])


def test_kdump_needs_the_kdump_networks_address(tmp_path):
    from oslo_config import cfg
    with pytest.raises(cfg.Error, match=r"\[kdump\] listen_address: must be "
                                        r"set"):
        _load(tmp_path, "[kdump]\nenabled = true\n")
    conf = _load(tmp_path, "[kdump]\nenabled = true\n"
                           "listen_address = 192.0.2.1\n")
    assert conf.kdump.action == "fence_after_dump"


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "::0",
                                     "::ffff:0.0.0.0", "0:0:0:0:0:0:0:0"])
def test_evacuate_without_power_off_refused_on_a_wildcard(tmp_path, address):
    from oslo_config import cfg
    with pytest.raises(cfg.Error, match="wildcard"):
        _load(tmp_path, "[kdump]\nenabled = true\naction = evacuate\n"
                        "listen_address = %s\n" % address)
    # Delaying the power-off is safe on any address.
    _load(tmp_path, "[kdump]\nenabled = true\nlisten_address = %s\n"
          % address)


def test_evacuate_without_power_off_needs_host_map(tmp_path):
    from oslo_config import cfg
    with pytest.raises(cfg.Error) as err:
        _load(tmp_path, "[kdump]\nenabled = true\naction = evacuate\n"
                        "listen_address = 192.0.2.1\n")
    assert str(err.value).startswith("[kdump] action = evacuate")
    assert "[kdump] host_map" in str(err.value)
    conf = _load(tmp_path, "[kdump]\nenabled = true\naction = evacuate\n"
                           "listen_address = 192.0.2.1\n"
                           "host_map = compute1:192.0.2.11\n")
    assert conf.kdump.action == "evacuate"
    # The delaying default needs no map: names are resolved.
    _load(tmp_path, "[kdump]\nenabled = true\nlisten_address = 192.0.2.1\n")


def test_old_action_name_wait_means_fence_after_dump(tmp_path):
    from instanceha.fsm import machine
    conf = _load(tmp_path, "[kdump]\nenabled = true\naction = wait\n"
                           "listen_address = 192.0.2.1\n")
    assert machine.Policy.from_conf(conf).kdump_action == "fence_after_dump"
