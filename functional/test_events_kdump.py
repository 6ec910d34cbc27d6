"""KdumpSource with the real fence_kdump_send (Debian fence-agents,
fetched by tools/get-fence-kdump-send.sh)."""

import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional import events_fixtures as fx  # noqa: E402
from instanceha.events import EventKind  # noqa: E402
from instanceha.sources.kdump import KdumpSource  # noqa: E402

HOSTS = [("uuid-compute1", "compute1"), ("uuid-compute2", "compute2")]
MESSAGE = struct.pack("<II", 0x1B302A40, 1)


@pytest.fixture(scope="module")
def sender():
    return fx.fence_kdump_send()


@pytest.fixture
def listener():
    made = []

    def make(host_map, hosts=HOSTS, **overrides):
        conf = fx.make_conf("kdump", enabled=True, listen_address="127.0.0.1",
                            port=0, host_map=host_map, resolve_names=False,
                            **overrides)
        sink = fx.Sink()
        source = KdumpSource(conf, sink, time.time, lambda: list(hosts))
        source.start()
        made.append(source)
        return source, sink
    yield make
    for source in made:
        source.stop()


def run_sender(sender, port, *args):
    result = subprocess.run([sender, "-p", str(port), "-c", "1"] + list(args)
                            + ["127.0.0.1"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr


def test_real_sender_from_suspect_hosts_address(listener, sender):
    # fence_kdump_send cannot choose its source; on loopback it is
    # 127.0.0.1, so that is compute1's address here.
    source, sink = listener({"compute1": "127.0.0.1",
                             "compute2": "127.0.0.2"})
    run_sender(sender, source.port)
    events = sink.wait(1)
    assert [(e.kind, e.host, e.name) for e in events] == [
        (EventKind.KDUMP, "uuid-compute1", "compute1")]
    assert events[0].source == "kdump"
    assert events[0].detail["address"] == "127.0.0.1"
    health = source.health()
    assert (health["received"], health["accepted"]) == (1, 1)


def test_real_sender_repeats_are_counted(listener, sender):
    source, sink = listener({"compute1": "127.0.0.1"})
    result = subprocess.run([sender, "-p", str(source.port), "-c", "2",
                             "-i", "1", "127.0.0.1"], capture_output=True,
                            timeout=30)
    assert result.returncode == 0
    events = sink.wait(2)
    assert [e.detail["count"] for e in events] == [1, 2]
    assert events[1].detail["first_at"] == events[0].at


def test_real_sender_from_unknown_address_does_nothing(listener, sender):
    source, sink = listener({"compute1": "127.0.0.11",
                             "compute2": "127.0.0.12"})
    run_sender(sender, source.port)
    assert fx.wait_for(lambda: source.health()["received"] >= 1, 10)
    assert sink.events == []
    assert source.health()["dropped_unknown"] == 1


def test_garbage_packets_counted_then_real_message_accepted(listener, sender):
    source, sink = listener({"compute1": "127.0.0.1"})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for junk in (b"", b"hello", struct.pack("<II", 0x1B302A40, 2),
                     struct.pack("<II", 0xDEADBEEF, 1), os.urandom(512)):
            s.sendto(junk, ("127.0.0.1", source.port))
    assert fx.wait_for(lambda: source.health()["dropped_bad"] >= 5, 10)
    run_sender(sender, source.port)
    assert [e.host for e in sink.wait(1)] == ["uuid-compute1"]
    assert source.health()["errors"] == 0


def test_several_hosts_by_source_address(listener):
    # The packet the real sender sends, from other 127.x addresses (one
    # machine playing several hosts).
    source, sink = listener({"compute1": "127.0.0.11",
                             "compute2": "127.0.0.12"})
    for src in ("127.0.0.12", "127.0.0.11"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src, 0))
            s.sendto(MESSAGE, ("127.0.0.1", source.port))
    events = sink.wait(2)
    assert sorted(e.name for e in events) == ["compute1", "compute2"]


def test_resolved_host_names(sender):
    """Without host_map: 'localhost' resolves to 127.0.0.1."""
    conf = fx.make_conf("kdump", listen_address="127.0.0.1", port=0,
                        resolve_names=True)
    sink = fx.Sink()
    source = KdumpSource(conf, sink, time.time,
                         lambda: [("uuid-local", "localhost")])
    source.start()
    try:
        run_sender(sender, source.port)
        assert [e.host for e in sink.wait(1)] == ["uuid-local"]
    finally:
        source.stop()


CHILD = textwrap.dedent("""
    import json, subprocess, sys, time
    sys.path.insert(0, %(repo)r)
    from instanceha import conf as ih_conf
    from instanceha.sources.kdump import KdumpSource
    conf = ih_conf.new_conf()
    conf([], project="instanceha", default_config_files=[])
    conf.set_override("listen_address", "0.0.0.0", group="kdump")
    conf.set_override("port", 0, group="kdump")
    conf.set_override("resolve_names", False, group="kdump")
    conf.set_override("host_map", {"compute1": "127.0.0.1",
                                   "compute5": "127.0.0.5"}, group="kdump")
    events = []
    source = KdumpSource(conf, events.append, time.time,
                         lambda: [("uuid-compute1", "compute1"),
                                  ("uuid-compute5", "compute5")])
    source.start()
    subprocess.run([%(sender)r, "-p", str(source.port), "-c", "1",
                    "127.0.0.1"], check=True, timeout=30)
    deadline = time.time() + 5
    while not events and time.time() < deadline:
        time.sleep(0.01)
    source.stop()
    print(json.dumps([[e.host, e.detail["address"]] for e in events]))
""")


def test_real_sender_with_another_source_address(sender):
    """The real sender as 'another host': inside a private network
    namespace, the loopback route's preferred source is set to 127.0.0.5,
    so fence_kdump_send's packets come from there. The host's own routes
    are never touched."""
    if os.geteuid() != 0 or not shutil.which("unshare") \
            or not shutil.which("ip"):
        pytest.skip("needs root, unshare and ip for a private netns")
    script = ("ip link set lo up && ip route replace local 127.0.0.1 dev lo "
              "table local proto kernel scope host src 127.0.0.5 && "
              'exec "$0" -c "$1"')
    result = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, sys.executable,
         CHILD % {"repo": str(REPO), "sender": sender}],
        capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "unshare failed" in result.stderr:
        pytest.skip("cannot make a network namespace: %s" % result.stderr)
    assert result.returncode == 0, result.stderr[-2000:]
    events = json.loads(result.stdout.strip().splitlines()[-1])
    assert events == [["uuid-compute5", "127.0.0.5"]]
